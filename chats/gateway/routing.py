"""Which agent, which session: the most-specific-wins ladder over bindings (seed ch. 6).

The ladder, most specific first: peer → parentPeer → guild+roles → guild →
team → accountId → channel-level ``accountId "*"`` → the default agent. Every
field a binding sets must match; the first tier with a match wins.

:func:`resolve_route` never scans bindings: a :class:`RouteIndex` keeps one
dict per tier, keyed by ``(channel, id)``, built once (``RouteIndex.load`` from
the database, or ``RouteIndex.build`` from any binding-shaped objects, for the
playground) and dropped whenever a binding, an agent, an identity link or the
gateway's settings change. Two bindings that could both win for one origin
are refused when saved (:func:`binding_check`), so a tier never has to choose.

A binding's ``peer`` is compared with the origin's conversation
(:attr:`Inbound.routing_peer`: the sender of a DM, the group, the thread, the
cron job). The parentPeer tier is thread inheritance: a thread takes the agent
of a binding whose ``parent_peer`` is its parent, or of a binding on the
parent itself (``peer`` = the parent).
"""

from __future__ import annotations

import contextlib
import enum
import gc
import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from chats.gateway.inbound import CHANNEL_PATTERN, Inbound
from chats.gateway.keys import is_shared_dm, main_key_for, session_key_for
from chats.gateway.models import DmScope


class Tier(enum.StrEnum):
    PEER = "peer"
    PARENT_PEER = "parentPeer"
    GUILD_ROLES = "guild+roles"
    GUILD = "guild"
    TEAM = "team"
    ACCOUNT = "accountId"
    CHANNEL = "channel"
    DEFAULT = "default"


LADDER = tuple(Tier)

ERR_TIE = "“{this}” and “{other}” would tie: both are {tier} rules for the same messages. Change one, or delete one."
ERR_ROLES_NEED_GUILD = "Roles belong to a guild: set guild_id too."
ERR_CHANNEL = "A channel is letters, digits, - or _ (at most 32)."


@dataclass(frozen=True, slots=True)
class AgentRef:
    """What routing needs of a persona, so routing reads no rows."""

    id: int
    slug: str
    name: str
    workspace: str


@dataclass(frozen=True, slots=True)
class Rule:
    """The rule that won: its tier, its binding (None for the default agent) and its words."""

    tier: Tier
    binding_id: int | None
    label: str


@dataclass(frozen=True, slots=True)
class Route:
    agent: AgentRef
    session_key: str
    main_key: str
    rule: Rule
    dm_scope: str
    shared_dm: bool  # every DM in one session: the leak the playground draws red


_NO_ROLES: frozenset[str] = frozenset()


class CompiledBinding(NamedTuple):
    """A binding as the index keeps it: a tuple, so a hundred thousand build in well under a second."""

    id: int | None
    agent_id: int
    agent_slug: str
    tier: Tier
    channel: str
    account: str | None  # None: any account ("" or "*")
    peer: str
    parent_peer: str
    guild: str
    roles: frozenset[str]
    team: str

    @property
    def label(self) -> str:
        """Its words, e.g. ``peer: slack peer mom → work``."""
        parts = [self.channel]
        if self.account is not None:
            parts.append(f"account {self.account}")
        elif self.tier == Tier.CHANNEL:
            parts.append('account "*"')
        for name, value in (
            ("peer", self.peer),
            ("parent", self.parent_peer),
            ("guild", self.guild),
            ("team", self.team),
        ):
            if value:
                parts.append(f"{name} {value}")
        if self.roles:
            parts.append("roles " + ",".join(sorted(self.roles)))
        return f"{self.tier}: {' '.join(parts)} → {self.agent_slug}"

    def fits(self, inbound: Inbound, *, inherited: bool = False) -> bool:
        """Every field this binding sets matches (``inherited``: its peer is the thread's parent)."""
        if self.account is not None and self.account != inbound.account_id:
            return False
        if self.peer and self.peer != (
            inbound.thread_parent if inherited else inbound.routing_peer
        ):
            return False
        if self.parent_peer and self.parent_peer != inbound.thread_parent:
            return False
        if self.guild and self.guild != inbound.guild_id:
            return False
        if self.roles and self.roles.isdisjoint(inbound.member_roles):
            return False
        return not (self.team and self.team != inbound.team_id)

    def slots(self) -> list[tuple[Tier, str, dict[str, str | None]]]:
        """Where this binding can win, each with the constraints left to match there."""
        others = {"account": self.account, "guild": self.guild or None, "team": self.team or None}
        if self.tier == Tier.PEER:
            slots = [(Tier.PEER, self.peer, {**others, "parent_peer": self.parent_peer or None})]
            if not self.parent_peer:  # threads under this peer inherit it
                slots.append((Tier.PARENT_PEER, self.peer, others))
            return slots
        if self.tier == Tier.PARENT_PEER:
            return [(Tier.PARENT_PEER, self.parent_peer, others)]
        if self.tier == Tier.GUILD_ROLES:
            # Any two role sets can meet in one member, so roles never tell two apart.
            return [
                (Tier.GUILD_ROLES, self.guild, {"account": self.account, "team": others["team"]})
            ]
        if self.tier == Tier.GUILD:
            return [(Tier.GUILD, self.guild, {"account": self.account, "team": others["team"]})]
        if self.tier == Tier.TEAM:
            return [(Tier.TEAM, self.team, {"account": self.account})]
        if self.tier == Tier.ACCOUNT:
            return [(Tier.ACCOUNT, self.account or "", {})]
        return [(Tier.CHANNEL, "", {})]


def compile_binding(
    *,
    id: int | None,
    agent_id: int,
    agent_slug: str,
    channel: str,
    account_id: str = "",
    peer: str = "",
    parent_peer: str = "",
    guild_id: str = "",
    roles: Iterable[Any] | None = (),
    team_id: str = "",
) -> CompiledBinding:
    channel = (channel or "").strip().lower()
    account = (account_id or "").strip()
    peer = (peer or "").strip()
    parent_peer = (parent_peer or "").strip()
    guild = (guild_id or "").strip()
    team = (team_id or "").strip()
    role_set = frozenset(r for r in (str(r).strip() for r in roles) if r) if roles else _NO_ROLES
    if peer:
        tier = Tier.PEER
    elif parent_peer:
        tier = Tier.PARENT_PEER
    elif guild:
        tier = Tier.GUILD_ROLES if role_set else Tier.GUILD
    elif team:
        tier = Tier.TEAM
    elif account and account != "*":
        tier = Tier.ACCOUNT
    else:
        tier = Tier.CHANNEL
    return CompiledBinding(
        id,
        agent_id,
        agent_slug,
        tier,
        channel,
        None if account in ("", "*") else account,
        peer,
        parent_peer,
        guild,
        role_set,
        team,
    )


def _compatible(a: Mapping[str, str | None], b: Mapping[str, str | None]) -> bool:
    for name in a.keys() & b.keys():
        if a[name] is not None and b[name] is not None and a[name] != b[name]:
            return False
    return True


def binding_conflicts(
    candidate: CompiledBinding, others: Iterable[CompiledBinding]
) -> list[tuple[CompiledBinding, Tier]]:
    """The bindings ``candidate`` would tie with, and in which tier. Pure."""
    mine = [(tier, key, rest) for tier, key, rest in candidate.slots()]
    found = []
    for other in others:
        if candidate.id is not None and other.id == candidate.id:
            continue
        if other.channel != candidate.channel:
            continue
        for tier, key, rest in other.slots():
            clash = next(
                (t for t, k, r in mine if t == tier and k == key and _compatible(rest, r)),
                None,
            )
            if clash is not None:
                found.append((other, clash))
                break
    return found


def _roles_from_text(text: str | None) -> list[Any]:
    if not text or text == "[]":
        return []
    roles = json.loads(text)
    return roles if isinstance(roles, list) else []


# ---------------------------------------------------------------------------
# The index


@contextlib.contextmanager
def _no_gc_pauses():
    """Building makes a hundred thousand small tuples and nothing cyclic: the cyclic
    collector would only rescan them over and over, so it waits until the end."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_NO_BINDINGS: tuple[CompiledBinding, ...] = ()


class RouteIndex:
    """Bindings by tier, each a dict keyed by ``(channel, id)``; built once, read lock-free."""

    def __init__(
        self,
        *,
        bindings: Iterable[CompiledBinding],
        agents: Iterable[AgentRef],
        default_agent_id: int,
        dm_scope: str = DmScope.PER_CHANNEL_PEER,
        identity_links: Mapping[tuple[str, str], str] | None = None,
        version: int = 0,
    ) -> None:
        self.agents = {agent.id: agent for agent in agents}
        if default_agent_id not in self.agents:
            raise ValueError("The default agent must be one of the agents.")
        self.default = self.agents[default_agent_id]
        self.dm_scope = dm_scope
        self.identity_links = dict(identity_links or {})
        self.version = version
        self.peer: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.parent: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.guild_roles: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.guild: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.team: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.account: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.channel: dict[str, list[CompiledBinding]] = {}
        self.count = 0
        for binding in bindings:
            if binding.agent_id not in self.agents:
                continue
            self.count += 1
            tier = binding.tier
            if tier == Tier.PEER:
                self.peer.setdefault((binding.channel, binding.peer), []).append(binding)
                if not binding.parent_peer:
                    self.parent.setdefault((binding.channel, binding.peer), []).append(binding)
            elif tier == Tier.PARENT_PEER:
                self.parent.setdefault((binding.channel, binding.parent_peer), []).append(binding)
            elif tier == Tier.GUILD_ROLES:
                self.guild_roles.setdefault((binding.channel, binding.guild), []).append(binding)
            elif tier == Tier.GUILD:
                self.guild.setdefault((binding.channel, binding.guild), []).append(binding)
            elif tier == Tier.TEAM:
                self.team.setdefault((binding.channel, binding.team), []).append(binding)
            elif tier == Tier.ACCOUNT:
                self.account.setdefault((binding.channel, binding.account or ""), []).append(
                    binding
                )
            else:
                self.channel.setdefault(binding.channel, []).append(binding)
        self._default_rule = Rule(Tier.DEFAULT, None, f"default: → {self.default.slug}")
        self._rules: dict[tuple[int, Tier], Rule] = {}  # made the first time each rule wins

    @classmethod
    def build(
        cls,
        *,
        bindings: Iterable[Any],
        agents: Iterable[Any],
        dm_scope: str = DmScope.PER_CHANNEL_PEER,
        identity_links: Mapping[tuple[str, str], str] | None = None,
        version: int = 0,
    ) -> RouteIndex:
        """From binding-shaped and agent-shaped objects (saved or not): the playground's door.

        Each binding needs ``agent_id`` and the Binding fields; each agent ``id``,
        ``slug``, ``name``, ``workspace`` and ``is_default`` (exactly one).
        """
        agent_list = list(agents)
        defaults = [a for a in agent_list if getattr(a, "is_default", False)]
        if len(defaults) != 1:
            raise ValueError("Exactly one agent must be the default.")
        refs = [AgentRef(a.id, a.slug, a.name, a.workspace) for a in agent_list]
        slugs = {ref.id: ref.slug for ref in refs}
        with _no_gc_pauses():
            compiled = [
                compile_binding(
                    id=getattr(b, "id", None),
                    agent_id=b.agent_id,
                    agent_slug=slugs.get(b.agent_id, "?"),
                    channel=b.channel,
                    account_id=b.account_id,
                    peer=b.peer,
                    parent_peer=b.parent_peer,
                    guild_id=b.guild_id,
                    roles=b.roles,
                    team_id=b.team_id,
                )
                for b in bindings
            ]
            return cls(
                bindings=compiled,
                agents=refs,
                default_agent_id=defaults[0].id,
                dm_scope=dm_scope,
                identity_links=identity_links,
                version=version,
            )

    @classmethod
    def load(cls) -> RouteIndex:
        """From the database, in four queries whatever the number of bindings."""
        from django.db.models import TextField
        from django.db.models.functions import Cast

        from chats.gateway.models import IdentityLink
        from chats.gateway.selectors import gateway_config
        from chats.models import Agent, Binding
        from chats.runtime.services import default_agent

        config = gateway_config()  # read first: a change after this only makes the index newer
        default = default_agent()
        agents = [
            AgentRef(*row) for row in Agent.objects.values_list("id", "slug", "name", "workspace")
        ]
        slugs = {agent.id: agent.slug for agent in agents}
        # Roles come as their JSON text: most bindings have none ("[]"), and decoding
        # a hundred thousand empty lists was most of a cold start.
        rows = Binding.objects.order_by("pk").values_list(
            "id",
            "agent_id",
            "channel",
            "account_id",
            "peer",
            "parent_peer",
            "guild_id",
            Cast("roles", output_field=TextField()),
            "team_id",
        )
        with _no_gc_pauses():
            compiled = [
                compile_binding(
                    id=row[0],
                    agent_id=row[1],
                    agent_slug=slugs.get(row[1], "?"),
                    channel=row[2],
                    account_id=row[3],
                    peer=row[4],
                    parent_peer=row[5],
                    guild_id=row[6],
                    roles=_roles_from_text(row[7]),
                    team_id=row[8],
                )
                for row in rows.iterator(chunk_size=5_000)
            ]
        links = {
            (channel.lower(), peer): name
            for channel, peer, name in IdentityLink.objects.values_list("channel", "peer", "name")
        }
        with _no_gc_pauses():
            return cls(
                bindings=compiled,
                agents=agents,
                default_agent_id=default.id,
                dm_scope=config.dm_scope,
                identity_links=links,
                version=config.routing_version,
            )

    def winner(self, inbound: Inbound) -> tuple[CompiledBinding | None, Tier]:
        """The first tier down the ladder with a binding that fits."""
        channel = inbound.channel
        peer = inbound.routing_peer
        if peer:
            for binding in self.peer.get((channel, peer), _NO_BINDINGS):
                if binding.fits(inbound):
                    return binding, Tier.PEER
        parent = inbound.thread_parent
        if parent:
            for binding in self.parent.get((channel, parent), _NO_BINDINGS):
                if binding.fits(inbound, inherited=binding.tier == Tier.PEER):
                    return binding, Tier.PARENT_PEER
        guild = inbound.guild_id
        if guild:
            if inbound.member_roles:
                for binding in self.guild_roles.get((channel, guild), _NO_BINDINGS):
                    if binding.fits(inbound):
                        return binding, Tier.GUILD_ROLES
            for binding in self.guild.get((channel, guild), _NO_BINDINGS):
                if binding.fits(inbound):
                    return binding, Tier.GUILD
        if inbound.team_id:
            for binding in self.team.get((channel, inbound.team_id), _NO_BINDINGS):
                if binding.fits(inbound):
                    return binding, Tier.TEAM
        for binding in self.account.get((channel, inbound.account_id), _NO_BINDINGS):
            if binding.fits(inbound):
                return binding, Tier.ACCOUNT
        for binding in self.channel.get(channel, _NO_BINDINGS):
            if binding.fits(inbound):
                return binding, Tier.CHANNEL
        return None, Tier.DEFAULT

    def resolve(self, inbound: Inbound, *, dm_scope: str | None = None) -> Route:
        binding, tier = self.winner(inbound)
        if binding is None:
            agent, rule = self.default, self._default_rule
        else:
            agent = self.agents[binding.agent_id]
            rule = self._rules.get((id(binding), tier))
            if rule is None:
                label = binding.label
                if tier != binding.tier:  # a peer binding reached through a thread's parent
                    label = f"{tier} (inherited from {label})"
                rule = self._rules.setdefault((id(binding), tier), Rule(tier, binding.id, label))
        scope = dm_scope or self.dm_scope
        main_key = main_key_for(inbound, dm_scope=scope, identity_links=self.identity_links)
        return Route(
            agent=agent,
            session_key=session_key_for(agent.slug, main_key),
            main_key=main_key,
            rule=rule,
            dm_scope=scope,
            shared_dm=is_shared_dm(inbound, scope),
        )


# ---------------------------------------------------------------------------
# The process's index: built on first use, dropped on change


_lock = threading.Lock()
_cached: RouteIndex | None = None


def route_index(*, check_db: bool = False) -> RouteIndex:
    """This process's index. ``check_db`` also compares the stored version (one query),
    so a binding changed by another server process is seen on its next message."""
    global _cached
    index = _cached
    if index is not None and check_db:
        from chats.gateway.models import GatewayConfig

        stored = (
            GatewayConfig.objects.filter(pk=1).values_list("routing_version", flat=True).first()
        )
        if stored != index.version:  # None too: the settings row is gone, all is new
            index = None
    if index is None:
        with _lock:
            index = RouteIndex.load()
            _cached = index
    return index


def route_index_invalidate() -> None:
    global _cached
    _cached = None


def resolve_route(
    inbound: Inbound, *, index: RouteIndex | None = None, dm_scope: str | None = None
) -> Route:
    """The agent, the session key and the rule that won, for one inbound message.

    ``index`` defaults to this process's (see :func:`route_index`); ``dm_scope``
    defaults to the index's (the gateway's setting). Never scans bindings.
    """
    return (index or route_index()).resolve(inbound, dm_scope=dm_scope)


# ---------------------------------------------------------------------------
# Refusing ties when a binding is saved


def binding_check(binding: Any) -> None:
    """Refuse a binding that is malformed or would tie with a saved one (ValidationError)."""
    from django.core.exceptions import ValidationError
    from django.db.models import Q

    from chats.models import Binding

    channel = (binding.channel or "").strip().lower()
    if not CHANNEL_PATTERN.match(channel):
        raise ValidationError({"channel": ERR_CHANNEL})
    binding.channel = channel
    roles = binding.roles or []
    if not isinstance(roles, list) or not all(isinstance(r, str | int) for r in roles):
        raise ValidationError({"roles": "Roles are a list of role ids."})
    if roles and not (binding.guild_id or "").strip():
        raise ValidationError({"roles": ERR_ROLES_NEED_GUILD})
    if binding.agent_id is None:
        return  # the form reports the missing agent itself
    slug = binding.agent.slug
    candidate = compile_binding(
        id=binding.pk,
        agent_id=binding.agent_id,
        agent_slug=slug,
        channel=channel,
        account_id=binding.account_id,
        peer=binding.peer,
        parent_peer=binding.parent_peer,
        guild_id=binding.guild_id,
        roles=roles,
        team_id=binding.team_id,
    )
    keys = {key for _, key, _ in candidate.slots() if key}
    near = Q(peer="", parent_peer="", guild_id="", team_id="")  # account and channel rules
    if keys:
        near |= (
            Q(peer__in=keys) | Q(parent_peer__in=keys) | Q(guild_id__in=keys) | Q(team_id__in=keys)
        )
    others = Binding.objects.filter(near, channel=channel).select_related("agent")
    if binding.pk:
        others = others.exclude(pk=binding.pk)
    compiled = {
        other.pk: (
            other,
            compile_binding(
                id=other.pk,
                agent_id=other.agent_id,
                agent_slug=other.agent.slug,
                channel=other.channel,
                account_id=other.account_id,
                peer=other.peer,
                parent_peer=other.parent_peer,
                guild_id=other.guild_id,
                roles=other.roles,
                team_id=other.team_id,
            ),
        )
        for other in others
    }
    clashes = binding_conflicts(candidate, [c for _, c in compiled.values()])
    if clashes:
        other, tier = clashes[0]
        raise ValidationError(
            ERR_TIE.format(this=candidate.label, other=other.label, tier=tier),
            code="tie",
        )
