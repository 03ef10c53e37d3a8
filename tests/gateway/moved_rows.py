"""Rows of every gateway record, written as the ``chats`` app had them, and read back from ``gateway``.

Shared by the migration test on SQLite (``tests/gateway/test_app_migration.py``) and
on PostgreSQL (``tests/scaleout/test_gateway_migration_postgres.py``, in a child
``manage.py shell``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection

# The last state in which the gateway's records were the chats app's.
BEFORE = ("chats", "0005_step_process_group")

TOKEN = "123456:a-bot-token-that-must-survive-the-move"
MOVED_TABLES = [
    "binding",
    "channelaccount",
    "gatewayconfig",
    "gatewaytoken",
    "identitylink",
    "inboundrecord",
    "outboxmessage",
    "owneridentity",
    "resetpolicy",
    "sessionorigin",
]


def applied_state_apps():
    """The models as the migrations applied to the database have them."""
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(connection)
    return loader.project_state(list(loader.applied_migrations)).apps


def seed(apps) -> None:
    """Write one row of each gateway record with the models as they were at ``BEFORE``."""
    old = lambda name: apps.get_model("chats", name)  # noqa: E731
    owner = apps.get_model(settings.AUTH_USER_MODEL).objects.create(username="moved-owner")
    agent = old("Agent").objects.create(
        slug="moved", name="Moved", workspace="/tmp/moved", is_default=True
    )
    old("Binding").objects.create(
        agent=agent, channel="discord", guild_id="G", roles=["mod"], team_id="T"
    )
    chat = old("Conversation").objects.create(
        public_id="c_moved",
        owner=owner,
        agent=agent,
        title="A session",
        folder="/tmp/moved",
        session_key="agent:moved:telegram:dm:alice",
    )
    turn = old("Turn").objects.create(conversation=chat, number=1, folder="/tmp/moved")
    old("SessionOrigin").objects.create(
        conversation=chat, chat_type="dm", channel="telegram", peer="alice", reply_to={"chat": 42}
    )
    old("ChannelAccount").objects.create(
        owner=owner, channel="telegram", account_id="bot", secret=TOKEN
    )
    old("GatewayConfig").objects.create(pk=1, dm_scope="per-peer", routing_version=7)
    old("GatewayToken").objects.create(owner=owner, digest="d" * 64)
    old("IdentityLink").objects.create(name="alice", channel="telegram", peer="alice")
    old("OwnerIdentity").objects.create(owner=owner, channel="telegram", peer="me")
    old("ResetPolicy").objects.create(
        chat_type="dm", channel="telegram", mode="idle", idle_minutes=30
    )
    old("InboundRecord").objects.create(
        channel="telegram",
        account_id="bot",
        message_id="m1",
        conversation=chat,
        session_key=chat.session_key,
        agent_slug="moved",
        rule="default: → moved",
        outcome="started",
    )
    old("OutboxMessage").objects.create(
        conversation=chat,
        turn=turn,
        channel="telegram",
        account_id="bot",
        target={"chat_id": 42},
        text="the reply on its way",
    )
    # A permission given on a moved model is kept: its content type moves with it.
    content_type, _ = apps.get_model("contenttypes", "ContentType").objects.get_or_create(
        app_label="chats", model="binding"
    )
    permission, _ = apps.get_model("auth", "Permission").objects.get_or_create(
        content_type=content_type, codename="view_binding", defaults={"name": "Can view binding"}
    )
    owner.user_permissions.add(permission)


def read() -> dict:
    """What the gateway app's models find, and which of the old and new tables exist."""
    from django.contrib.auth import get_user_model

    from chats.gateway.models import (
        Binding,
        ChannelAccount,
        GatewayConfig,
        GatewayToken,
        IdentityLink,
        InboundRecord,
        OutboxMessage,
        OwnerIdentity,
        ResetPolicy,
        Session,
        SessionOrigin,
    )

    tables = set(connection.introspection.table_names())
    owner = get_user_model().objects.get(username="moved-owner")
    return {
        "gateway_tables": sorted(t for t in MOVED_TABLES if f"gateway_{t}" in tables),
        "chats_tables_left": sorted(t for t in MOVED_TABLES if f"chats_{t}" in tables),
        "binding": list(
            Binding.objects.values_list("agent__slug", "channel", "guild_id", "roles", "team_id")
        ),
        "origin": list(
            SessionOrigin.objects.values_list(
                "conversation__public_id", "chat_type", "channel", "peer", "reply_to"
            )
        ),
        "session": list(Session.objects.values_list("public_id", "session_key")),
        "account_secret": [account.secret for account in ChannelAccount.objects.all()],
        "config": list(GatewayConfig.objects.values_list("pk", "dm_scope", "routing_version")),
        "tokens": list(GatewayToken.objects.values_list("owner__username", "digest")),
        "links": list(IdentityLink.objects.values_list("name", "channel", "peer")),
        "identities": list(OwnerIdentity.objects.values_list("owner__username", "peer")),
        "policies": list(ResetPolicy.objects.values_list("chat_type", "mode", "idle_minutes")),
        "inbound": list(
            InboundRecord.objects.values_list("message_id", "conversation__public_id", "outcome")
        ),
        "outbox": list(
            OutboxMessage.objects.values_list("conversation__public_id", "turn__number", "text")
        ),
        "permissions": sorted(owner.get_all_permissions()),
    }


EXPECTED = {
    "gateway_tables": MOVED_TABLES,
    "chats_tables_left": [],
    "binding": [("moved", "discord", "G", ["mod"], "T")],
    "origin": [("c_moved", "dm", "telegram", "alice", {"chat": 42})],
    "session": [("c_moved", "agent:moved:telegram:dm:alice")],
    "account_secret": [TOKEN],
    "config": [(1, "per-peer", 7)],
    "tokens": [("moved-owner", "d" * 64)],
    "links": [("alice", "telegram", "alice")],
    "identities": [("moved-owner", "me")],
    "policies": [("dm", "idle", 30)],
    "inbound": [("m1", "c_moved", "started")],
    "outbox": [("c_moved", 1, "the reply on its way")],
    "permissions": ["gateway.view_binding"],
}
