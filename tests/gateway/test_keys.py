"""Session keys: a pure function of the origin (seed ch. 1-2)."""

from __future__ import annotations

import pytest

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


def test_identity_links_merge_one_persons_peers_across_channels_only_where_configured():
    links = {("telegram", "alice-tg"): "alice", ("slack", "U123"): "alice"}
    on_telegram = message(channel="telegram", peer="alice-tg")
    on_slack = message(channel="slack", peer="U123")
    stranger = message(channel="slack", peer="U999")
    assert main_key_for(on_telegram, identity_links=links) == "dm:linked:alice"
    assert main_key_for(on_slack, identity_links=links) == "dm:linked:alice"
    assert main_key_for(stranger, identity_links=links) == "dm:slack:U999"
    # without the link, the same peers stay apart
    assert main_key_for(on_telegram) != main_key_for(on_slack)


def test_identity_links_do_not_undo_shared_and_do_not_touch_groups():
    links = {("telegram", "alice-tg"): "alice"}
    dm = message(channel="telegram", peer="alice-tg")
    group = message(channel="telegram", chat_type="group", group_id="g", peer="alice-tg")
    assert main_key_for(dm, dm_scope=DmScope.SHARED, identity_links=links) == "dm:shared"
    assert main_key_for(group, identity_links=links) == "group:telegram:g"
