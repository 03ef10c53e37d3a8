"""The routing playground (seed ch. 8): a sandbox for ``dmScope`` and bindings.

The person picks a ``dmScope``, adds and removes bindings, and fires inbound
messages from a palette (people, groups, teams, threads, cron jobs). For each
message the page shows its session key, its agent and the rule that won, with
the whole ladder drawn and the winning tier marked.

Every answer comes from the real router (:func:`compile_binding`,
:class:`RouteIndex`, :func:`resolve_route`, :func:`binding_conflicts`), so the
playground can never explain a decision the gateway would not make. What the
person sets up here is theirs alone and throwaway: it lives in their browser
session as plain JSON (:class:`PlaygroundState`), never in the ``Binding``
table nor the gateway's settings.

The log is resolved again under the current settings each time it is shown:
turn the dial and the messages already fired move to their new sessions,
which is the point of the dial. Each row remembers the key it got when it was
fired, so a move is shown, not hidden.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from chats.gateway.inbound import Inbound, InboundError, inbound_parse
from chats.gateway.ladder import (
    ERR_TIE,
    LADDER,
    CompiledBinding,
    Tier,
    binding_conflicts,
    compile_binding,
)
from chats.gateway.models import ChatType, DmScope
from chats.gateway.routing import AgentRef, Route, RouteIndex, resolve_route
from chats.limits import LIMITS

SESSION_KEY = "gateway_playground"

ERR_SCOPE = "Choose one of: " + ", ".join(DmScope.values) + "."
ERR_AGENT = "An agent is a short name: lowercase letters, digits, - or _ (at most 64)."
ERR_TOO_MANY = (
    f"The playground holds at most {LIMITS.playground_bindings} bindings. Remove one first."
)
ERR_NO_SUCH_MESSAGE = "There is no such message in the palette."
ERR_NO_SUCH_BINDING = "That binding is already gone."
AGENT_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")

# What each rung of the ladder means, in the seed's words.
TIER_WORDS: dict[Tier, str] = {
    Tier.PEER: "this exact person, group or job",
    Tier.PARENT_PEER: "the thread's parent",
    Tier.WILDCARD_PEER: 'anyone of that kind (peer "*")',
    Tier.GUILD_ROLES: "their server and one of their roles",
    Tier.GUILD: "their server",
    Tier.TEAM: "their team",
    Tier.ACCOUNT: "the bot account",
    Tier.CHANNEL: 'the whole channel (account "*")',
    Tier.DEFAULT: "nothing above matched",
}

BINDING_FIELDS = (
    "channel",
    "account_id",
    "peer",
    "peer_kind",
    "parent_peer",
    "guild_id",
    "team_id",
)


class PlaygroundError(ValueError):
    """A change the playground refuses; ``field`` names the part at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


# ---------------------------------------------------------------------------
# The palette


@dataclass(frozen=True)
class PaletteMessage:
    id: str
    who: str
    where: str
    shelf: str
    fields: Mapping[str, Any]

    def inbound(self, *, message_id: str) -> Inbound:
        return inbound_parse({**self.fields, "message_id": message_id})


def _m(id: str, who: str, where: str, shelf: str, **fields: Any) -> PaletteMessage:
    return PaletteMessage(id, who, where, shelf, fields)


PEOPLE, GROUPS, THREADS, CRON = "People", "Groups and teams", "Threads", "Cron jobs"

PALETTE: tuple[PaletteMessage, ...] = (
    _m("alice-whatsapp", "Alice", "WhatsApp DM", PEOPLE,
       channel="whatsapp", chat_type="dm", peer="alice",
       text="Remind me: my bank PIN is 4471."),
    _m("alice-whatsapp-work", "Alice", "WhatsApp DM, to the work number", PEOPLE,
       channel="whatsapp", account_id="work", chat_type="dm", peer="alice",
       text="Can you move my 3 pm?"),
    _m("alice-telegram", "Alice", "Telegram DM", PEOPLE,
       channel="telegram", chat_type="dm", peer="alice",
       text="Did my WhatsApp message get through?"),
    _m("bob-whatsapp", "Bob", "WhatsApp DM", PEOPLE,
       channel="whatsapp", chat_type="dm", peer="bob",
       text="What was that number again?"),
    _m("bob-telegram", "Bob", "Telegram DM", PEOPLE,
       channel="telegram", chat_type="dm", peer="bob",
       text="Hi, it's Bob."),
    _m("mom-slack", "Mom", "Slack DM, in the family team", PEOPLE,
       channel="slack", chat_type="dm", peer="mom", team_id="family",
       text="Dinner on Sunday?"),
    _m("carol-standup", "Carol", "Slack #eng-standup, acme team", GROUPS,
       channel="slack", chat_type="group", group_id="eng-standup", team_id="acme", peer="carol",
       text="Standup: the login fix shipped."),
    _m("dave-standup", "Dave", "Slack #eng-standup, acme team", GROUPS,
       channel="slack", chat_type="group", group_id="eng-standup", team_id="acme", peer="dave",
       text="Standup: reviewing the release notes."),
    _m("erin-discord", "Erin (moderator)", "Discord #general, gamers guild", GROUPS,
       channel="discord", chat_type="group", group_id="general", guild_id="gamers",
       member_roles=["moderator"], peer="erin",
       text="Please pin the rules."),
    _m("frank-discord", "Frank", "Discord #general, gamers guild", GROUPS,
       channel="discord", chat_type="group", group_id="general", guild_id="gamers", peer="frank",
       text="Anyone up for a game?"),
    _m("carol-thread", "Carol", "a reply in a #eng-standup thread", THREADS,
       channel="slack", chat_type="thread", group_id="eng-standup", thread_id="1712-0042",
       team_id="acme", peer="carol",
       text="Following up on the login fix here."),
    _m("mail-cron", "Morning mail", "cron job, every day at 8:00", CRON,
       channel="cron", chat_type="cron", job_id="morning-mail",
       text="Summarize my unread mail."),
)  # fmt: skip

# Messages as the apps themselves send them, read by each app's own adapter: what the
# playground fires is what the webhook would route, ids and all.
AS_SENT = "As each app sends them"


def _as_sent(id: str, who: str, where: str, inbound: Inbound) -> PaletteMessage:
    fields = {
        name: value
        for name, value in inbound.as_dict().items()
        if value not in ("", []) and name != "message_id"
    }
    return PaletteMessage(id, who, where, AS_SENT, fields)


def _slack_sent(event: dict[str, Any]) -> Inbound:
    from chats.gateway.slack import Take, slack_inbound

    body = {"type": "event_callback", "team_id": "T0ACME", "event": event}
    asked = slack_inbound(body, account_id="acme")
    assert isinstance(asked, Take), asked  # noqa: S101 - the palette is ours
    return asked.inbound


def _whatsapp_sent(sender: str, name: str, words: str) -> Inbound:
    from chats.gateway.whatsapp import Take, whatsapp_inbound

    value = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550001111", "phone_number_id": "106540352242922"},
        "contacts": [{"profile": {"name": name}, "wa_id": sender}],
        "messages": [{"from": sender, "id": "wamid.HBgLMTU1NTAwMDIyMjIVAgASGBQ",
                      "timestamp": "1697043223", "type": "text", "text": {"body": words}}],
    }  # fmt: skip
    body = {
        "object": "whatsapp_business_account",
        "entry": [{"id": "102290129340398", "changes": [{"value": value, "field": "messages"}]}],
    }
    [asked] = whatsapp_inbound(body, account_id="shop")
    assert isinstance(asked, Take), asked  # noqa: S101 - the palette is ours
    return asked.inbound


def _discord_sent(message: dict[str, Any]) -> Inbound:
    from chats.gateway.discord import Take, discord_inbound

    asked = discord_inbound(message, account_id="home", bot_user_id="1250000000000000001")
    assert isinstance(asked, Take), asked  # noqa: S101 - the palette is ours
    return asked.inbound


def _apps_as_sent() -> tuple[PaletteMessage, ...]:
    return (
        _as_sent("slack-im-event", "U2147483697", "Slack: a message.im event", _slack_sent(
            {"type": "message", "channel": "D024BE91L", "user": "U2147483697",
             "text": "Hello hello can you hear me?", "ts": "1355517523.000005",
             "channel_type": "im"})),
        _as_sent("slack-mention-event", "U061F7AUR", "Slack: an app_mention in #C123ABC456",
                 _slack_sent(
            {"type": "app_mention", "user": "U061F7AUR", "channel": "C123ABC456",
             "text": "<@U0LAN0Z89> is it everything a river should be?",
             "ts": "1515449522.000016"})),
        _as_sent("slack-thread-event", "U061F7AUR", "Slack: an app_mention in a thread",
                 _slack_sent(
            {"type": "app_mention", "user": "U061F7AUR", "channel": "C123ABC456",
             "text": "<@U0LAN0Z89> and in the thread?", "ts": "1515449600.000020",
             "thread_ts": "1515449522.000016"})),
        _as_sent("whatsapp-text-event", "Test Name", "WhatsApp: a text message to the shop",
                 _whatsapp_sent("972987654321", "Test Name", "Body Text")),
        _as_sent("discord-guild-event", "alice", "Discord: a mention in a server, with roles",
                 _discord_sent(
            {"id": "1251590112338575400", "type": 0, "channel_id": "1247389570789330984",
             "guild_id": "1247389570122563624", "content": "<@1250000000000000001> hello",
             "author": {"id": "1118295468731793408", "username": "alice"},
             "member": {"roles": ["1247389570122563630", "1247391022857633812"]},
             "mentions": [{"id": "1250000000000000001", "username": "conch", "bot": True}]})),
        _as_sent("discord-dm-event", "alice", "Discord: a DM", _discord_sent(
            {"id": "1251590112338575401", "type": 0, "channel_id": "1251000000000000000",
             "content": "hi, it's me", "author": {"id": "1118295468731793408",
                                                 "username": "alice"}})),
    )  # fmt: skip


PALETTE = PALETTE + _apps_as_sent()
PALETTE_BY_ID = {message.id: message for message in PALETTE}


def palette_shelves() -> list[tuple[str, list[PaletteMessage]]]:
    return [
        (shelf, list(messages))
        for shelf, messages in itertools.groupby(PALETTE, key=lambda m: m.shelf)
    ]


# ---------------------------------------------------------------------------
# The state, as the session keeps it


@dataclass
class PlaygroundState:
    dm_scope: str
    bindings: list[dict[str, Any]] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)
    next_id: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "dm_scope": self.dm_scope,
            "bindings": self.bindings,
            "log": self.log,
            "next_id": self.next_id,
        }

    @classmethod
    def from_dict(cls, raw: Any, *, dm_scope: str) -> PlaygroundState:
        """What the session holds, or a fresh playground if it holds nothing sensible."""
        if not isinstance(raw, dict):
            return cls(dm_scope=dm_scope)
        scope = raw.get("dm_scope")
        bindings = raw.get("bindings")
        log = raw.get("log")
        next_id = raw.get("next_id")
        if (
            scope not in DmScope.values
            or not isinstance(bindings, list)
            or not isinstance(log, list)
            or not isinstance(next_id, int)
        ):
            return cls(dm_scope=dm_scope)
        return cls(dm_scope=scope, bindings=bindings, log=log, next_id=next_id)

    def take_id(self) -> int:
        n = self.next_id
        self.next_id += 1
        return n


def playground_load(session: Mapping[str, Any], *, dm_scope: str) -> PlaygroundState:
    """The person's playground; a fresh one starts at the gateway's own ``dmScope``."""
    return PlaygroundState.from_dict(session.get(SESSION_KEY), dm_scope=dm_scope)


def playground_save(session: Any, state: PlaygroundState) -> None:
    session[SESSION_KEY] = state.as_dict()


# ---------------------------------------------------------------------------
# Changes


def playground_set_scope(*, state: PlaygroundState, dm_scope: str) -> None:
    """Turn the dial; ``dm_scope`` is one of :class:`DmScope` (checked by the form)."""
    state.dm_scope = dm_scope


def playground_binding_add(
    *, state: PlaygroundState, agents: Mapping[str, AgentRef], fields: Mapping[str, Any]
) -> dict[str, Any]:
    """Add one playground binding, refusing one too many or one that would tie.

    ``fields`` are a :class:`~chats.gateway.forms.PlaygroundBindingForm`'s cleaned
    data. A tie is refused with the gateway's own words, naming both bindings.
    ``agents`` are the personas by slug; a new slug is a sandbox persona.
    """
    row: dict[str, Any] = {"agent": fields["agent"]}
    row.update({name: fields.get(name) or "" for name in BINDING_FIELDS})
    row["roles"] = list(fields.get("roles") or ())
    if len(state.bindings) >= LIMITS.playground_bindings:
        raise PlaygroundError("agent", ERR_TOO_MANY)

    refs = _agent_refs(agents, state.bindings + [row])
    candidate = _compile(row, refs)
    clashes = binding_conflicts(candidate, _compiled(state.bindings, refs))
    if clashes:
        other, tier = clashes[0]
        raise PlaygroundError(
            "__all__", ERR_TIE.format(this=candidate.label, other=other.label, tier=tier)
        )
    row["id"] = state.take_id()
    state.bindings.append(row)
    return row


def playground_binding_remove(*, state: PlaygroundState, binding_id: int) -> None:
    kept = [b for b in state.bindings if b.get("id") != binding_id]
    if len(kept) == len(state.bindings):
        raise PlaygroundError("binding", ERR_NO_SUCH_BINDING)
    state.bindings = kept


def playground_fire(
    *,
    state: PlaygroundState,
    agents: Mapping[str, AgentRef],
    default_slug: str,
    palette_id: str = "",
    custom: Inbound | None = None,
) -> Route:
    """Fire one message: from the palette, or written by the person (``custom``, as
    the gateway's one parser made it). It gets a fresh message id, so every cron
    run is a run of its own."""
    n = state.take_id()
    if custom is not None:
        inbound = replace(custom, message_id=f"play-{n}")
        who, where = inbound.peer or inbound.job_id, f"{inbound.channel} {inbound.chat_type}"
    else:
        message = PALETTE_BY_ID.get(palette_id)
        if message is None:
            state.next_id -= 1
            raise PlaygroundError("message", ERR_NO_SUCH_MESSAGE)
        inbound = message.inbound(message_id=f"run-{n}")
        who, where = message.who, message.where
    route = resolve_route(inbound, index=_index(state, agents, default_slug)[0])
    state.log.append(
        {
            "n": n,
            "who": who,
            "where": where,
            "inbound": inbound.as_dict(),
            "fired_scope": state.dm_scope,
            "fired_key": route.session_key,
        }
    )
    del state.log[
        : -LIMITS.playground_log_messages
    ]  # the oldest goes first: the session stays small
    return route


def playground_clear(*, state: PlaygroundState, bindings: bool = False) -> None:
    state.log = []
    if bindings:
        state.bindings = []


# ---------------------------------------------------------------------------
# Resolving: the board the page shows


def _agent_refs(
    agents: Mapping[str, AgentRef], rows: Iterable[Mapping[str, Any]]
) -> dict[str, AgentRef]:
    """The personas, and a sandbox persona for each slug a binding names that isn't one."""
    refs = dict(agents)
    sandbox_id = -1
    for row in rows:
        slug = row.get("agent", "")
        if slug and slug not in refs:
            refs[slug] = AgentRef(sandbox_id, slug, slug, "")
            sandbox_id -= 1
    return refs


def _index(
    state: PlaygroundState, agents: Mapping[str, AgentRef], default_slug: str
) -> tuple[RouteIndex, dict[str, AgentRef], list[CompiledBinding]]:
    """The router's index over the playground's bindings, at the playground's dmScope."""
    refs = _agent_refs(agents, state.bindings)
    compiled = _compiled(state.bindings, refs)
    index = RouteIndex(
        bindings=compiled,
        agents=refs.values(),
        default_agent_id=refs[default_slug].id,
        dm_scope=state.dm_scope,
    )
    return index, refs, compiled


def _compile(row: Mapping[str, Any], refs: Mapping[str, AgentRef]) -> CompiledBinding:
    agent = refs[row["agent"]]
    return compile_binding(
        id=row.get("id"),
        agent_id=agent.id,
        agent_slug=agent.slug,
        channel=row["channel"],
        account_id=row.get("account_id", ""),
        peer=row.get("peer", ""),
        peer_kind=row.get("peer_kind", ""),
        parent_peer=row.get("parent_peer", ""),
        guild_id=row.get("guild_id", ""),
        roles=row.get("roles") or (),
        team_id=row.get("team_id", ""),
    )


def _compiled(
    rows: Iterable[Mapping[str, Any]], refs: Mapping[str, AgentRef]
) -> list[CompiledBinding]:
    return [_compile(row, refs) for row in rows]


@dataclass(frozen=True)
class Rung:
    tier: Tier
    words: str
    state: str  # "won" | "outranked" (matched, but a rung above won) | "missed" | "below"
    label: str = ""


@dataclass(frozen=True)
class BindingRow:
    id: int
    tier: Tier
    label: str
    agent: AgentRef
    sandbox: bool
    wins: int  # how many logged messages it routes now


@dataclass(frozen=True)
class Fired:
    n: int
    who: str
    where: str
    text: str
    inbound: Inbound
    route: Route
    ladder: tuple[Rung, ...]
    sandbox_agent: bool
    moved_from: str  # the key it got when fired, if it lands elsewhere now
    leak: bool = False  # its session also holds another person's DMs


@dataclass(frozen=True)
class SessionFolder:
    key: str
    agent: AgentRef
    people: tuple[str, ...]
    count: int
    shared_dm: bool
    leak: bool  # DMs from two or more people in one session


@dataclass(frozen=True)
class Board:
    dm_scope: str
    bindings: tuple[BindingRow, ...]
    log: tuple[Fired, ...]  # newest first
    sessions: tuple[SessionFolder, ...]
    default_agent: AgentRef
    agents: tuple[AgentRef, ...]

    @property
    def latest(self) -> Fired | None:
        return self.log[0] if self.log else None

    @property
    def leaks(self) -> tuple[SessionFolder, ...]:
        return tuple(folder for folder in self.sessions if folder.leak)


def _ladder(
    inbound: Inbound, route: Route, compiled: list[CompiledBinding], index: RouteIndex
) -> tuple[Rung, ...]:
    """The winner, then what else matched lower down: the router again without each
    winner in turn, so "outranked" is the router's own answer, never a second opinion."""
    matched: dict[Tier, str] = {}
    remaining = compiled
    current = index
    while True:
        binding, tier = current.winner(inbound)
        if binding is None:
            break
        matched.setdefault(tier, binding.label)
        remaining = [b for b in remaining if b.id != binding.id]
        current = RouteIndex(
            bindings=remaining,
            agents=index.agents.values(),
            default_agent_id=index.default.id,
            dm_scope=index.dm_scope,
        )
    won = route.rule.tier
    rungs = []
    passed_winner = False
    for tier in LADDER:
        if tier == won:
            rungs.append(Rung(tier, TIER_WORDS[tier], "won", route.rule.label))
            passed_winner = True
        elif tier in matched:
            rungs.append(Rung(tier, TIER_WORDS[tier], "outranked", matched[tier]))
        else:
            rungs.append(Rung(tier, TIER_WORDS[tier], "below" if passed_winner else "missed"))
    return tuple(rungs)


def playground_board(
    *, state: PlaygroundState, agents: Mapping[str, AgentRef], default_slug: str
) -> Board:
    """Everything the page shows, every message resolved by the real router now."""
    index, refs, compiled = _index(state, agents, default_slug)
    real_ids = {ref.id for ref in agents.values()}
    fired: list[Fired] = []
    wins: dict[int, int] = {}
    for entry in state.log:
        inbound = _inbound_from(entry.get("inbound"))
        if inbound is None:
            continue
        route = resolve_route(inbound, index=index)
        if route.rule.binding_id is not None:
            wins[route.rule.binding_id] = wins.get(route.rule.binding_id, 0) + 1
        fired_key = entry.get("fired_key") or ""
        fired.append(
            Fired(
                n=entry.get("n", 0),
                who=str(entry.get("who", "")),
                where=str(entry.get("where", "")),
                text=inbound.text,
                inbound=inbound,
                route=route,
                ladder=_ladder(inbound, route, compiled, index),
                sandbox_agent=route.agent.id not in real_ids,
                moved_from=fired_key if fired_key and fired_key != route.session_key else "",
            )
        )

    folders: dict[str, dict[str, Any]] = {}
    for item in fired:
        folder = folders.setdefault(
            item.route.session_key,
            {
                "agent": item.route.agent,
                "people": {},
                "count": 0,
                "shared": False,
                "dm_peers": set(),
            },
        )
        folder["count"] += 1
        folder["people"].setdefault(item.who, None)
        folder["shared"] |= item.route.shared_dm
        if item.inbound.chat_type == ChatType.DM:
            folder["dm_peers"].add(item.inbound.peer)
    sessions = tuple(
        SessionFolder(
            key=key,
            agent=folder["agent"],
            people=tuple(folder["people"]),
            count=folder["count"],
            shared_dm=folder["shared"],
            leak=len(folder["dm_peers"]) > 1,
        )
        for key, folder in folders.items()
    )
    leaking = {folder.key for folder in sessions if folder.leak}
    log = tuple(replace(item, leak=item.route.session_key in leaking) for item in reversed(fired))
    rows = tuple(
        BindingRow(
            id=binding.id or 0,
            tier=binding.tier,
            label=binding.label,
            agent=refs[row["agent"]],
            sandbox=refs[row["agent"]].id not in real_ids,
            wins=wins.get(binding.id or 0, 0),
        )
        for row, binding in zip(state.bindings, compiled, strict=True)
    )
    return Board(
        dm_scope=state.dm_scope,
        bindings=rows,
        log=log,
        sessions=sessions,
        default_agent=refs[default_slug],
        agents=tuple(agents.values()),
    )


def _inbound_from(raw: Any) -> Inbound | None:
    if not isinstance(raw, dict):
        return None
    try:
        return inbound_parse(raw)
    except InboundError:
        return None
