"""A cold channel is routed by looking its keys up, tier by tier, and answers as a warm one.

Until a channel's bindings are indexed, :class:`RouteIndex` routes its messages
with one indexed query a tier (``_tier_rows``), never reading the channel's
bindings whole; these tests hold it to the same answers as the warm index, to a
query count bounded by the tiers, and to SQLite's index for each lookup.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from chats.gateway.inbound import InboundError, inbound_parse
from chats.gateway.ladder import Tier
from chats.gateway.models import Binding
from chats.gateway.routing import TABLES, RouteIndex, tier_statement
from tests.gateway.conftest import message

# Few values, so that bindings and messages meet often: ids in both cases on a
# channel that folds them (slack) and one that keeps them (whatsapp), "*" and empty.
CHANNELS = ("slack", "whatsapp")
IDS = ("alice", "Alice", "room", "Room", "hall")
ACCOUNTS = ("", "default", "bot1", "bot2")
GUILDS = ("G1", "G2")
TEAMS = ("T1", "T2")
ROLES = ("mod", "admin")
KINDS = ("", "direct", "group", "channel", "cron")
TIER_NAMES = ("peer", "parent", "wildcard", "guild_roles", "guild", "team", "account", "channel")


def sometimes(draw, values):
    """Mostly nothing, sometimes one of ``values``: a rule's extra constraint."""
    return draw(st.sampled_from(("", "", "", *values)))


@st.composite
def stored_bindings(draw):
    """A row as it may be stored: a tier's key, now and then another field's too, and
    ids as ``Binding.clean`` spells them or not (older rows, bulk inserts); ties too.
    Both ways read the same rows, so they must agree on any."""
    tier = draw(st.sampled_from(TIER_NAMES))
    row = dict(
        agent=draw(st.sampled_from(("main", "work", "home"))),
        channel=draw(st.sampled_from(CHANNELS)),
        account_id=draw(st.sampled_from(("*", "*", "", "bot1"))),
        peer="",
        peer_kind="",
        parent_peer="",
        guild_id=sometimes(draw, GUILDS) if tier in ("peer", "parent", "team") else "",
        roles=[],
        team_id=sometimes(draw, TEAMS) if tier not in ("account", "channel") else "",
    )
    if tier in ("peer", "wildcard"):
        row["peer"] = draw(st.sampled_from(IDS)) if tier == "peer" else "*"
        row["peer_kind"] = draw(st.sampled_from(KINDS))
    if tier == "peer":
        row["parent_peer"] = sometimes(draw, IDS)
    elif tier == "parent":
        row["parent_peer"] = draw(st.sampled_from(IDS))
    elif tier in ("guild_roles", "guild"):
        row["guild_id"] = draw(st.sampled_from(GUILDS))
        if tier == "guild_roles":
            row["roles"] = draw(st.lists(st.sampled_from(ROLES), min_size=1, unique=True))
    elif tier == "team":
        row["team_id"] = draw(st.sampled_from(TEAMS))
    elif tier == "account":
        row["account_id"] = draw(st.sampled_from(ACCOUNTS))
    elif tier == "channel":
        row["account_id"] = "*"
    return row


@st.composite
def inbound_messages(draw):
    chat_type = draw(st.sampled_from(("dm", "group", "thread", "cron")))
    body = {
        "channel": draw(st.sampled_from((*CHANNELS, "signal"))),
        "chat_type": chat_type,
        "peer": draw(st.sampled_from(IDS)),
        "text": "hi",
        "account_id": draw(st.sampled_from(("", "default", "bot1", "BOT2", "bot3"))),
        "guild_id": sometimes(draw, GUILDS),
        "member_roles": draw(st.lists(st.sampled_from((*ROLES, "guest")), unique=True)),
        "team_id": sometimes(draw, TEAMS),
    }
    if chat_type in ("group", "thread"):
        body["group_id"] = draw(st.sampled_from(IDS))
    if chat_type == "thread":
        body["thread_id"] = draw(st.sampled_from((*IDS, "t1")))
        body["parent_peer"] = sometimes(draw, IDS)
    if chat_type == "cron":
        body["job_id"] = draw(st.sampled_from(("alice", "nightly")))
    return body


CHAT_OF_KIND = {"direct": "dm", "group": "group", "channel": "thread", "cron": "cron"}
FIELD_OF_CHAT = {"dm": "peer", "group": "group_id", "thread": "thread_id", "cron": "job_id"}


@st.composite
def aimed_messages(draw, row):
    """A message that one stored row was written for, more or less: its channel, its
    tier's key where that key is read (a peer as the DM's sender, the group, the thread,
    the job, or a thread's parent), its account, guild, roles and team, each at times
    left out, so that both the rule and those below it are met."""
    body = draw(inbound_messages())
    body["channel"] = row["channel"]
    keep = st.sampled_from((True, True, True, False))
    if row["account_id"] != "*" and draw(keep):
        body["account_id"] = row["account_id"]
    if row["peer"] not in ("", "*") and draw(keep):
        if draw(st.booleans()):  # the rule's own conversation
            chat = CHAT_OF_KIND.get(row["peer_kind"]) or draw(st.sampled_from(list(FIELD_OF_CHAT)))
            body = {**body, "chat_type": chat, "group_id": body.get("group_id") or "room"}
            body[FIELD_OF_CHAT[chat]] = row["peer"]
        else:  # a thread under it
            body |= {"chat_type": "thread", "group_id": row["peer"], "parent_peer": "",
                     "thread_id": "t1"}  # fmt: skip
    if row["peer"] == "*" and row["peer_kind"] in CHAT_OF_KIND and draw(keep):
        chat = CHAT_OF_KIND[row["peer_kind"]]
        body = {**body, "chat_type": chat, "group_id": body.get("group_id") or "room"}
        body.setdefault(FIELD_OF_CHAT[chat], "someone")
    if row["parent_peer"] and draw(keep):
        body |= {"chat_type": "thread", "parent_peer": row["parent_peer"], "thread_id": "t1",
                 "group_id": body.get("group_id") or "room"}  # fmt: skip
    if row["guild_id"] and draw(keep):
        body["guild_id"] = row["guild_id"]
        if row["roles"] and draw(keep):
            body["member_roles"] = [*row["roles"][:1], "guest"]
    if row["team_id"] and draw(keep):
        body["team_id"] = row["team_id"]
    return body


def answer(route):
    """Everything a route says: the agent, the rule (tier, binding, words) and the keys."""
    rule = route.rule
    return (route.agent.slug, rule.tier, rule.binding_id, rule.label, route.session_key)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rows=st.lists(stored_bindings(), max_size=14), data=st.data())
def test_a_cold_channel_routes_every_message_as_the_warm_index_does(personas, rows, data):
    anywhere = inbound_messages()
    aimed = st.sampled_from(rows).flatmap(aimed_messages) if rows else anywhere
    bodies = data.draw(st.lists(st.one_of(anywhere, aimed, aimed), min_size=1, max_size=10))
    inbound = []
    for number, body in enumerate(bodies):
        try:
            inbound.append(inbound_parse({**body, "message_id": f"m{number}"}))
        except InboundError:
            continue
    assume(inbound)
    with transaction.atomic():
        Binding.objects.bulk_create(
            [Binding(**{**row, "agent": personas[row["agent"]]}) for row in rows]
        )
        warm = RouteIndex.load()
        warm.load_every_channel()
        cold = RouteIndex.load(warm_rows_per_message=0)  # never indexes: always looks up
        warming = RouteIndex.load(warm_rows_per_message=2)  # cold, then warm, mid-way
        for one in inbound:
            expected = answer(warm.resolve(one))
            assert answer(cold.resolve(one)) == expected, one
            assert answer(warming.resolve(one)) == expected, one
        assert not any(cold.is_warm(channel) for channel in CHANNELS)
        transaction.set_rollback(True)


def test_a_cold_start_reads_no_bindings_and_a_message_reads_one_key_a_tier(
    personas, django_assert_num_queries
):
    Binding.objects.bulk_create(
        [Binding(agent=personas["work"], channel="slack", peer=f"p{i}", peer_kind="direct")
         for i in range(50)]
        + [Binding(agent=personas["home"], channel="slack", guild_id="G", roles=["mod"],
                   account_id="*"),
           Binding(agent=personas["home"], channel="telegram", account_id="*")]
    )  # fmt: skip
    with django_assert_num_queries(4):  # settings, default agent, agents, identity links
        index = RouteIndex.load(warm_rows_per_message=0)
    with django_assert_num_queries(1):  # the peer tier's key, and it fits
        assert index.resolve(message(channel="slack", peer="p7")).agent.slug == "work"
    with django_assert_num_queries(0):  # that key is remembered until slack is indexed
        assert index.resolve(message(channel="slack", peer="p7")).rule.tier == Tier.PEER
    # A stranger in a guild's group, in a team, down to the default: every tier it has a
    # key for, once (guild+roles and guild in one query), and no more.
    stranger = message(
        channel="slack", chat_type="thread", peer="x", group_id="c", thread_id="t",
        guild_id="H", member_roles=["mod"], team_id="T",
    )  # fmt: skip
    consulted = {"peer", "parent", "wildcard", "guild", "team", "account", "channel"}
    with django_assert_num_queries(len(consulted)):
        assert index.resolve(stranger).rule.tier == Tier.DEFAULT
    assert len(consulted) < len(TABLES)  # the bound: fewer queries than the ladder's tables
    with django_assert_num_queries(1):  # guild G's rules: one query serves both guild tiers
        assert index.resolve(message(**{**stranger.as_dict(), "guild_id": "G"})).agent.slug == (
            "home"
        )
    with django_assert_num_queries(4):  # a DM on telegram: peer, wildcard, account, channel
        assert index.resolve(message(channel="telegram", peer="x")).rule.tier == Tier.CHANNEL
    assert index.count == 0  # nothing was indexed: every answer was looked up


def test_each_cold_message_indexes_a_few_more_bindings_until_the_channel_is_warm(
    personas, django_assert_num_queries
):
    Binding.objects.bulk_create(
        [Binding(agent=personas["work"], channel="slack", peer=f"p{i}", peer_kind="direct")
         for i in range(50)]
    )  # fmt: skip
    index = RouteIndex.load(warm_rows_per_message=20)
    for number in range(3):  # 20, 20, then the last 10: warm
        assert not index.is_warm("slack")
        with django_assert_num_queries(2):  # the peer key, and twenty more bindings
            assert index.resolve(message(channel="slack", peer=f"p{number}")).rule.tier == (
                Tier.PEER
            )
    assert index.is_warm("slack") and index.count == 50
    with django_assert_num_queries(0):
        assert index.resolve(message(channel="slack", peer="p49")).agent.slug == "work"
    whole = RouteIndex.load()
    whole.load_channel("slack")
    assert index.peer == whole.peer and index.parent == whole.parent


@pytest.mark.parametrize("name", TABLES)
def test_each_cold_lookup_is_an_index_search_not_a_walk_of_the_channel(db, name):
    key = "default" if name == "account" else "k"
    sql, params = tier_statement("slack", name, key)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":  # an empty table: make a scan cost what it would
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = [row[0] for row in cursor.fetchall()]
            searches = [step for step in plan if "Index Scan" in step or "Seq Scan" in step]
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            plan = [row[-1] for row in cursor.fetchall()]
            searches = [step for step in plan if step.startswith(("SEARCH", "SCAN"))]
    assert len(searches) >= 1, plan
    assert all("binding_by_tier_keys" in step for step in searches), plan
    assert not any("TEMP B-TREE" in step or "Sort" in step for step in plan), plan
