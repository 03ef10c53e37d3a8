"""Session keys: a pure function of the origin (seed ch. 1-2)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chats.gateway.inbound import inbound_parse
from chats.gateway.keys import main_key_for, session_key_for
from chats.gateway.models import DmScope
from tests.gateway.conftest import message

ALL_SCOPES = list(DmScope.values)


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        (DmScope.SHARED, "dm:shared"),
        (DmScope.PER_PEER, "dm:alice"),
        (DmScope.PER_CHANNEL_PEER, "dm:telegram:alice"),
        (DmScope.PER_ACCOUNT_CHANNEL_PEER, "dm:telegram:bot1:alice"),
    ],
)
def test_each_dm_scope_gives_its_key_shape(scope, expected):
    dm = message(channel="telegram", account_id="bot1", peer="alice", message_id="1")
    assert main_key_for(dm, dm_scope=scope) == expected


def test_per_channel_peer_is_the_default():
    dm = message(channel="telegram", peer="alice", message_id="1")
    assert main_key_for(dm) == "dm:telegram:alice"


def test_the_same_origin_always_gives_the_same_key():
    first = message(channel="slack", peer="bob", message_id="1", text="one")
    again = message(channel="slack", peer="bob", message_id="2", text="something else")
    assert main_key_for(first) == main_key_for(again)


@pytest.mark.parametrize("scope", ALL_SCOPES)
def test_a_group_is_keyed_by_its_group_whatever_the_dm_scope(scope):
    alice = message(channel="slack", chat_type="group", group_id="eng", peer="alice")
    bob = message(channel="slack", chat_type="group", group_id="eng", peer="bob")
    assert main_key_for(alice, dm_scope=scope) == "group:slack:eng"
    assert main_key_for(bob, dm_scope=scope) == "group:slack:eng"


def test_every_cron_run_gets_a_key_of_its_own():
    monday = message(channel="cron", chat_type="cron", job_id="mail", message_id="run-1")
    tuesday = message(channel="cron", chat_type="cron", job_id="mail", message_id="run-2")
    assert main_key_for(monday) == "cron:mail:run-1"
    assert main_key_for(tuesday) == "cron:mail:run-2"


def test_a_thread_gets_its_own_key_apart_from_its_group():
    group = message(channel="slack", chat_type="group", group_id="eng", peer="alice")
    thread = message(
        channel="slack", chat_type="thread", group_id="eng", thread_id="t1", peer="alice"
    )
    assert main_key_for(thread) == "thread:slack:eng:t1"
    assert main_key_for(thread) != main_key_for(group)


def test_the_agent_namespaces_the_key():
    assert session_key_for("work", "dm:telegram:alice") == "agent:work:dm:telegram:alice"
    assert session_key_for("work", "x") != session_key_for("home", "x")


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # account "a:b" + peer "c" must not meet account "a" + peer "b:c"
        ({"account_id": "a:b", "peer": "c"}, {"account_id": "a", "peer": "b:c"}),
        ({"peer": "x%3Ay"}, {"peer": "x:y"}),
    ],
)
def test_a_colon_in_an_id_cannot_make_two_origins_share_a_key(first, second):
    scope = DmScope.PER_ACCOUNT_CHANNEL_PEER
    assert main_key_for(message(**first), dm_scope=scope) != main_key_for(
        message(**second), dm_scope=scope
    )


def test_identity_links_merge_one_persons_peers_only_as_far_as_the_dm_scope_allows():
    links = {("telegram", "alice-tg"): "alice", ("slack", "u123"): "alice"}
    on_telegram = message(channel="telegram", peer="alice-tg")
    on_slack = message(channel="slack", peer="U123")  # Slack ids fold: the link is to u123
    stranger = message(channel="slack", peer="U999")
    per_peer = DmScope.PER_PEER
    assert main_key_for(on_telegram, dm_scope=per_peer, identity_links=links) == "dm:linked:alice"
    assert main_key_for(on_slack, dm_scope=per_peer, identity_links=links) == "dm:linked:alice"
    # per-channel-peer keeps the channel: a linked person has one session per channel
    assert main_key_for(on_telegram, identity_links=links) == "dm:telegram:linked:alice"
    assert main_key_for(on_slack, identity_links=links) == "dm:slack:linked:alice"
    assert main_key_for(stranger, identity_links=links) == "dm:slack:u999"
    # without the link, the same peers stay apart
    assert main_key_for(on_telegram, dm_scope=per_peer) != main_key_for(on_slack, dm_scope=per_peer)


def test_a_dm_from_alice_on_a_channel_named_linked_is_not_the_linked_alice():
    """The collision: two people, one session, before ``linked`` was reserved."""
    links = {("telegram", "alice-tg"): "alice"}
    linked_alice = message(channel="telegram", peer="alice-tg")
    other_alice = message(channel="linked", peer="alice")
    keys = {
        main_key_for(linked_alice, dm_scope=DmScope.PER_PEER, identity_links=links),
        main_key_for(other_alice, dm_scope=DmScope.PER_CHANNEL_PEER, identity_links=links),
    }
    assert keys == {"dm:linked:alice", "dm:%6Cinked:alice"}


def test_a_peer_named_shared_is_not_the_shared_session():
    someone = message(peer="shared")
    assert main_key_for(someone, dm_scope=DmScope.PER_PEER) == "dm:%73hared"
    assert main_key_for(someone, dm_scope=DmScope.SHARED) == "dm:shared"


# Names that try to look like another shape's key: the key's own words, separators,
# escapes, and case (folded on some channels, kept on others).
TRICKY = ["linked", "shared", "dm", "group", "thread", "cron", "a", "A", "%", "%3A", ":", "a:b"]
CHANNELS = ["linked", "shared", "dm", "slack", "whatsapp", "a"]
names = st.one_of(
    st.sampled_from(TRICKY),
    st.text(alphabet="aAbl:%3_-", min_size=1, max_size=6).filter(lambda s: s.strip()),
)
scopes = st.sampled_from(list(DmScope.values))


@st.composite
def origins(draw):
    """An origin, the dmScope it is keyed under, and the links in force."""
    channel = draw(st.sampled_from(CHANNELS))
    chat_type = draw(st.sampled_from(["dm", "dm", "group", "thread", "cron"]))
    fields = {"channel": channel, "chat_type": chat_type, "message_id": draw(names)}
    fields["account_id"] = draw(st.sampled_from(["default", "linked", "shared", "bot-1"]))
    fields["peer"] = draw(names)
    if chat_type == "group":
        fields["group_id"] = draw(names)
    elif chat_type == "thread":
        fields |= {"thread_id": draw(names), "parent_peer": draw(names)}
    elif chat_type == "cron":
        fields["job_id"] = draw(names)
    inbound = inbound_parse(fields | {"text": "hi"})
    link = draw(st.one_of(st.none(), st.sampled_from(TRICKY[:6] + ["alice"])))
    links = {(channel, inbound.peer.lower()): link} if link else {}
    return inbound, draw(scopes), links


def who_it_is(inbound, scope, links):
    """What a key must tell apart, written out plainly: the same tuple, the same session."""
    channel, kind = inbound.channel, inbound.chat_type

    # Rooms and threads as their platform gave them; a person's id, and a linked
    # person's name, lower-cased.
    if kind == "group":
        return ("group", channel, inbound.group_id)
    if kind == "thread":
        return ("thread", channel, inbound.thread_parent, inbound.thread_id)
    if kind == "cron":
        return ("cron", inbound.job_id, inbound.message_id)
    if scope == DmScope.SHARED:
        return ("shared",)
    linked = links.get((channel, inbound.peer.lower()))
    person = ("linked", linked.lower()) if linked else ("peer", inbound.peer.lower())
    if scope == DmScope.PER_PEER:
        return ("per-peer", *person)
    if scope == DmScope.PER_ACCOUNT_CHANNEL_PEER:
        return ("per-account-channel-peer", channel, inbound.account_id, *person)
    return ("per-channel-peer", channel, *person)


@settings(max_examples=500, deadline=None)
@given(origins(), origins())
def test_no_two_origins_share_a_key_unless_they_are_one_conversation(first, second):
    keys = [
        main_key_for(i, dm_scope=scope, identity_links=links) for i, scope, links in (first, second)
    ]
    same_key = keys[0] == keys[1]
    same_conversation = who_it_is(*first) == who_it_is(*second)
    assert same_key == same_conversation, (keys, who_it_is(*first), who_it_is(*second))


def test_identity_links_do_not_undo_shared_and_do_not_touch_groups():
    links = {("telegram", "alice-tg"): "alice"}
    dm = message(channel="telegram", peer="alice-tg")
    group = message(channel="telegram", chat_type="group", group_id="g", peer="alice-tg")
    assert main_key_for(dm, dm_scope=DmScope.SHARED, identity_links=links) == "dm:shared"
    assert main_key_for(group, identity_links=links) == "group:telegram:g"
