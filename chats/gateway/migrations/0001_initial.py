"""The gateway becomes an app of its own (label ``gateway``), keeping every row.

Its records were the ``chats`` app's (``chats.0003_gateway``, ``chats.0004_sealed_secrets``,
and ``Binding`` from ``chats.0001_initial``). ``chats.0006_gateway_app`` drops them from
``chats``'s state; here they enter ``gateway``'s on the same tables, which are then
renamed ``gateway_*``. Their content types move too, so permissions and admin history
keep pointing at them.
"""

import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

import chats.secretbox

MOVED = [
    "binding",
    "channelaccount",
    "gatewayconfig",
    "gatewaytoken",
    "identitylink",
    "inboundrecord",
    "outboxmessage",
    "owneridentity",
    "resetpolicy",
    "session",
    "sessionorigin",
]


def content_types_move(apps, schema_editor, *, source="chats", target="gateway"):
    ContentType = apps.get_model("contenttypes", "ContentType")
    types = ContentType.objects.using(schema_editor.connection.alias)
    for model in MOVED:
        if not types.filter(app_label=target, model=model).exists():
            types.filter(app_label=source, model=model).update(app_label=target)


def content_types_back(apps, schema_editor):
    content_types_move(apps, schema_editor, source="gateway", target="chats")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("chats", "0006_gateway_app"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="GatewayConfig",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "dm_scope",
                            models.CharField(
                                choices=[
                                    (
                                        "shared",
                                        "shared: every DM in one session (leaks between people)",
                                    ),
                                    ("per-peer", "per-peer: one session per person"),
                                    (
                                        "per-channel-peer",
                                        "per-channel-peer: one per person per app",
                                    ),
                                    (
                                        "per-account-channel-peer",
                                        "per-account-channel-peer: one per person per app per bot account",
                                    ),
                                ],
                                default="per-channel-peer",
                                max_length=32,
                            ),
                        ),
                        (
                            "maintenance_mode",
                            models.CharField(
                                choices=[
                                    ("enforce", "enforce: prune and compact"),
                                    ("warn", "warn: only report what it would do"),
                                ],
                                default="enforce",
                                max_length=8,
                            ),
                        ),
                        (
                            "prune_after_days",
                            models.PositiveIntegerField(
                                default=30,
                                help_text="Sessions whose last interaction is older are deleted (never a working or pinned chat).",
                                validators=[django.core.validators.MinValueValidator(1)],
                            ),
                        ),
                        (
                            "max_entries",
                            models.PositiveIntegerField(
                                default=500,
                                help_text="A session's transcript is compacted to at most this many entries.",
                                validators=[django.core.validators.MinValueValidator(2)],
                            ),
                        ),
                        (
                            "routing_version",
                            models.PositiveBigIntegerField(
                                default=0,
                                editable=False,
                                help_text="Bumped whenever bindings, agents or links change.",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "gateway settings",
                        "verbose_name_plural": "gateway settings",
                        "db_table": "chats_gatewayconfig",
                    },
                ),
                migrations.CreateModel(
                    name="Session",
                    fields=[],
                    options={
                        "verbose_name": "gateway session",
                        "proxy": True,
                        "indexes": [],
                        "constraints": [],
                    },
                    bases=("chats.conversation",),
                ),
                migrations.CreateModel(
                    name="Binding",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("channel", models.CharField(max_length=32)),
                        (
                            "account_id",
                            models.CharField(
                                blank=True, help_text='"*" for any account.', max_length=128
                            ),
                        ),
                        ("peer", models.CharField(blank=True, max_length=128)),
                        ("parent_peer", models.CharField(blank=True, max_length=128)),
                        ("guild_id", models.CharField(blank=True, max_length=128)),
                        ("roles", models.JSONField(blank=True, default=list)),
                        ("team_id", models.CharField(blank=True, max_length=128)),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        (
                            "agent",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="bindings",
                                to="chats.agent",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "chats_binding",
                    },
                ),
                migrations.CreateModel(
                    name="GatewayToken",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("digest", models.CharField(max_length=64, unique=True)),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "owner",
                            models.ForeignKey(
                                help_text="Whose chats the gateway's sessions are.",
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="gateway_tokens",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "chats_gatewaytoken",
                    },
                ),
                migrations.CreateModel(
                    name="IdentityLink",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "name",
                            models.SlugField(
                                help_text="The person's one name across channels.", max_length=64
                            ),
                        ),
                        ("channel", models.CharField(max_length=32)),
                        ("peer", models.CharField(max_length=128)),
                    ],
                    options={
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("channel", "peer"), name="identity_link_per_peer"
                            )
                        ],
                        "db_table": "chats_identitylink",
                    },
                ),
                migrations.CreateModel(
                    name="ResetPolicy",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "chat_type",
                            models.CharField(
                                blank=True,
                                choices=[
                                    ("dm", "direct message"),
                                    ("group", "group"),
                                    ("thread", "thread"),
                                ],
                                help_text="Empty for every chat type.",
                                max_length=8,
                            ),
                        ),
                        (
                            "channel",
                            models.CharField(
                                blank=True, help_text="Empty for every channel.", max_length=32
                            ),
                        ),
                        (
                            "mode",
                            models.CharField(
                                choices=[
                                    (
                                        "daily",
                                        "daily at a set hour (and after idle minutes, if set)",
                                    ),
                                    ("idle", "after idle minutes"),
                                    ("none", "never"),
                                ],
                                default="daily",
                                max_length=8,
                            ),
                        ),
                        (
                            "at_hour",
                            models.PositiveSmallIntegerField(
                                default=4,
                                help_text="Local hour of the daily reset (CONCH_TIME_ZONE).",
                                validators=[django.core.validators.MaxValueValidator(23)],
                            ),
                        ),
                        (
                            "idle_minutes",
                            models.PositiveIntegerField(
                                blank=True,
                                null=True,
                                validators=[django.core.validators.MinValueValidator(1)],
                            ),
                        ),
                    ],
                    options={
                        "verbose_name_plural": "reset policies",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("chat_type", "channel"), name="reset_policy_scope"
                            )
                        ],
                        "db_table": "chats_resetpolicy",
                    },
                ),
                migrations.CreateModel(
                    name="ChannelAccount",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("channel", models.CharField(max_length=32)),
                        ("account_id", models.CharField(max_length=128)),
                        (
                            "secret",
                            chats.secretbox.EncryptedTextField(
                                blank=True, help_text="The bot's token for sending replies."
                            ),
                        ),
                        (
                            "webhook_secret_digest",
                            models.CharField(blank=True, editable=False, max_length=64),
                        ),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        (
                            "owner",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="channel_accounts",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("channel", "account_id"), name="channel_account_unique"
                            )
                        ],
                        "db_table": "chats_channelaccount",
                    },
                ),
                migrations.CreateModel(
                    name="InboundRecord",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("channel", models.CharField(max_length=32)),
                        ("account_id", models.CharField(max_length=128)),
                        ("message_id", models.CharField(max_length=255)),
                        ("session_key", models.CharField(max_length=512)),
                        ("agent_slug", models.CharField(max_length=64)),
                        ("rule", models.CharField(max_length=255)),
                        ("outcome", models.CharField(max_length=32)),
                        ("shared_dm", models.BooleanField(default=False)),
                        ("received_at", models.DateTimeField(default=django.utils.timezone.now)),
                        (
                            "conversation",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="chats.conversation",
                            ),
                        ),
                    ],
                    options={
                        "indexes": [models.Index(fields=["received_at"], name="inbound_received")],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("channel", "account_id", "message_id"), name="inbound_once"
                            )
                        ],
                        "db_table": "chats_inboundrecord",
                    },
                ),
                migrations.CreateModel(
                    name="OutboxMessage",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("channel", models.CharField(max_length=32)),
                        ("account_id", models.CharField(max_length=128)),
                        (
                            "target",
                            models.JSONField(
                                default=dict, help_text="The chat on the app, e.g. chat_id."
                            ),
                        ),
                        ("text", models.TextField()),
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("pending", "waiting to be sent"),
                                    ("sending", "being sent"),
                                    ("sent", "sent"),
                                    ("failed", "failed for good"),
                                ],
                                default="pending",
                                max_length=8,
                            ),
                        ),
                        ("attempts", models.PositiveIntegerField(default=0)),
                        ("parts_sent", models.PositiveIntegerField(default=0)),
                        (
                            "next_attempt_at",
                            models.DateTimeField(default=django.utils.timezone.now),
                        ),
                        ("claimed_until", models.DateTimeField(blank=True, null=True)),
                        ("last_error", models.TextField(blank=True)),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("sent_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "conversation",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="chats.conversation",
                            ),
                        ),
                        (
                            "turn",
                            models.OneToOneField(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="outbox_message",
                                to="chats.turn",
                            ),
                        ),
                    ],
                    options={
                        "ordering": ["created_at", "id"],
                        "indexes": [
                            models.Index(fields=["state", "next_attempt_at"], name="outbox_due")
                        ],
                        "db_table": "chats_outboxmessage",
                    },
                ),
                migrations.CreateModel(
                    name="OwnerIdentity",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("channel", models.CharField(max_length=32)),
                        (
                            "account_id",
                            models.CharField(
                                blank=True, help_text="Empty for any account.", max_length=128
                            ),
                        ),
                        (
                            "peer",
                            models.CharField(help_text="Your id on that channel.", max_length=128),
                        ),
                        (
                            "owner",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="channel_identities",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "verbose_name_plural": "owner identities",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("owner", "channel", "account_id", "peer"),
                                name="owner_identity_unique",
                            )
                        ],
                        "db_table": "chats_owneridentity",
                    },
                ),
                migrations.CreateModel(
                    name="SessionOrigin",
                    fields=[
                        (
                            "conversation",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                primary_key=True,
                                related_name="gateway",
                                serialize=False,
                                to="chats.conversation",
                            ),
                        ),
                        (
                            "chat_type",
                            models.CharField(
                                choices=[
                                    ("dm", "direct message"),
                                    ("group", "group"),
                                    ("thread", "thread"),
                                    ("cron", "cron run"),
                                ],
                                max_length=8,
                            ),
                        ),
                        ("channel", models.CharField(max_length=32)),
                        ("account_id", models.CharField(blank=True, max_length=128)),
                        ("peer", models.CharField(blank=True, max_length=128)),
                        ("group_id", models.CharField(blank=True, max_length=128)),
                        ("thread_id", models.CharField(blank=True, max_length=128)),
                        ("parent_peer", models.CharField(blank=True, max_length=128)),
                        ("guild_id", models.CharField(blank=True, max_length=128)),
                        ("team_id", models.CharField(blank=True, max_length=128)),
                        ("job_id", models.CharField(blank=True, max_length=128)),
                        (
                            "reply_to",
                            models.JSONField(
                                blank=True,
                                default=dict,
                                help_text="Where replies go: the latest message's chat.",
                            ),
                        ),
                        (
                            "rule",
                            models.CharField(
                                blank=True, help_text="The routing rule that won.", max_length=255
                            ),
                        ),
                        ("dm_scope", models.CharField(blank=True, max_length=32)),
                        ("started_because", models.TextField(blank=True)),
                        ("ended_because", models.TextField(blank=True)),
                        (
                            "reset_pending",
                            models.TextField(
                                blank=True,
                                help_text="A reset waiting for the running reply to end.",
                            ),
                        ),
                        (
                            "previous",
                            models.ForeignKey(
                                blank=True,
                                help_text="The generation this one started fresh from.",
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="next_generations",
                                to="chats.conversation",
                            ),
                        ),
                    ],
                    options={
                        "indexes": [
                            models.Index(
                                fields=["chat_type", "channel"], name="session_origin_scope"
                            )
                        ],
                        "db_table": "chats_sessionorigin",
                    },
                ),
            ],
        ),
        migrations.AlterModelTable(
            name="gatewayconfig",
            table=None,
        ),
        migrations.AlterModelTable(
            name="binding",
            table=None,
        ),
        migrations.AlterModelTable(
            name="gatewaytoken",
            table=None,
        ),
        migrations.AlterModelTable(
            name="identitylink",
            table=None,
        ),
        migrations.AlterModelTable(
            name="resetpolicy",
            table=None,
        ),
        migrations.AlterModelTable(
            name="channelaccount",
            table=None,
        ),
        migrations.AlterModelTable(
            name="inboundrecord",
            table=None,
        ),
        migrations.AlterModelTable(
            name="outboxmessage",
            table=None,
        ),
        migrations.AlterModelTable(
            name="owneridentity",
            table=None,
        ),
        migrations.AlterModelTable(
            name="sessionorigin",
            table=None,
        ),
        migrations.RunPython(content_types_move, content_types_back),
    ]
