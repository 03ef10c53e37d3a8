"""The gateway's records leave the ``chats`` app for their own (``gateway.0001_initial``).

Only Django's idea of them changes here: their tables and rows stay as they are.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("chats", "0005_step_process_group"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name="binding",
                    name="agent",
                ),
                migrations.RemoveField(
                    model_name="channelaccount",
                    name="owner",
                ),
                migrations.DeleteModel(
                    name="GatewayConfig",
                ),
                migrations.RemoveField(
                    model_name="gatewaytoken",
                    name="owner",
                ),
                migrations.DeleteModel(
                    name="IdentityLink",
                ),
                migrations.RemoveField(
                    model_name="inboundrecord",
                    name="conversation",
                ),
                migrations.RemoveField(
                    model_name="outboxmessage",
                    name="conversation",
                ),
                migrations.RemoveField(
                    model_name="outboxmessage",
                    name="turn",
                ),
                migrations.RemoveField(
                    model_name="owneridentity",
                    name="owner",
                ),
                migrations.DeleteModel(
                    name="ResetPolicy",
                ),
                migrations.RemoveField(
                    model_name="sessionorigin",
                    name="conversation",
                ),
                migrations.RemoveField(
                    model_name="sessionorigin",
                    name="previous",
                ),
                migrations.DeleteModel(
                    name="Session",
                ),
                migrations.DeleteModel(
                    name="Binding",
                ),
                migrations.DeleteModel(
                    name="ChannelAccount",
                ),
                migrations.DeleteModel(
                    name="GatewayToken",
                ),
                migrations.DeleteModel(
                    name="InboundRecord",
                ),
                migrations.DeleteModel(
                    name="OutboxMessage",
                ),
                migrations.DeleteModel(
                    name="OwnerIdentity",
                ),
                migrations.DeleteModel(
                    name="SessionOrigin",
                ),
            ],
        ),
    ]
