"""Migration 0010: ids keep their case, and no session is merged or lost.

Rows are written as they were before (keys and bindings folded on Slack, Discord, Matrix
and Telegram; DM peers kept as given elsewhere), with that state's models; migrating
forward, each key is made again from its origin.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [("gateway", "0009_chat_migrations_and_group_names"), ("chats", "0012_persona_owner")]
ROOM = "!MixedRoomAbCdEf:example.org"


def seed(apps) -> dict:
    User = apps.get_model("auth", "User")
    Agent = apps.get_model("chats", "Agent")
    Conversation = apps.get_model("chats", "Conversation")
    SessionOrigin = apps.get_model("gateway", "SessionOrigin")
    Binding = apps.get_model("gateway", "Binding")
    GatewayConfig = apps.get_model("gateway", "GatewayConfig")
    owner = User.objects.create(username="owner", is_superuser=True)
    agent = Agent.objects.create(slug="main", name="Conch", workspace="/tmp", is_default=True)
    GatewayConfig.objects.update_or_create(pk=1, defaults={"routing_version": 7})
    start = timezone.now() - dt.timedelta(days=2)

    def session(n, key, *, hours, **origin):
        chat = Conversation.objects.create(
            owner=owner,
            agent=agent,
            title=f"Chat {n}",
            folder="/tmp",
            public_id=f"c_case{n}",
            session_key=key,
            session_started_at=start + dt.timedelta(hours=hours),
        )
        SessionOrigin.objects.create(conversation=chat, **origin)
        return chat.public_id

    made = {
        "room": session(
            1, "agent:main:group:matrix:!mixedroomabcdef%3Aexample.org", hours=0,
            chat_type="group", channel="matrix", peer="@bob:example.org", group_id=ROOM,
        ),
        "thread": session(
            2, "agent:main:thread:matrix:!mixedroomabcdef%3Aexample.org:$evabc", hours=1,
            chat_type="thread", channel="matrix", peer="@bob:example.org", group_id=ROOM,
            parent_peer=ROOM, thread_id="$EvAbC",
        ),
        "earlier": session(
            3, "agent:main:dm:imessage:Alice@Example.com", hours=2,
            chat_type="dm", channel="imessage", peer="Alice@Example.com",
        ),
        "later": session(
            4, "agent:main:dm:imessage:alice@example.com", hours=3,
            chat_type="dm", channel="imessage", peer="alice@example.com",
        ),
        "linked": session(
            5, "agent:main:dm:whatsapp:linked:Alice", hours=4,
            chat_type="dm", channel="whatsapp", peer="+4915100000",
        ),
    }  # fmt: skip
    for peer, kind, channel in [
        ("c0123abc", "group", "slack"),
        ("!mixedroomabcdef:example.org", "channel", "matrix"),
        ("Alice", "direct", "whatsapp"),
        ("-1001234567489", "group", "telegram"),
    ]:
        Binding.objects.create(
            agent=agent, channel=channel, peer=peer, peer_kind=kind, routing_version=7
        )
    return made


@pytest.mark.django_db(transaction=True)
def test_keys_and_bindings_keep_their_case_and_no_session_is_merged_or_lost():
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(BEFORE)
        made = seed(executor.loader.project_state(BEFORE).apps)
        MigrationExecutor(connection).migrate(latest)

        from chats.gateway.models import Binding, GatewayConfig, SessionOrigin
        from chats.models import Conversation

        chat = {name: Conversation.objects.get(public_id=pid) for name, pid in made.items()}
        bindings = dict(Binding.objects.values_list("channel", "peer"))
        version = GatewayConfig.objects.get(pk=1).routing_version
        earlier_origin = SessionOrigin.objects.get(pk=chat["earlier"].pk)
        later_origin = SessionOrigin.objects.get(pk=chat["later"].pk)
        changed_versions = set(Binding.objects.values_list("routing_version", flat=True))
    finally:
        MigrationExecutor(connection).migrate(latest)

    assert chat["room"].session_key == "agent:main:group:matrix:!MixedRoomAbCdEf%3Aexample.org"
    assert chat["thread"].session_key == (
        "agent:main:thread:matrix:!MixedRoomAbCdEf%3Aexample.org:$EvAbC"
    )
    assert chat["linked"].session_key == "agent:main:dm:whatsapp:linked:alice"
    # One person written two ways: one key, the later session live, the earlier kept.
    key = "agent:main:dm:imessage:alice@example.com"
    assert chat["earlier"].session_key == chat["later"].session_key == key
    assert (chat["earlier"].archived, chat["later"].archived) == (True, False)
    assert later_origin.previous_id == chat["earlier"].pk
    assert "one session from now on" in earlier_origin.ended_because
    assert bindings == {
        "slack": "C0123ABC",  # Slack's ids are upper-case
        "matrix": ROOM,  # its case learnt from the room's session
        "whatsapp": "alice",  # a person's id
        "telegram": "-1001234567489",
    }
    assert version == 8 and version in changed_versions
