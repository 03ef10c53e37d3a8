"""Routing 100,000 inbound messages against 100,000 bindings.

Judged by: the median warm time per route (target ≤ 0.05 ms) and the cold
time to build the index (target ≤ 1 s), each with its ratio to OpenClaw's own
allowance (10 ms warm, 500 ms cold, at 80k bindings). Routing must not scan
the bindings: the same messages routed against 1,000 bindings take the same
time, and that ratio is printed too.

Cold is measured as the server meets it: ``RouteIndex.load()`` from SQLite and
the first message routed on a channel of 25,000 bindings (one of four). A cold
channel's message is routed by one indexed lookup a tier, and indexes
``WARM_ROWS_PER_MESSAGE`` more of the channel's bindings; the messages until the
channel is warm are timed too (their worst one is printed), then every channel
loaded at once, and ``RouteIndex.build()`` from objects already in memory (the
playground's door). A busy machine slows everything, so the cold start is also
printed as a ratio to a primary-key fetch of one binding timed in the same run:
that ratio is the figure judged (a second on a busy two-core machine, where a
fetch takes ~0.5 ms, is a ratio of ~2,000; the target is a tenth of that, 200x).

The cold start is sampled ``--samples`` times (median and worst; the median is judged,
a busy machine shows in the worst). Beside the warm resolve it prints what the
per-message routing version query costs (a primary-key read of the settings row, run
on every message before the version rode on the session lookup), and the in-place
update: one binding saved at 100k, the time until the next message on its channel is
routed by it, in this process (the change applied as it commits) and in another (the
index behind, catching up on that message), and whether the index stayed warm.

    .venv/bin/python bench/bench_routing.py [--samples 5]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from types import SimpleNamespace

from _setup import django_on_fresh_sqlite, median_ms

BINDINGS = 100_000
SMALL = 1_000
MESSAGES = 100_000
AGENTS = 20
CHANNELS = ("slack", "discord", "telegram", "whatsapp")
TARGET_WARM_MS, TARGET_COLD_S = 0.05, 1.0
TARGET_COLD_RATIO = 200  # the cold start, in primary-key fetches
TARGET_CHANGE_MS = 50.0  # the next message after one binding change: within inbound's p99 goal
OPENCLAW_WARM_MS, OPENCLAW_COLD_S = 10.0, 0.5

# How the bindings spread over the ladder (the rest, a few, are channel-level "*").
SHARE = {"peer": 0.55, "parent": 0.10, "guild_roles": 0.10, "guild": 0.05, "team": 0.10}


def tier_counts(n: int) -> dict[str, int]:
    """How many bindings of each kind ``n`` bindings hold (and four channel-level ``*``)."""
    counts = {tier: int(n * share) for tier, share in SHARE.items()}
    counts["account"] = n - sum(counts.values()) - len(CHANNELS)
    return counts


def _row(i: int, agent_ids: list[int], **fields) -> dict:
    base = dict(
        account_id="*", peer="", peer_kind="", parent_peer="", guild_id="", roles=[], team_id=""
    )
    return {
        "channel": CHANNELS[i % len(CHANNELS)],
        "agent_id": agent_ids[i % len(agent_ids)],
        **base,
        **fields,
    }


def binding_rows(n: int, agent_ids: list[int]) -> list[dict]:
    """``n`` bindings over every tier, none tying with another. Binding ``i`` of a kind
    is on channel ``i % 4``, so the first bindings of 1k are the first of 100k."""
    counts = tier_counts(n)
    rows = []
    for i in range(counts["peer"]):
        rows.append(_row(i, agent_ids, peer=f"p{i}", peer_kind="direct"))
    for i in range(counts["parent"]):
        rows.append(_row(i, agent_ids, parent_peer=f"room{i}"))
    for i in range(counts["guild_roles"]):
        rows.append(_row(i, agent_ids, guild_id=f"g{i}", roles=[f"r{i % 7}"]))
    for i in range(counts["guild"]):  # the same guilds: members without the role land here
        rows.append(_row(i, agent_ids, guild_id=f"g{i}"))
    for i in range(counts["team"]):
        rows.append(_row(i, agent_ids, team_id=f"t{i}"))
    for i in range(counts["account"]):
        rows.append(_row(i, agent_ids, account_id=f"bot{i}"))
    for i in range(len(CHANNELS)):
        rows.append(_row(i, agent_ids, account_id="*"))
    return rows


KINDS = ("peer", "parent", "guild_roles", "guild", "team", "account", "nobody", "elsewhere")


def messages(n: int, *, bounds: dict[str, int]) -> list:
    """Every kind of origin, each naming one of the first ``bounds[kind]`` bindings of its
    tier, and some that no binding names: down to the channel rule, or on a channel
    with none, to the default agent."""
    from chats.gateway.inbound import inbound_parse

    rng = random.Random(7)
    made = []
    for m in range(n):
        kind = KINDS[m % len(KINDS)]
        i = rng.randrange(bounds.get(kind, 1))
        body = {"channel": CHANNELS[i % len(CHANNELS)], "message_id": f"m{m}", "text": "hi"}
        if kind == "peer":
            body |= {"chat_type": "dm", "peer": f"p{i}"}
        elif kind == "parent":
            body |= {
                "chat_type": "thread",
                "peer": "x",
                "thread_id": f"th{m}",
                "parent_peer": f"room{i}",
            }
        elif kind in ("guild_roles", "guild"):
            roles = [f"r{i % 7}", "everyone"] if kind == "guild_roles" else ["everyone"]
            body |= {
                "chat_type": "group",
                "peer": "x",
                "group_id": f"c{i}",
                "guild_id": f"g{i}",
                "member_roles": roles,
            }
        elif kind == "team":
            body |= {"chat_type": "group", "peer": "x", "group_id": f"c{i}", "team_id": f"t{i}"}
        elif kind == "account":
            body |= {"chat_type": "dm", "peer": f"stranger{m}", "account_id": f"bot{i}"}
        elif kind == "nobody":
            body |= {"chat_type": "dm", "peer": f"stranger{m}", "account_id": "nobody"}
        else:
            body |= {"channel": "signal", "chat_type": "dm", "peer": f"stranger{m}"}
        made.append(inbound_parse(body))
    return made


def route_all(index, inbound) -> tuple[float, float, dict]:
    """(median ms per route, mean ms per route, wins by tier), each route timed alone."""
    from chats.gateway.routing import resolve_route

    for message in inbound[:2_000]:  # warm
        resolve_route(message, index=index)
    clock = time.perf_counter_ns
    samples = []
    append = samples.append
    tiers: dict = {}
    gc.disable()
    try:
        start_all = clock()
        for message in inbound:
            start = clock()
            route = resolve_route(message, index=index)
            append(clock() - start)
            tiers[route.rule.tier] = tiers.get(route.rule.tier, 0) + 1
        total = clock() - start_all
    finally:
        gc.enable()
    return statistics.median(samples) / 1e6, total / len(inbound) / 1e6, tiers


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    django_on_fresh_sqlite()
    from chats.gateway.models import Binding
    from chats.gateway.routing import RouteIndex, _tier_sql
    from chats.models import Agent

    agents = Agent.objects.bulk_create(
        [
            Agent(slug=f"agent{i}", name=f"Agent {i}", workspace="/tmp", is_default=(i == 0))
            for i in range(AGENTS)
        ]
    )
    agent_ids = [a.pk for a in agents]
    rows = binding_rows(BINDINGS, agent_ids)
    start = time.perf_counter()
    Binding.objects.bulk_create([Binding(**row) for row in rows], batch_size=5_000)
    stored = time.perf_counter() - start

    # A primary-key fetch of one binding: the yardstick the cold start is judged against.
    pks = list(Binding.objects.values_list("pk", flat=True)[:: BINDINGS // 100])
    pk_ms = median_ms(lambda: Binding.objects.get(pk=random.choice(pks)), runs=500)

    # Cold: the server's start, from the database, and its first message routed.
    from chats.gateway.routing import resolve_route

    first = messages(1, bounds=tier_counts(BINDINGS))[0]
    cold_samples, load_samples = [], []
    for _ in range(args.samples):
        gc.collect()
        start = time.perf_counter()
        index = RouteIndex.load()
        load_samples.append(time.perf_counter() - start)
        first_route = resolve_route(first, index=index)
        cold_samples.append(time.perf_counter() - start)
    cold_first, cold_worst_sample = statistics.median(cold_samples), max(cold_samples)
    cold_load = statistics.median(load_samples)
    # The messages after it on that channel, each indexing a few more bindings, until warm.
    warming = [
        m for m in messages(20_000, bounds=tier_counts(BINDINGS)) if m.channel == first.channel
    ]
    warming_ms = []
    for message in warming:
        if index.is_warm(first.channel):
            break
        began = time.perf_counter()
        resolve_route(message, index=index)
        warming_ms.append((time.perf_counter() - began) * 1000)
    assert index.is_warm(first.channel), "the channel did not warm"
    # The answer a warm index gives the first message: the same.
    whole = RouteIndex.load()
    whole.load_every_channel()
    assert resolve_route(first, index=whole) == first_route, (
        first_route,
        resolve_route(first, index=whole),
    )
    # The worst first message: a thread in a guild, with roles and a team, that no rule
    # above the channel's fits, so every tier is looked up.
    from chats.gateway.inbound import inbound_parse

    worst = inbound_parse(
        {"channel": first.channel, "chat_type": "thread", "peer": "x", "group_id": "nowhere",
         "thread_id": "nothread", "guild_id": "noguild", "member_roles": ["r1"],
         "team_id": "noteam", "account_id": "nobot", "message_id": "w", "text": "hi"}
    )  # fmt: skip
    _tier_sql.cache_clear()  # as in a fresh process: each table's SQL is made on first use
    gc.collect()
    start = time.perf_counter()
    index = RouteIndex.load()
    worst_route = resolve_route(worst, index=index)
    cold_worst = time.perf_counter() - start
    assert worst_route == resolve_route(worst, index=whole), worst_route
    assert worst_route.rule.tier == "channel", worst_route.rule
    gc.collect()
    start = time.perf_counter()
    index = RouteIndex.load()
    index.load_every_channel()
    cold_all = time.perf_counter() - start
    assert index.count == BINDINGS, index.count

    # Cold: from objects in memory.
    objects = [SimpleNamespace(id=n, **row) for n, row in enumerate(rows, start=1)]
    agent_objects = [
        SimpleNamespace(
            id=a.pk, slug=a.slug, name=a.name, workspace=a.workspace, is_default=a.is_default
        )
        for a in agents
    ]
    gc.collect()
    start = time.perf_counter()
    RouteIndex.build(bindings=objects, agents=agent_objects)
    cold_build = time.perf_counter() - start

    # Warm: the same 100k messages against 100k bindings, then against 1k.
    small_rows = binding_rows(SMALL, agent_ids)
    small = RouteIndex.build(
        bindings=[SimpleNamespace(id=n, **row) for n, row in enumerate(small_rows, start=1)],
        agents=agent_objects,
    )
    prefix = messages(MESSAGES, bounds=tier_counts(SMALL))  # bindings both indexes hold
    big_median, big_mean, big_tiers = route_all(index, prefix)
    small_median, small_mean, small_tiers = route_all(small, prefix)
    assert big_tiers == small_tiers, (big_tiers, small_tiers)  # the same answers, same tiers
    spread = messages(MESSAGES, bounds=tier_counts(BINDINGS))  # over all 100k
    spread_median, spread_mean, spread_tiers = route_all(index, spread)

    # What the per-message version query cost, beside the warm resolve it preceded.
    from chats.gateway.models import GatewayConfig

    GatewayConfig.objects.get_or_create(pk=1)
    version_ms = median_ms(
        lambda: (
            GatewayConfig.objects.filter(pk=1).values_list("routing_version", flat=True).first()
        ),
        runs=500,
    )

    changed = in_place(index, agent_ids)

    print(
        f"bindings: {BINDINGS:,} over {AGENTS} agents, {len(CHANNELS)} channels; messages: {MESSAGES:,}"
    )
    print(f"stored the bindings in SQLite in {stored:.2f} s (bulk insert)")
    won = ", ".join(f"{tier} {count:,}" for tier, count in sorted(spread_tiers.items()))
    print(f"tiers that won: {won}")
    print(f"primary-key fetch of one binding: median {pk_ms:.3f} ms")
    cold_ratio = cold_first * 1000 / pk_ms
    print(
        f"cold start, RouteIndex.load() + the first message routed, median of {args.samples}: "
        f"{cold_first * 1000:.1f} ms (goal <= {TARGET_COLD_S * 1000:.0f} ms, "
        f"{cold_first / TARGET_COLD_S:.3f}x of goal) {verdict(cold_first <= TARGET_COLD_S)}; "
        f"worst {cold_worst_sample * 1000:.1f} ms; load alone {cold_load * 1000:.1f} ms; "
        f"ratio to OpenClaw's {OPENCLAW_COLD_S * 1000:.0f} ms at 80k: {cold_first / OPENCLAW_COLD_S:.3f}x"
    )
    print(
        f"cold start in primary-key fetches: {cold_ratio:,.0f}x (goal <= {TARGET_COLD_RATIO}x, "
        f"{cold_ratio / TARGET_COLD_RATIO:.2f}x of goal) {verdict(cold_ratio <= TARGET_COLD_RATIO)}"
    )
    print(
        f"cold start whose first message looks up every tier (down to the channel rule): "
        f"{cold_worst * 1000:.1f} ms; ratio to a primary-key fetch: {cold_worst * 1000 / pk_ms:,.0f}x"
    )
    print(
        f"warming: the next {len(warming_ms)} messages on {first.channel} "
        f"({BINDINGS // len(CHANNELS):,} bindings) indexed it whole; each: median "
        f"{statistics.median(warming_ms):.1f} ms, worst {max(warming_ms):.1f} ms "
        f"(ratio to a primary-key fetch: {max(warming_ms) / pk_ms:,.0f}x)"
    )
    print(
        f"every channel's bindings indexed at once (not on any message's path): "
        f"{cold_all * 1000:.0f} ms; ratio to a primary-key fetch: {cold_all * 1000 / pk_ms:,.0f}x"
    )
    print(
        f"cold, RouteIndex.build() from objects: {cold_build * 1000:.0f} ms; "
        f"ratio to OpenClaw's {OPENCLAW_COLD_S * 1000:.0f} ms: {cold_build / OPENCLAW_COLD_S:.2f}x"
    )
    print(
        f"warm median per route (messages over all {BINDINGS:,} bindings): "
        f"{spread_median * 1000:.2f} µs = {spread_median:.4f} ms (target ≤ {TARGET_WARM_MS} ms; "
        f"mean {spread_mean * 1000:.2f} µs); ratio to OpenClaw's {OPENCLAW_WARM_MS:.0f} ms: "
        f"{spread_median / OPENCLAW_WARM_MS:.5f}x ({OPENCLAW_WARM_MS / spread_median:,.0f} times under)"
    )
    print(
        f"no scan, the same {MESSAGES:,} messages: median {small_median * 1000:.2f} µs at "
        f"{SMALL:,} bindings, {big_median * 1000:.2f} µs at {BINDINGS:,}; "
        f"ratio 100k / 1k: {big_median / small_median:.2f}x (a scan would be ~{BINDINGS // SMALL}x)"
    )
    print(
        f"the per-message routing version query (before it rode on the session lookup): "
        f"median {version_ms * 1000:.1f} µs, {version_ms / spread_median:,.0f}x the warm resolve "
        f"({spread_median * 1000:.2f} µs) it preceded"
    )
    print(
        f"saving that binding (the admin's write: its tie check, and this process's index "
        f"updated as it commits; not on a message's path): {changed['save_ms']:.0f} ms"
    )
    for where, ms in (
        ("this process", changed["here_ms"]),
        ("another process", changed["there_ms"]),
    ):
        print(
            f"next message after one binding change at {BINDINGS // 1000}k, {where}: {ms:.2f} ms "
            f"(goal <= {TARGET_CHANGE_MS:.0f} ms, {ms / TARGET_CHANGE_MS:.3f}x of goal) "
            f"{verdict(ms <= TARGET_CHANGE_MS)}; routed by the new binding: {changed['routed']}; "
            f"index kept warm: {changed['warm']}"
        )
    within = (
        cold_first <= TARGET_COLD_S
        and cold_ratio <= TARGET_COLD_RATIO
        and cold_worst * 1000 / pk_ms <= TARGET_COLD_RATIO
        and spread_median <= TARGET_WARM_MS
        and max(changed["here_ms"], changed["there_ms"]) <= TARGET_CHANGE_MS
    )
    print(f"within target: {'yes' if within else 'NO'}")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def in_place(index, agent_ids: list[int]) -> dict:
    """One binding saved beside 100k, with ``index`` (every channel warm) as the process's:
    the time until the next message on its channel is routed by it, here (the change
    applied as it commits) and in a process whose index is behind (caught up on that
    message, as the inbound path does when the version it read is newer)."""
    from chats.gateway import routing
    from chats.gateway.inbound import inbound_parse
    from chats.gateway.models import Binding, GatewayConfig

    catch_up = getattr(routing, "route_index_catch_up", None)  # None: a branch before it

    def next_message(peer: str):
        inbound = inbound_parse(
            {"channel": "slack", "chat_type": "dm", "peer": peer, "message_id": peer, "text": "hi"}
        )
        if catch_up is None:
            return routing.route_index(check_db=True).resolve(inbound)
        stored = GatewayConfig.objects.values_list("routing_version", flat=True).get(pk=1)
        current = routing.route_index()
        return (catch_up() if stored > current.version else current).resolve(inbound)

    routing._cached = index
    index.version = GatewayConfig.objects.values_list("routing_version", flat=True).get(pk=1)
    gc.collect()
    start = time.perf_counter()
    Binding.objects.create(agent_id=agent_ids[3], channel="slack", peer="moved-here",
                           peer_kind="direct", account_id="*")  # fmt: skip
    save_ms = (time.perf_counter() - start) * 1000  # the admin's save: its tie check, the index
    start = time.perf_counter()
    route = next_message("moved-here")
    here_ms = (time.perf_counter() - start) * 1000
    routed = route.agent.id == agent_ids[3]
    # Another process saved one: stamped with the version it bumped (bulk: no signal here).
    version = index.version + 1
    fields = {"agent_id": agent_ids[5], "channel": "slack", "peer": "moved-there",
              "peer_kind": "direct", "account_id": "*"}  # fmt: skip
    if catch_up is not None:
        fields["routing_version"] = version
    Binding.objects.bulk_create([Binding(**fields)])
    GatewayConfig.objects.filter(pk=1).update(routing_version=version)
    gc.collect()
    start = time.perf_counter()
    route = next_message("moved-there")
    there_ms = (time.perf_counter() - start) * 1000
    routed = routed and route.agent.id == agent_ids[5]
    now = routing.route_index()
    return {
        "here_ms": here_ms,
        "save_ms": save_ms,
        "there_ms": there_ms,
        "routed": "yes" if routed else "NO",
        "warm": "yes" if now is index and now.is_warm("slack") else "no, loaded afresh",
    }


if __name__ == "__main__":
    main()
