"""Which agent: the most-specific-wins ladder, an index instead of a scan, ties refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.core.exceptions import ValidationError

from chats.gateway.ladder import LADDER, CompiledBinding, Tier
from chats.gateway.models import Binding, GatewayConfig
from chats.gateway.routing import RouteIndex, resolve_route, route_index, route_index_catch_up
from tests.factories import AgentFactory
from tests.gateway.conftest import message

# One origin that every tier's binding below fits: a thread in a Discord channel of
# guild G, from a moderator, in team T, on the bot account bot1.
EVERYTHING = dict(
    channel="discord",
    account_id="bot1",
    chat_type="thread",
    peer="alice",
    group_id="general",
    thread_id="t1",
    guild_id="G",
    member_roles=["mod"],
    team_id="T",
)

TIER_BINDINGS = {
    Tier.PEER: {"peer": "t1", "peer_kind": "channel", "account_id": "*"},
    Tier.PARENT_PEER: {"parent_peer": "general", "account_id": "*"},
    Tier.WILDCARD_PEER: {"peer": "*", "peer_kind": "channel", "account_id": "*"},
    Tier.GUILD_ROLES: {"guild_id": "G", "roles": ["mod"], "account_id": "*"},
    Tier.GUILD: {"guild_id": "G", "account_id": "*"},
    Tier.TEAM: {"team_id": "T", "account_id": "*"},
    Tier.ACCOUNT: {"account_id": "bot1"},
    Tier.CHANNEL: {"account_id": "*"},
}


def agent_ns(id, slug, default=False):
    return SimpleNamespace(id=id, slug=slug, name=slug, workspace=f"/ws/{slug}", is_default=default)


def binding_ns(agent_id, channel="discord", **fields):
    base = dict(
        account_id="", peer="", peer_kind="", parent_peer="", guild_id="", roles=[], team_id=""
    )
    base.update(fields)
    return SimpleNamespace(id=None, agent_id=agent_id, channel=channel, **base)


def ladder_index(tiers):
    agents = [agent_ns(0, "fallback", default=True)]
    bindings = []
    for number, tier in enumerate(LADDER[:-1], start=1):
        agents.append(agent_ns(number, f"agent-{tier}"))
        if tier in tiers:
            bindings.append(binding_ns(number, **TIER_BINDINGS[tier]))
    # Built lowest tier first, so no tier wins merely by being added first.
    return RouteIndex.build(bindings=list(reversed(bindings)), agents=agents)


@pytest.mark.parametrize("tier", LADDER, ids=[str(t) for t in LADDER])
def test_each_tier_beats_every_tier_below_it(tier):
    below = LADDER[LADDER.index(tier) :]
    route = resolve_route(message(**EVERYTHING), index=ladder_index(set(below)))
    assert route.rule.tier == tier
    expected = "fallback" if tier == Tier.DEFAULT else f"agent-{tier}"
    assert route.agent.slug == expected


def test_a_peer_rule_beats_a_team_rule_in_the_database(personas):
    Binding.objects.create(agent=personas["home"], channel="slack", team_id="T1")
    Binding.objects.create(agent=personas["work"], channel="slack", peer="mom", peer_kind="direct")
    route = resolve_route(message(channel="slack", peer="mom", team_id="T1"))
    assert (route.agent.slug, route.rule.tier) == ("work", Tier.PEER)
    other = resolve_route(message(channel="slack", peer="dad", team_id="T1"))
    assert (other.agent.slug, other.rule.tier) == ("home", Tier.TEAM)


def test_a_role_rule_read_from_the_database_keeps_its_roles(personas):
    # The index reads roles as their JSON text (a cold start's speed): the roles survive.
    Binding.objects.create(agent=personas["work"], channel="discord", guild_id="G", roles=["mod"])
    Binding.objects.create(agent=personas["home"], channel="discord", guild_id="G")
    group = dict(channel="discord", chat_type="group", group_id="c", guild_id="G")

    moderator = resolve_route(message(**group, member_roles=["mod", "x"]))
    member = resolve_route(message(**group, member_roles=["x"]))

    assert (moderator.agent.slug, moderator.rule.tier) == ("work", Tier.GUILD_ROLES)
    assert (member.agent.slug, member.rule.tier) == ("home", Tier.GUILD)


def test_every_field_a_binding_sets_must_match():
    agents = [agent_ns(0, "main", default=True), agent_ns(1, "work")]
    index = RouteIndex.build(
        bindings=[
            binding_ns(1, channel="telegram", peer="alice", peer_kind="direct", account_id="bot2")
        ],
        agents=agents,
    )
    assert resolve_route(message(peer="alice", account_id="bot2"), index=index).agent.slug == "work"
    on_other_bot = resolve_route(message(peer="alice", account_id="bot1"), index=index)
    assert (on_other_bot.agent.slug, on_other_bot.rule.tier) == ("main", Tier.DEFAULT)


def test_a_role_rule_needs_one_of_its_roles():
    agents = [agent_ns(0, "main", default=True), agent_ns(1, "mods"), agent_ns(2, "guild")]
    index = RouteIndex.build(
        bindings=[
            binding_ns(1, guild_id="G", roles=["mod", "admin"]),
            binding_ns(2, guild_id="G"),
        ],
        agents=agents,
    )
    base = dict(channel="discord", chat_type="group", group_id="c", guild_id="G")
    assert resolve_route(message(**base, member_roles=["admin"]), index=index).agent.slug == "mods"
    assert resolve_route(message(**base, member_roles=["guest"]), index=index).agent.slug == "guild"
    assert resolve_route(message(**base), index=index).agent.slug == "guild"


def test_a_thread_inherits_its_parents_agent_but_gets_its_own_session(personas):
    Binding.objects.create(agent=personas["work"], channel="slack", peer="eng", peer_kind="group")
    group = resolve_route(message(channel="slack", chat_type="group", group_id="eng"))
    thread = resolve_route(
        message(channel="slack", chat_type="thread", group_id="eng", thread_id="t9")
    )
    assert (group.agent.slug, group.rule.tier) == ("work", Tier.PEER)
    assert (thread.agent.slug, thread.rule.tier) == ("work", Tier.PARENT_PEER)
    assert "inherited" in thread.rule.label
    assert thread.session_key == "agent:work:thread:slack:eng:t9"
    assert thread.session_key != group.session_key


def test_a_parent_peer_rule_decides_the_threads_under_that_parent(personas):
    Binding.objects.create(agent=personas["home"], channel="slack", parent_peer="eng")
    thread = resolve_route(
        message(channel="slack", chat_type="thread", parent_peer="eng", thread_id="t1")
    )
    group = resolve_route(message(channel="slack", chat_type="group", group_id="eng"))
    assert (thread.agent.slug, thread.rule.tier) == ("home", Tier.PARENT_PEER)
    assert group.rule.tier == Tier.DEFAULT  # the group itself is not under itself


def test_nothing_matching_goes_to_the_one_default_agent(personas):
    route = resolve_route(message(channel="whatsapp", peer="+1555"))
    assert (route.agent.slug, route.rule.tier, route.rule.binding_id) == (
        "main",
        Tier.DEFAULT,
        None,
    )


def test_an_index_needs_exactly_one_default_agent():
    with pytest.raises(ValueError, match="Exactly one"):
        RouteIndex.build(bindings=[], agents=[agent_ns(1, "a"), agent_ns(2, "b")])
    with pytest.raises(ValueError, match="Exactly one"):
        RouteIndex.build(
            bindings=[], agents=[agent_ns(1, "a", default=True), agent_ns(2, "b", default=True)]
        )


def test_routing_looks_up_its_tier_and_never_scans_the_bindings(monkeypatch):
    agents = [agent_ns(0, "main", default=True), agent_ns(1, "work")]
    bindings = [
        binding_ns(1, channel="telegram", peer=f"p{i}", peer_kind="direct") for i in range(20_000)
    ]
    bindings += [
        binding_ns(1, channel="telegram", team_id=f"t{i}", account_id="*") for i in range(5_000)
    ]
    index = RouteIndex.build(bindings=bindings, agents=agents)
    calls = []
    fits = CompiledBinding.fits
    monkeypatch.setattr(
        CompiledBinding, "fits", lambda self, *a, **k: calls.append(self) or fits(self, *a, **k)
    )
    route = resolve_route(message(peer="p12345"), index=index)
    assert route.rule.tier == Tier.PEER
    assert len(calls) == 1
    calls.clear()
    resolve_route(message(peer="nobody", team_id="t7"), index=index)
    assert len(calls) == 1  # just team t7's rule: no peer rule exists for "nobody"


def test_a_saved_binding_changes_the_next_route(personas):
    before = resolve_route(message(peer="bob"))
    Binding.objects.create(
        agent=personas["work"], channel="telegram", peer="bob", peer_kind="direct"
    )
    after = resolve_route(message(peer="bob"))
    assert (before.agent.slug, after.agent.slug) == ("main", "work")
    Binding.objects.filter(peer="bob").first().delete()
    assert resolve_route(message(peer="bob")).agent.slug == "main"


def test_a_change_made_by_another_process_is_seen_through_the_stored_version(personas):
    first = route_index()
    assert route_index() is first  # nothing changed: the same index
    # Another server process saved a binding: stamped with the version it bumped.
    Binding.objects.bulk_create(
        [
            Binding(
                agent=personas["work"],
                channel="telegram",
                peer="zed",
                peer_kind="direct",
                routing_version=first.version + 1,
            )
        ]
    )
    GatewayConfig.objects.filter(pk=1).update(routing_version=first.version + 1)
    caught_up = route_index_catch_up()
    assert caught_up is first  # taken in place, not loaded afresh
    assert caught_up.resolve(message(peer="zed")).agent.slug == "work"


# ---------------------------------------------------------------------------
# Ties


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"peer": "alice", "peer_kind": "direct"}, {"peer": "alice", "peer_kind": "direct"}),
        (
            {"peer": "alice", "peer_kind": "direct", "account_id": "*"},
            {"peer": "alice", "peer_kind": "direct", "account_id": "bot1"},
        ),
        ({"peer": "eng", "peer_kind": "group"}, {"parent_peer": "eng"}),
        ({"guild_id": "G", "roles": ["mod"]}, {"guild_id": "G", "roles": ["admin"]}),
        ({"guild_id": "G"}, {"guild_id": "G", "team_id": "T"}),
        ({"team_id": "T"}, {"team_id": "T"}),
        ({"account_id": "bot1"}, {"account_id": "bot1"}),
        ({"account_id": "*"}, {"account_id": " * "}),
        ({"account_id": ""}, {"account_id": "default"}),
        ({"account_id": "Bot One"}, {"account_id": "bot-one"}),
    ],
    ids=[
        "peer",
        "peer-any-account",
        "peer-as-parent",
        "roles",
        "guild",
        "team",
        "account",
        "channel",
        "empty-account-is-default",
        "normalized-account",
    ],
)
def test_two_bindings_that_would_tie_are_refused_naming_both(personas, first, second):
    Binding.objects.create(agent=personas["work"], channel="slack", **first)
    clash = Binding(agent=personas["home"], channel="slack", **second)
    with pytest.raises(ValidationError) as refused:
        clash.full_clean()
    words = " ".join(refused.value.messages)
    assert "→ work" in words and "→ home" in words and "tie" in words
    with pytest.raises(ValidationError):
        clash.save()  # refused however it is saved
    assert Binding.objects.count() == 1


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (
            {"peer": "alice", "peer_kind": "direct", "channel": "slack"},
            {"peer": "alice", "peer_kind": "direct", "channel": "telegram"},
        ),
        (
            {"peer": "alice", "peer_kind": "direct", "account_id": "a"},
            {"peer": "alice", "peer_kind": "direct", "account_id": "b"},
        ),
        ({"guild_id": "G"}, {"guild_id": "G", "roles": ["mod"]}),
        (
            {"peer": "alice", "peer_kind": "channel", "parent_peer": "eng"},
            {"peer": "alice", "peer_kind": "channel", "parent_peer": "ops"},
        ),
        ({"team_id": "T"}, {"account_id": "*"}),
    ],
)
def test_bindings_that_can_never_meet_one_origin_both_save(personas, first, second):
    first.setdefault("channel", "slack")
    second.setdefault("channel", "slack")
    Binding.objects.create(agent=personas["work"], **first)
    other = Binding(agent=personas["home"], **second)
    other.full_clean()
    other.save()
    assert Binding.objects.count() == 2


def test_editing_a_binding_does_not_tie_it_with_itself(personas):
    binding = Binding.objects.create(
        agent=personas["work"], channel="slack", peer="alice", peer_kind="direct"
    )
    assert resolve_route(message(channel="slack", peer="alice")).agent.slug == "work"

    binding.agent = personas["home"]
    binding.full_clean()  # its own saved row is no rival
    binding.save()

    assert list(Binding.objects.values_list("pk", "agent__slug")) == [(binding.pk, "home")]
    route = resolve_route(message(channel="slack", peer="alice"))
    assert (route.agent.slug, route.rule.binding_id, route.rule.tier) == (
        "home",
        binding.pk,
        Tier.PEER,
    )


def test_roles_without_a_guild_are_refused(personas):
    with pytest.raises(ValidationError) as refused:
        Binding(agent=personas["work"], channel="discord", roles=["mod"]).full_clean()
    assert "roles" in refused.value.message_dict


def test_a_second_default_agent_cannot_exist(personas):
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        AgentFactory(slug="other", is_default=True)


def test_a_stored_binding_reads_back_as_the_ladder_compiles_it(personas):
    made = [
        Binding.objects.create(agent=personas["work"], channel="Slack", peer="U1", peer_kind="group"),
        Binding.objects.create(agent=personas["work"], channel="slack", peer="*", peer_kind="direct"),
        Binding.objects.create(agent=personas["home"], channel="slack", account_id=" Prod/US "),
        Binding.objects.create(agent=personas["home"], channel="slack", account_id="*"),
        Binding.objects.create(agent=personas["home"], channel="slack"),
        Binding.objects.create(
            agent=personas["home"], channel="discord", guild_id="G", roles=["mod", 7]
        ),
    ]  # fmt: skip
    index = RouteIndex.load()
    index.load_every_channel()
    stored = sorted(
        (b for table in (index.peer, index.wildcard, index.account, index.guild_roles)
         for bs in table.values() for b in bs),
        key=lambda b: b.id,
    ) + index.channel["slack"]  # fmt: skip
    expected = [b._compiled() for b in made]
    assert sorted(stored, key=lambda b: b.id) == sorted(expected, key=lambda b: b.id)
