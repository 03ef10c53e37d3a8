"""The session lookup a message to a live session makes: one written-out statement that must
find what the ORM's queries find (``session_active``, ``is_owner_peer``), read what taking
the message in needs with no further query, and hold the chat's row lock (PostgreSQL: see
tests/scaleout/test_inbound_postgres.py)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from chats.gateway.inbound import inbound_parse
from chats.gateway.models import GatewayConfig, OwnerIdentity, SessionOrigin
from chats.gateway.selectors import is_owner_peer, session_active, session_for_inbound
from chats.models import Turn
from chats.runtime.chats import conversation_archive
from tests.factories import ChatFactory, UserFactory

pytestmark = pytest.mark.django_db

KEY = "agent:main:dm:telegram:alice"


def dm(**fields):
    body = {"channel": "telegram", "chat_type": "dm", "peer": "alice", "text": "hi"}
    return inbound_parse({"message_id": "1", **body, **fields})


def session(owner, agent, key=KEY, **origin):
    chat = ChatFactory(owner=owner, agent=agent, session_key=key)
    fields = {"chat_type": "dm", "channel": "telegram", "account_id": "default", "peer": "alice"}
    SessionOrigin.objects.create(
        conversation=chat, reply_to={"chat_id": "alice"}, rule="default", **fields | origin
    )
    return chat


def lookup(owner, agent, inbound=None, key=KEY):
    return session_for_inbound(
        agent_id=agent.pk, session_key=key, owner=owner, inbound=inbound or dm()
    )


def test_it_finds_the_live_generation_and_reads_its_origin_with_it(
    owner, agent, django_assert_num_queries
):
    chat = session(owner, agent)
    assert session_active(agent_id=agent.pk, session_key=KEY).pk == chat.pk
    with django_assert_num_queries(1):
        found = lookup(owner, agent)
        assert found.pk == chat.pk
        assert (found.public_id, found.status, found.taint, found.mode) == (
            chat.public_id,
            chat.status,
            chat.taint,
            chat.mode,
        )
        assert found.last_interaction_at == chat.last_interaction_at
        origin = found.gateway
        assert (origin.channel, origin.account_id, origin.rule) == (
            "telegram",
            "default",
            "default",
        )
        assert origin.reply_to == {"chat_id": "alice"}  # decoded, as the ORM reads JSON
    stored = GatewayConfig.objects.values_list("routing_version", flat=True).first()
    assert found.routing_version_stored == stored


def test_whether_a_reply_runs_is_what_the_chats_open_reply_says(owner, agent):
    """It decides whether the message starts a reply or waits for the running one."""
    chat = session(owner, agent)
    Turn.objects.create(conversation=chat, number=1, ended_at=timezone.now())
    assert lookup(owner, agent).reply_running is False
    Turn.objects.create(conversation=chat, number=2)
    assert lookup(owner, agent).reply_running is True
    other = session(owner, agent, key="agent:main:dm:telegram:bob")
    Turn.objects.create(conversation=other, number=1)  # another chat's reply is not this one's
    assert lookup(owner, agent, dm(peer="bob"), key="agent:main:dm:telegram:bob").reply_running
    Turn.objects.filter(conversation=chat, number=2).update(ended_at=timezone.now())
    assert lookup(owner, agent).reply_running is False


def test_an_archived_generation_is_not_the_session(owner, agent):
    chat = session(owner, agent)
    conversation_archive(conversation=chat)
    assert lookup(owner, agent) is None


def test_another_persons_or_another_personas_chat_is_never_the_session(owner, agent, personas):
    theirs = session(UserFactory(username="someone"), agent)
    assert lookup(owner, agent) is None
    conversation_archive(conversation=theirs)  # a key is one live chat's at a time
    session(owner, personas["work"])
    assert lookup(owner, agent) is None
    assert lookup(owner, personas["work"]) is not None


@pytest.mark.parametrize(
    ("stored", "channel", "account_id", "peer"),
    [
        (("telegram", "", "alice"), "telegram", "default", "alice"),  # any account
        (("telegram", "default", "alice"), "telegram", "default", "alice"),
        (("telegram", "bot2", "alice"), "telegram", "default", "alice"),  # another account
        (("Telegram", "", "alice"), "telegram", "default", "alice"),  # any case, as iexact
        (("telegram", "", "alice"), "telegram", "default", "bob"),
        (("slack", "", "alice"), "telegram", "default", "alice"),
        (("my_app", "", "alice"), "myxapp", "default", "alice"),  # _ is no wildcard
        (("my%", "", "alice"), "my-app", "default", "alice"),  # nor %
        (("my_app", "", "alice"), "my_app", "default", "alice"),
    ],
)
def test_whether_the_sender_is_the_owner_is_what_is_owner_peer_says(
    owner, agent, stored, channel, account_id, peer
):
    """It decides the chat's taint: someone else's words must never read as the owner's."""
    OwnerIdentity.objects.create(
        owner=owner, channel=stored[0], account_id=stored[1], peer=stored[2]
    )
    session(owner, agent)
    inbound = dm(channel=channel, account_id=account_id, peer=peer)
    expected = is_owner_peer(owner=owner, channel=channel, account_id=account_id, peer=peer)
    assert lookup(owner, agent, inbound).from_owner is expected


def test_another_persons_identity_makes_no_one_the_owner(owner, agent):
    OwnerIdentity.objects.create(
        owner=UserFactory(username="someone"), channel="telegram", peer="alice"
    )
    session(owner, agent)
    assert lookup(owner, agent).from_owner is False


def test_a_group_asks_nothing_about_the_owner(owner, agent):
    key = "agent:main:telegram:group:family"
    session(owner, agent, key=key, chat_type="group", group_id="family")
    group = dm(chat_type="group", group_id="family")
    assert lookup(owner, agent, group, key=key).from_owner is None
