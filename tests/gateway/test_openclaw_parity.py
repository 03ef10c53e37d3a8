"""OpenClaw's own routing and session-key cases, translated one by one.

Each case is named after the OpenClaw test it comes from (its ``test(...)`` name)
and cites the file. The files are openclaw/openclaw's, as stored in the
reference index:

- ``RR``: ``src/routing/resolve-route.test.ts``. The cases marked ``@379f8c6``
  are in commit 379f8c6122ff0ed1367c2de05a00839b1560d961; the others (wildcards,
  group ↔ channel, canonical account ids, Signal case, numeric ids) are in a
  later revision of the same file whose commit the index did not record.
- ``AI``: ``src/routing/account-id.test.ts`` @1d480d78afaee745d856eb9f121f1aea7610097d.
- ``SK``: ``src/routing/session-key.test.ts`` @94b06891395e6976955efc590347bc8aec5b8c02.
- ``SKT``: ``src/routing/__tests__/session-key.test.ts`` @978ec91d80ac2c6faa9b4b02ab45a17878a95694.
- ``SRC``: ``src/routing/resolve-route.ts`` (its ``tiers`` array: peer, peer.parent,
  peer.wildcard, guild+roles, guild, team, account, channel).
- Then, from the index's newest-looking copies: ``CP``,
  ``src/sessions/session-key-case-preservation.test.ts`` @bd61b76b6f693fe499601dbee0d3822303983a4e
  (with ``src/sessions/session-key-utils.ts`` at the same commit, whose registry keeps
  Signal groups and Matrix rooms as given); the Matrix plugin's
  ``extensions/matrix/src/matrix/monitor/threads.ts`` (thread event ids kept); and from
  ``resolve-route.test.ts`` the parent-peer, guild, role and peer+scope cases. Cases
  Conch has no counterpart for are not translated: ``groupScope``, a custom
  ``mainKey``, a per-route or per-binding ``dmScope``, the session store's alias and
  legacy-key lookup, and key parsing (Conch never parses a key back into its parts).
  Where Conch differs on purpose, the case says "deliberate difference" and
  docs/guides/openclaw.md says why.

OpenClaw's ``binding.match`` becomes a Conch binding: ``peer: {kind, id}`` is
``peer_kind`` + ``peer``; its ``matchedBy`` names become Conch's tiers
(``binding.peer`` → ``peer``, ``binding.peer.parent`` → ``parentPeer``,
``binding.peer.wildcard`` → ``wildcardPeer``, ``binding.account`` →
``accountId``, ``binding.channel`` → ``channel``). OpenClaw's key shapes
(``agent:main:discord:direct:alice``) are the seed's here
(``agent:main:dm:discord:linked:alice``): what is compared is which origins share
a session. Where OpenClaw resolves the first of two bindings in the same tier
by config order, Conch refuses the second when saved, so those cases are not
translated (see ``test_routing.py``'s ties). Prototype-pollution account ids
(``__proto__``) are a JavaScript object-key hazard with no Python counterpart.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from chats.gateway.ids import normalize_account_id
from chats.gateway.keys import main_key_for
from chats.gateway.ladder import Tier
from chats.gateway.models import DmScope
from chats.gateway.routing import RouteIndex, resolve_route
from tests.gateway.conftest import message

RR = "resolve-route.test.ts"
RR_379 = "resolve-route.test.ts@379f8c6"
AI = "account-id.test.ts@1d480d7"
SK = "session-key.test.ts@94b0689"
SKT = "__tests__/session-key.test.ts@978ec91"
SRC = "resolve-route.ts tiers"

MATCHED_BY = {
    "binding.peer": Tier.PEER,
    "binding.peer.parent": Tier.PARENT_PEER,
    "binding.peer.wildcard": Tier.WILDCARD_PEER,
    "binding.guild": Tier.GUILD,
    "binding.account": Tier.ACCOUNT,
    "binding.channel": Tier.CHANNEL,
    "default": Tier.DEFAULT,
}


def index_of(bindings, *, dm_scope=DmScope.PER_CHANNEL_PEER, links=None) -> RouteIndex:
    """``bindings``: ``(agent, match)`` pairs in OpenClaw's shape, in config order."""
    slugs = ["main"] + sorted({agent for agent, _ in bindings} - {"main"})
    agents = [
        SimpleNamespace(id=n, slug=s, name=s, workspace="", is_default=(s == "main"))
        for n, s in enumerate(slugs)
    ]
    rows = []
    for agent, match in bindings:
        peer = match.get("peer") or {}
        rows.append(
            SimpleNamespace(
                id=len(rows) + 1,
                agent_id=slugs.index(agent),
                channel=match["channel"],
                account_id=match.get("accountId", ""),
                peer=peer.get("id", ""),
                peer_kind=peer.get("kind", ""),
                parent_peer="",
                guild_id=match.get("guildId", ""),
                roles=match.get("roles", []),
                team_id=match.get("teamId", ""),
            )
        )
    return RouteIndex.build(bindings=rows, agents=agents, dm_scope=dm_scope, identity_links=links)


def dm(channel, peer, account=None, **more):
    fields = {"channel": channel, "peer": peer, **more}
    if account is not None:
        fields["account_id"] = account
    return message(**fields)


def group(channel, group_id, account=None, **more):
    return dm(channel, "someone", account, chat_type="group", group_id=group_id, **more)


def thread(channel, thread_id, parent, account=None, **more):
    return dm(
        channel, "someone", account, chat_type="thread", thread_id=thread_id,
        parent_peer=parent, **more,
    )  # fmt: skip


def routed(index, inbound):
    route = resolve_route(inbound, index=index)
    return route.agent.slug, route.rule.tier


# ---------------------------------------------------------------------------
# Wildcard peers: peer.id "*" matches any peer of its kind, below an exact peer and
# the thread's parent, above everything else (SRC).

WILD_WHATSAPP = [
    ("wild", {"channel": "whatsapp", "accountId": "biz", "peer": {"kind": "direct", "id": "*"}}),
    ("exact", {"channel": "whatsapp", "accountId": "biz", "peer": {"kind": "direct", "id": "+1000"}}),
]  # fmt: skip

WILDCARD_CASES = [
    pytest.param(
        [("second-ana", {"channel": "telegram", "accountId": "second-ana",
                         "peer": {"kind": "direct", "id": "*"}})],
        dm("telegram", "12345678", "second-ana"),
        ("second-ana", "binding.peer.wildcard"),
        id=f"{RR}: peer.id=* matches any direct peer and routes to the bound agent",
    ),
    pytest.param(
        [("dm-only", {"channel": "telegram", "accountId": "bot1",
                      "peer": {"kind": "direct", "id": "*"}})],
        group("telegram", "group-999", "bot1"),
        ("main", "default"),
        id=f"{RR}: peer.id=* does not match group peers when kind is direct",
    ),
    pytest.param(
        WILD_WHATSAPP, dm("whatsapp", "+1000", "biz"), ("exact", "binding.peer"),
        id=f"{RR}: exact peer binding wins over wildcard peer binding",
    ),
    pytest.param(
        WILD_WHATSAPP, dm("whatsapp", "+9999", "biz"), ("wild", "binding.peer.wildcard"),
        id=f"{RR}: wildcard peer binding wins over default fallback for unmatched peers",
    ),
    pytest.param(
        [("any-room", {"channel": "discord", "peer": {"kind": "channel", "id": "*"}}),
         ("parent-agent", {"channel": "discord", "peer": {"kind": "channel", "id": "parent-1"}})],
        thread("discord", "thread-1", "parent-1"),
        ("parent-agent", "binding.peer.parent"),
        id=f"{SRC}: binding.peer.parent is tried before binding.peer.wildcard",
    ),
    pytest.param(
        [("any-room", {"channel": "discord", "peer": {"kind": "channel", "id": "*"}}),
         ("guild-agent", {"channel": "discord", "guildId": "g1"})],
        group("discord", "c1", guild_id="g1"),
        ("any-room", "binding.peer.wildcard"),
        id=f"{SRC}: binding.peer.wildcard is tried before binding.guild",
    ),
]  # fmt: skip

CACHE_TIERS = [
    ("known-direct", {"channel": "telegram", "accountId": "default", "peer": {"kind": "direct", "id": "known"}}),
    ("any-direct", {"channel": "telegram", "accountId": "default", "peer": {"kind": "direct", "id": "*"}}),
    ("any-group", {"channel": "telegram", "accountId": "default", "peer": {"kind": "group", "id": "*"}}),
    ("account-wide", {"channel": "telegram", "accountId": "work"}),
    ("channel-wide", {"channel": "telegram", "accountId": "*"}),
]  # fmt: skip
CACHE_NAME = f"{RR}: keeps peer presence, kind, and id distinct across cached route tiers"

WILDCARD_CASES += [
    pytest.param(CACHE_TIERS, inbound, expected, id=f"{CACHE_NAME} [{label}]")
    for label, inbound, expected in [
        ("known direct", dm("telegram", "known"), ("known-direct", "binding.peer")),
        ("other direct", dm("telegram", "stranger"), ("any-direct", "binding.peer.wildcard")),
        ("a group", group("telegram", "room"), ("any-group", "binding.peer.wildcard")),
        ("account work", dm("telegram", "stranger", "work"), ("account-wide", "binding.account")),
        ("another account", dm("telegram", "x", "other"), ("channel-wide", "binding.channel")),
    ]
]


@pytest.mark.parametrize(("bindings", "inbound", "expected"), WILDCARD_CASES)
def test_wildcard_peer_bindings(bindings, inbound, expected):
    agent, matched_by = expected
    assert routed(index_of(bindings), inbound) == (agent, MATCHED_BY[matched_by])


# ---------------------------------------------------------------------------
# Peer kinds: direct never meets group or channel; group and channel meet each other.

PEER_KIND_CASES = [
    pytest.param(
        [("slack-group-agent", {"channel": "slack", "peer": {"kind": "group", "id": "C123456"}})],
        thread("slack", "C123456", "general"),  # a thread is a channel-kind peer
        ("slack-group-agent", "binding.peer"),
        id=f"{RR}: config group binding matches runtime channel scope",
    ),
    pytest.param(
        [("slack-channel-agent", {"channel": "slack", "peer": {"kind": "channel", "id": "C123456"}})],
        group("slack", "C123456"),
        ("slack-channel-agent", "binding.peer"),
        id=f"{RR}: config channel binding matches runtime group scope",
    ),
    pytest.param(
        [("group-only-agent", {"channel": "slack", "peer": {"kind": "group", "id": "C123456"}})],
        dm("slack", "C123456"),
        ("main", "default"),
        id=f"{RR}: group/channel compatibility does not match direct peer kind",
    ),
    pytest.param(
        [("alex", {"channel": "whatsapp", "peer": {"kind": "direct", "id": "+15551234567"}})],
        dm("whatsapp", "+15551234567"),  # Conch's chat_type "dm" is OpenClaw's runtime "dm"
        ("alex", "binding.peer"),
        id=f"{RR}: runtime dm peer.kind matches config direct binding (#22730)",
    ),
    pytest.param(
        [("chan", {"channel": "discord", "accountId": "default", "peer": {"kind": "channel", "id": "c1"}}),
         ("guild", {"channel": "discord", "accountId": "default", "guildId": "g1"})],
        group("discord", "c1", "default", guild_id="g1"),
        ("chan", "binding.peer"),
        id=f"{RR_379}: discord channel peer binding wins over guild binding",
    ),
    pytest.param(
        [("team-room", {"channel": "telegram", "peer": {"kind": "group", "id": "alice"}})],
        dm("telegram", "alice"),
        ("main", "default"),
        id="A group binding never catches a DM from a user with the same id",
    ),
    pytest.param(
        [("cron-agent", {"channel": "cron", "peer": {"kind": "cron", "id": "*"}})],
        dm("cron", "nightly", chat_type="cron", job_id="nightly"),
        ("cron-agent", "binding.peer.wildcard"),
        id="conch: a cron wildcard takes every job's runs",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("bindings", "inbound", "expected"), PEER_KIND_CASES)
def test_peer_kinds(bindings, inbound, expected):
    agent, matched_by = expected
    assert routed(index_of(bindings), inbound) == (agent, MATCHED_BY[matched_by])


def test_a_thread_does_not_inherit_a_direct_binding_with_its_parents_id():
    """A thread's parent is a group or a channel (OpenClaw's parentPeer has a kind too)."""
    index = index_of([("dm-agent", {"channel": "slack", "peer": {"kind": "direct", "id": "eng"}})])
    assert routed(index, thread("slack", "t1", "eng")) == ("main", Tier.DEFAULT)
    assert routed(index, dm("slack", "eng")) == ("dm-agent", Tier.PEER)


# ---------------------------------------------------------------------------
# Account ids: normalized; omitted means the channel's default account; "*" any.


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param(None, "default", id=f"{AI}: defaults null to default account"),
        pytest.param("   ", "default", id=f"{AI}: defaults blank strings to default account"),
        pytest.param("  Business_1  ", "business_1", id=f"{AI}: normalizes valid ids to lowercase"),
        pytest.param(
            " Prod/US East ", "prod-us-east",
            id=f"{AI}: sanitizes invalid characters into canonical ids",
        ),
        pytest.param("_prod_us", "_prod_us", id=f"{AI}: keeps a leading underscore account identity"),
        pytest.param("_", "_", id=f"{AI}: keeps a lone underscore account id"),
        pytest.param("_-prod_us", "_-prod_us", id=f"{AI}: keeps leading delimiters in either order"),
        pytest.param(" !!! ", "default", id=f"{AI}: nothing left of an id is the default account"),
    ],
)  # fmt: skip
def test_account_id_normalization(given, expected):
    assert normalize_account_id(given) == expected


ACCOUNT_CASES = [
    pytest.param(
        [("default-acct", {"channel": "whatsapp"})],
        dm("whatsapp", "+1000"),
        ("default-acct", "binding.account"),
        id=f"{RR_379}: missing accountId in binding matches default account only [default]",
    ),
    pytest.param(
        [("default-acct", {"channel": "whatsapp"})],
        dm("whatsapp", "+1000", "biz"),
        ("main", "default"),
        id=f"{RR_379}: missing accountId in binding matches default account only [biz]",
    ),
    pytest.param(
        [("main-bot", {"channel": "telegram", "accountId": "Bot Main"})],
        dm("telegram", "1000", "bot-main"),
        ("main-bot", "binding.account"),
        id=f"{RR_379}: account binding matches normalized account IDs to avoid fallback misrouting",
    ),
    pytest.param(
        [("biz", {"channel": "discord", "accountId": "BIZ"})],
        dm("discord", "u-1", " biz "),
        ("biz", "binding.account"),
        id=f"{RR}: binding accountId matching is canonicalized",
    ),
    pytest.param(
        [("any", {"channel": "whatsapp", "accountId": "*"})],
        dm("whatsapp", "+1000", "biz"),
        ("any", "binding.channel"),
        id=f"{RR_379}: accountId=* matches any account as a channel fallback",
    ),
    pytest.param(
        [("exact", {"channel": "telegram", "peer": {"kind": "direct", "id": "known-user"}}),
         ("account", {"channel": "telegram"}),
         ("channel", {"channel": "telegram", "accountId": "*"})],
        dm("telegram", "someone-else", "default"),
        ("account", "binding.account"),
        id=f"{RR}: account outranks channel for an unknown direct peer",
    ),
    pytest.param(
        [("a", {"channel": "whatsapp", "accountId": "biz", "peer": {"kind": "direct", "id": "+1000"}}),
         ("b", {"channel": "whatsapp", "accountId": "biz"})],
        dm("whatsapp", "+1000", "biz"),
        ("a", "binding.peer"),
        id=f"{RR_379}: peer binding wins over account binding",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("bindings", "inbound", "expected"), ACCOUNT_CASES)
def test_account_ids(bindings, inbound, expected):
    agent, matched_by = expected
    assert routed(index_of(bindings), inbound) == (agent, MATCHED_BY[matched_by])


def test_an_inbound_account_id_is_normalized_as_a_bindings_is():
    assert dm("telegram", "1", " Prod/US East ").account_id == "prod-us-east"
    assert dm("telegram", "1").account_id == "default"


@pytest.mark.parametrize(
    ("account", "expected"),
    [
        pytest.param("tasks", "dm:telegram:tasks:7550356539",
                     id=f"{RR}: dmScope=per-account-channel-peer isolates DM sessions per account, channel and sender"),
        pytest.param(None, "dm:telegram:default:7550356539",
                     id=f"{RR_379}: dmScope=per-account-channel-peer uses default accountId when not provided"),
    ],
)  # fmt: skip
def test_per_account_channel_peer_keys(account, expected):
    inbound = dm("telegram", "7550356539", account)
    assert main_key_for(inbound, dm_scope=DmScope.PER_ACCOUNT_CHANNEL_PEER) == expected


# ---------------------------------------------------------------------------
# Case folding: ids on case-insensitive channels are folded in keys and in matching;
# Signal's base64 group ids and numbers are kept as they are.


@pytest.mark.parametrize(
    ("inbound", "expected"),
    [
        pytest.param(
            group("signal", "VWATodkf2hc8zdOS76q9Tb0+5Bi522E03qLdaQ/9ypg="),
            "group:signal:VWATodkf2hc8zdOS76q9Tb0+5Bi522E03qLdaQ/9ypg=",
            id=f"{RR}: preserves mixed-case Signal group ids in route session keys",
        ),
        pytest.param(
            group("signal", "mb+09B3md7Tnu0/bLVJaOJUxtc/Zig83EwXvh3zmu3w="),
            "group:signal:mb+09B3md7Tnu0/bLVJaOJUxtc/Zig83EwXvh3zmu3w=",
            id=f"{SK}: preserves case for Signal group peer IDs",
        ),
        pytest.param(
            thread("slack", "ABC123", "C1"),
            "thread:slack:C1:ABC123",
            id=f"{SKT}: normalizes threadId to lowercase [deliberate difference: kept as given]",
        ),
        pytest.param(
            group("discord", 1468834856187203680),
            "group:discord:1468834856187203680",
            id=f"{RR}: coerces numeric peer ids to stable session keys",
        ),
        pytest.param(dm("slack", "U04ABCDEF"), "dm:slack:u04abcdef", id="Slack ids fold"),
        pytest.param(dm("discord", "Alice"), "dm:discord:alice", id="Discord ids fold"),
        pytest.param(
            dm("matrix", "@Alice:Example.org"), "dm:matrix:@alice%3Aexample.org",
            id="Matrix ids fold",
        ),
        pytest.param(
            dm("telegram", "Alice_Bot"), "dm:telegram:alice_bot",
            id="Telegram usernames fold",
        ),
        pytest.param(
            dm("telegram", "-1001234567890"), "dm:telegram:-1001234567890",
            id="Telegram numeric ids stay as they are",
        ),
        pytest.param(
            dm("whatsapp", "Alice"), "dm:whatsapp:alice",
            id="session-key.ts buildAgentPeerSessionKey: a DM peer is lower-cased on every channel",
        ),
    ],
)  # fmt: skip
def test_case_folding_in_keys(inbound, expected):
    assert main_key_for(inbound) == expected


def test_one_person_in_two_cases_is_one_session_and_one_binding():
    """OpenClaw lower-cases a DM peer in its key on every channel; Conch also compares a
    direct binding's peer that way (a deliberate difference, in docs/guides/openclaw.md: OpenClaw
    compares binding ids as written, so one session could be routed to two agents)."""
    for channel, peer in (("slack", "U04ABC"), ("signal", "Ab"), ("imessage", "Alice@Example.com")):
        index = index_of([("work", {"channel": channel, "peer": {"kind": "direct", "id": peer}})])
        upper = resolve_route(dm(channel, peer), index=index)
        lower = resolve_route(dm(channel, peer.lower()), index=index)
        assert upper.session_key == lower.session_key == f"agent:work:dm:{channel}:{peer.lower()}"
        assert (upper.rule.tier, lower.rule.tier) == (Tier.PEER, Tier.PEER)


# ---------------------------------------------------------------------------
# Identity links keep the dmScope's parts.

LINKS = {("telegram", "111111111"): "alice", ("discord", "222222222222222222"): "alice"}


def test_identity_links_applies_to_per_channel_peer_dm_sessions():
    """RR@379f8c6: identityLinks applies to per-channel-peer DM sessions."""
    index = index_of([], links=LINKS)
    on_discord = resolve_route(dm("discord", "222222222222222222"), index=index)
    on_telegram = resolve_route(dm("telegram", "111111111"), index=index)
    assert on_discord.main_key == "dm:discord:linked:alice"
    assert on_telegram.main_key == "dm:telegram:linked:alice"  # one session per channel


def test_identity_links_collapses_per_peer_dm_sessions_across_providers():
    """RR@379f8c6: identityLinks collapses per-peer DM sessions across providers."""
    index = index_of([], dm_scope=DmScope.PER_PEER, links=LINKS)
    on_discord = resolve_route(dm("discord", "222222222222222222"), index=index)
    on_telegram = resolve_route(dm("telegram", "111111111"), index=index)
    assert on_discord.main_key == on_telegram.main_key == "dm:linked:alice"


def test_identity_links_keep_the_account_under_per_account_channel_peer():
    index = index_of([], dm_scope=DmScope.PER_ACCOUNT_CHANNEL_PEER, links=LINKS)
    route = resolve_route(dm("telegram", "111111111", "bot1"), index=index)
    assert route.main_key == "dm:telegram:bot1:linked:alice"


# ---------------------------------------------------------------------------
# Case: rooms, groups and threads keep the case their platform gave them;
# a person's DM id is lower-cased. From OpenClaw's
# src/sessions/session-key-case-preservation.test.ts@bd61b76 (CP), its Matrix plugin's
# extensions/matrix/src/matrix/monitor/threads.ts (MX), session-key.test.ts (SK) and
# resolve-route.test.ts (RR).

CP = "session-key-case-preservation.test.ts@bd61b76"
MX = "matrix/monitor/threads.ts resolveMatrixThreadSessionKeys"
ROOM_A = "!MixedRoomAbCdEf:example.org"
ROOM_B = "!OtherRoomGhIjKl:matrix.example.org"
EVENT = "$EvMixedCaseAbCdEfGhIjKlMnOpQrStUvWxYz0"


@pytest.mark.parametrize(
    ("inbound", "expected"),
    [
        pytest.param(group("matrix", ROOM_A), "group:matrix:!MixedRoomAbCdEf%3Aexample.org",
                     id=f"{CP}: preserves Matrix room ids for channel/group peers [A]"),
        pytest.param(group("matrix", ROOM_B), "group:matrix:!OtherRoomGhIjKl%3Amatrix.example.org",
                     id=f"{CP}: keeps Matrix room id case in the channel session key (both prod rooms)"),
        pytest.param(thread("matrix", EVENT, ROOM_A),
                     f"thread:matrix:!MixedRoomAbCdEf%3Aexample.org:{EVENT}",
                     id=f"{CP}: preserves the Matrix room id AND the :thread:<event> suffix ({MX})"),
        pytest.param(dm("matrix", "@Bob:X"), "dm:matrix:@bob%3Ax",
                     id=f"{CP}: lowercases non-enrolled channels and Matrix DM (direct) peers [DM]"),
        pytest.param(dm("matrix", "@Bob:Example.Org"), "dm:matrix:@bob%3Aexample.org",
                     id=f"{CP}: lowercases Matrix DM (direct) keys"),
        pytest.param(group("signal", "AbC123="), "group:signal:AbC123=",
                     id=f"{CP}: still preserves Signal group ids"),
        pytest.param(group("signal", " AbC123= "), "group:signal:AbC123=",
                     id=f"{CP}: trims whitespace inside a preserved Signal segment"),
        pytest.param(dm("whatsapp", "+15551234567"), "dm:whatsapp:+15551234567",
                     id=f"{RR}: dmScope=per-channel-peer controls direct-message session key isolation"),
        # Deliberate differences (docs/guides/openclaw.md, "Where Conch and OpenClaw differ"): OpenClaw
        # lower-cases every other channel's group and thread ids; Conch keeps them all.
        pytest.param(group("telegram", "MixedHandle"), "group:telegram:MixedHandle",
                     id=f"{CP}: lowercases non-enrolled channels [deliberate difference: kept]"),
        pytest.param(group("telegram", "MiXeDGroup"), "group:telegram:MiXeDGroup",
                     id=f"{SK}: keeps non-Signal opaque-looking group ids lowercase [deliberate difference: kept]"),
        pytest.param(thread("signal", "XyZ", "AbC123="), "thread:signal:AbC123=:XyZ",
                     id=f"{CP}: keeps lowercasing a Signal thread suffix [deliberate difference: kept]"),
    ],
)  # fmt: skip
def test_case_in_keys(inbound, expected):
    assert main_key_for(inbound) == expected


def test_two_rooms_that_differ_only_by_case_are_two_sessions():
    """CP: does not collapse two case-distinct rooms to one key (the leak case-folding made)."""
    index = index_of([])
    one = resolve_route(group("matrix", ROOM_A), index=index)
    other = resolve_route(group("matrix", ROOM_A.lower()), index=index)
    assert one.session_key != other.session_key


def test_per_peer_keys_and_dm_and_channel_keys_stay_apart():
    """RR: dmScope=per-peer controls direct-message session key isolation; continuity:
    keeps per-peer DMs distinct from channel sessions."""
    index = index_of([], dm_scope=DmScope.PER_PEER)
    assert resolve_route(dm("whatsapp", "+15551234567"), index=index).main_key == (
        "dm:+15551234567"
    )
    person = resolve_route(dm("discord", "user123"), index=index).session_key
    room = resolve_route(group("discord", "channel456"), index=index).session_key
    assert person != room


def test_identity_links_compare_both_sides_lower_cased():
    """session-key.ts resolveLinkedPeerId: the link entry and the peer are both trimmed and
    lower-cased (no OpenClaw test has mixed case; this follows its code), and the name is
    lower-cased in the key."""
    index = index_of([], links={("iMessage", "Alice@Example.com"): "Alice"})
    for peer in ("alice@example.com", "ALICE@EXAMPLE.COM", " Alice@Example.com "):
        assert resolve_route(dm("imessage", peer), index=index).main_key == (
            "dm:imessage:linked:alice"
        )
    # A link on one channel is that channel's: the same id elsewhere is someone else.
    assert resolve_route(dm("sms", "alice@example.com"), index=index).main_key == (
        "dm:sms:alice@example.com"
    )


PARENT_BINDINGS = [
    ("thread-agent", {"channel": "discord", "peer": {"kind": "channel", "id": "thread-456"}}),
    ("parent-agent", {"channel": "discord", "peer": {"kind": "channel", "id": "parent-channel-123"}}),
    ("guild-agent", {"channel": "discord", "guildId": "guild-789"}),
]  # fmt: skip
A_THREAD = thread("discord", "thread-456", "parent-channel-123", guild_id="guild-789")


@pytest.mark.parametrize(
    ("bindings", "inbound", "expected"),
    [
        pytest.param([PARENT_BINDINGS[1]], thread("discord", "thread-456", "parent-channel-123"),
                     ("parent-agent", "binding.peer.parent"),
                     id=f"{RR_379}: thread inherits binding from parent channel when no direct match"),
        pytest.param(PARENT_BINDINGS[:2], A_THREAD, ("thread-agent", "binding.peer"),
                     id=f"{RR}: direct peer binding wins over parent peer binding"),
        pytest.param(PARENT_BINDINGS[1:], A_THREAD, ("parent-agent", "binding.peer.parent"),
                     id=f"{RR}: parent peer binding wins over guild binding"),
        pytest.param([("other", {"channel": "discord", "peer": {"kind": "channel", "id": "other-parent-999"}}),
                      PARENT_BINDINGS[2]], A_THREAD, ("guild-agent", "binding.guild"),
                     id=f"{RR}: falls back to guild binding when no parent peer match"),
        pytest.param([("guild", {"channel": "discord", "accountId": "default", "guildId": "g1"}),
                      ("account", {"channel": "discord", "accountId": "default"})],
                     group("discord", "c1", "default", guild_id="g1"), ("guild", "binding.guild"),
                     id=f"{RR_379}: guild binding wins over account binding when peer not bound"),
    ],
)  # fmt: skip
def test_parents_and_guilds(bindings, inbound, expected):
    agent, matched_by = expected
    assert routed(index_of(bindings), inbound) == (agent, MATCHED_BY[matched_by])


ROLES = [
    ("admins", {"channel": "discord", "guildId": "g1", "roles": ["admin"]}),
    ("everyone", {"channel": "discord", "guildId": "g1"}),
]


@pytest.mark.parametrize(
    ("bindings", "roles", "expected"),
    [
        pytest.param(ROLES, ["admin"], ("admins", Tier.GUILD_ROLES),
                     id=f"{RR}: guild+roles binding is more specific than guild-only"),
        pytest.param(ROLES, [], ("everyone", Tier.GUILD),
                     id=f"{RR}: no memberRoleIds means guild+roles bindings do not match"),
        pytest.param(ROLES[:1], ["member"], ("main", Tier.DEFAULT),
                     id=f"{RR}: roles that do not match fall back to default"),
        pytest.param([("any-role", {"channel": "discord", "guildId": "g1", "roles": []})], ["x"],
                     ("any-role", Tier.GUILD), id=f"{RR}: empty roles list means no role restriction"),
        pytest.param([*ROLES, ("room", {"channel": "discord", "peer": {"kind": "channel", "id": "c1"}})],
                     ["admin"], ("room", Tier.PEER), id=f"{RR}: peer binding beats guild+roles"),
    ],
)  # fmt: skip
def test_roles(bindings, roles, expected):
    inbound = group("discord", "c1", guild_id="g1", member_roles=roles)
    assert routed(index_of(bindings), inbound) == expected


@pytest.mark.parametrize(
    ("channel", "scope", "tier"),
    [("discord", "guildId", Tier.GUILD), ("slack", "teamId", Tier.TEAM)],
)
def test_a_peer_binding_with_a_scope_needs_both(channel, scope, tier):
    """RR peer+$scope constraints: does not become a scope-wide fallback when the peer
    mismatches (#14752); requires a matching scope even when the peer matches."""
    where = {"guildId": "guild_id", "teamId": "team_id"}[scope]
    mismatch = index_of([
        ("peer", {"channel": channel, scope: "space", "peer": {"kind": "channel", "id": "room-a"}}),
        ("fallback", {"channel": channel, scope: "space"}),
    ])  # fmt: skip
    assert routed(mismatch, group(channel, "room-b", **{where: "space"})) == ("fallback", tier)
    elsewhere = index_of([
        ("wrong", {"channel": channel, scope: "other", "peer": {"kind": "channel", "id": "room"}}),
        ("right", {"channel": channel, scope: "space"}),
    ])  # fmt: skip
    assert routed(elsewhere, group(channel, "room", **{where: "space"})) == ("right", tier)
