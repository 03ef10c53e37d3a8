"""Which agent, which session: the routing index over the bindings ladder (seed ch. 6).

:func:`resolve_route` never scans bindings: a :class:`RouteIndex` keeps one dict
per tier, keyed by ``(channel, id)``, built once (``RouteIndex.load`` from the
database, ``RouteIndex.build`` from any binding-shaped objects, for the playground)
and dropped by :func:`routing_changed` when a binding, an agent, an identity link
or the gateway's settings change. A binding's ``peer`` is matched against
:attr:`Inbound.routing_peer` (the DM's sender, the group, the thread, the cron
job); a thread inherits its parent's binding. The tiers and their ties are
:mod:`chats.gateway.ladder`'s.
"""

from __future__ import annotations

import contextlib
import gc
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import F, TextField
from django.db.models.functions import Cast

from chats.gateway.ids import (
    ANY_ACCOUNT,
    ANY_PEER,
    DEFAULT_ACCOUNT,
    GROUP,
    fold_id,
    kind_class,
)
from chats.gateway.inbound import Inbound
from chats.gateway.keys import is_shared_dm, main_key_for, session_key_for
from chats.gateway.ladder import CompiledBinding, Probe, Tier, compile_binding
from chats.gateway.models import Binding, DmScope, GatewayConfig, IdentityLink
from chats.gateway.selectors import gateway_config
from chats.models import Agent
from chats.runtime.chats import default_agent


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


EMPTY_ROLES = frozenset({None, "", "[]"})
_NO_ROLES: frozenset[str] = frozenset()


def _roles_from_text(text: str | None) -> list[Any]:
    if text in EMPTY_ROLES:
        return []
    roles = json.loads(text or "[]")
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

# A channel's bindings as stored: Binding.clean spelled them when saved (and the
# migration that brought kinds spelled the older ones), so they are read as they are.
_COLUMNS = (
    "id",
    "agent_id",
    "account_id",
    "peer",
    "peer_kind",
    "parent_peer",
    "guild_id",
    "roles",
    "team_id",
)


def _channel_rows(channel: str) -> list[tuple]:
    """One channel's bindings as plain tuples, in one query (no model instances, roles as text)."""
    rows = (
        Binding.objects.filter(channel=channel)
        .order_by("pk")
        .values_list(*_COLUMNS[:7], Cast("roles", output_field=TextField()), "team_id")
    )
    sql, params = rows.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


_STORED_KIND = {"": None, "direct": "direct", "group": GROUP, "channel": GROUP, "cron": "cron"}


def _stored_binding(row: tuple, channel: str, slugs: Mapping[int, str]) -> CompiledBinding:
    """A stored row as the ladder's tuple: :func:`compile_binding`'s rules, without re-spelling."""
    id_, agent_id, account, peer, kind, parent_peer, guild, roles_text, team = row
    roles = (
        frozenset(r for r in (str(r).strip() for r in _roles_from_text(roles_text)) if r)
        if roles_text not in EMPTY_ROLES
        else _NO_ROLES
    )
    if peer:
        tier = Tier.WILDCARD_PEER if peer == ANY_PEER else Tier.PEER
    elif parent_peer:
        tier = Tier.PARENT_PEER
    elif guild:
        tier = Tier.GUILD_ROLES if roles else Tier.GUILD
    elif team:
        tier = Tier.TEAM
    elif account == ANY_ACCOUNT:
        tier = Tier.CHANNEL
    else:
        tier = Tier.ACCOUNT
    return CompiledBinding(
        id_,
        agent_id,
        slugs.get(agent_id, "?"),
        tier,
        channel,
        None if account == ANY_ACCOUNT else (account or DEFAULT_ACCOUNT),
        peer,
        _STORED_KIND.get(kind) if peer else None,
        parent_peer,
        guild,
        roles,
        team,
    )


class RouteIndex:
    """Bindings by tier, each a dict keyed by ``(channel, id)``; read lock-free.

    Built from bindings given at once (:meth:`build`, the playground), or, from
    the database (:meth:`load`), one channel at a time: a channel's bindings are
    read and indexed the first time a message on that channel is routed, in one
    query, so a cold start reads no bindings at all.
    """

    def __init__(
        self,
        *,
        bindings: Iterable[CompiledBinding] = (),
        agents: Iterable[AgentRef],
        default_agent_id: int,
        dm_scope: str = DmScope.PER_CHANNEL_PEER,
        identity_links: Mapping[tuple[str, str], str] | None = None,
        version: int = 0,
        channel_rows: Callable[[str], Iterable[tuple]] | None = None,
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
        self.wildcard: dict[tuple[str, str], list[CompiledBinding]] = {}  # by (channel, kind)
        self.guild_roles: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.guild: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.team: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.account: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.channel: dict[str, list[CompiledBinding]] = {}
        self.count = 0
        self._channel_rows = channel_rows  # None: every binding was given
        self._loaded: set[str] = set()
        self._loading = threading.Lock()
        with _no_gc_pauses():
            for binding in bindings:
                self._add(binding)
        self._default_rule = Rule(Tier.DEFAULT, None, f"default: → {self.default.slug}")
        self._rules: dict[tuple[int, Tier], Rule] = {}  # made the first time each rule wins

    def _add(self, binding: CompiledBinding) -> None:
        if binding.agent_id not in self.agents:
            return
        self.count += 1
        tier = binding.tier
        channel = binding.channel
        if tier == Tier.PEER:
            self.peer.setdefault((channel, binding.peer), []).append(binding)
            if not binding.parent_peer and binding.kind in (None, GROUP):
                self.parent.setdefault((channel, binding.peer), []).append(binding)
        elif tier == Tier.ACCOUNT:
            self.account.setdefault((channel, binding.account or ""), []).append(binding)
        elif tier == Tier.PARENT_PEER:
            self.parent.setdefault((channel, binding.parent_peer), []).append(binding)
        elif tier == Tier.WILDCARD_PEER:
            self.wildcard.setdefault((channel, binding.kind or ""), []).append(binding)
        elif tier == Tier.GUILD_ROLES:
            self.guild_roles.setdefault((channel, binding.guild), []).append(binding)
        elif tier == Tier.GUILD:
            self.guild.setdefault((channel, binding.guild), []).append(binding)
        elif tier == Tier.TEAM:
            self.team.setdefault((channel, binding.team), []).append(binding)
        else:
            self.channel.setdefault(channel, []).append(binding)

    def load_channel(self, channel: str) -> None:
        """Index ``channel``'s bindings from the database, once (a no-op for a built index)."""
        if self._channel_rows is None or channel in self._loaded:
            return
        with self._loading:
            if channel in self._loaded:
                return
            slugs = {agent.id: agent.slug for agent in self.agents.values()}
            with _no_gc_pauses():
                for row in self._channel_rows(channel):
                    self._add(_stored_binding(row, channel, slugs))
            self._loaded.add(channel)

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
                    peer_kind=getattr(b, "peer_kind", ""),
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
        """From the database, in three queries; each channel's bindings in one more, when
        a message on it is first routed (:meth:`load_channel`)."""
        config = gateway_config()  # read first: a change after this only makes the index newer
        default = default_agent()
        agents = [
            AgentRef(*row) for row in Agent.objects.values_list("id", "slug", "name", "workspace")
        ]
        links = {
            (channel.lower(), fold_id(channel.lower(), peer)): name
            for channel, peer, name in IdentityLink.objects.values_list("channel", "peer", "name")
        }
        return cls(
            agents=agents,
            default_agent_id=default.id,
            dm_scope=config.dm_scope,
            identity_links=links,
            version=config.routing_version,
            channel_rows=_channel_rows,
        )

    def load_every_channel(self) -> None:
        """Index every channel's bindings now (the admin's and the benchmark's door)."""
        if self._channel_rows is None:
            return
        for channel in Binding.objects.order_by().values_list("channel", flat=True).distinct():
            self.load_channel(channel)

    def winner(self, inbound: Inbound) -> tuple[CompiledBinding | None, Tier]:
        """The first tier down the ladder with a binding that fits."""
        channel = inbound.channel
        if channel not in self._loaded and self._channel_rows is not None:
            self.load_channel(channel)
        probe = Probe(
            inbound.account_id,
            fold_id(channel, inbound.routing_peer),
            kind_class(inbound.peer_kind),
            fold_id(channel, inbound.thread_parent),
            inbound.guild_id,
            inbound.member_roles,
            inbound.team_id,
        )
        peer = probe.peer
        if peer:
            for binding in self.peer.get((channel, peer), _NO_BINDINGS):
                if binding.fits(probe):
                    return binding, Tier.PEER
        parent = probe.parent
        if parent:
            for binding in self.parent.get((channel, parent), _NO_BINDINGS):
                if binding.fits(probe, inherited=binding.tier == Tier.PEER):
                    return binding, Tier.PARENT_PEER
        if peer:
            for binding in self.wildcard.get((channel, probe.kind or ""), _NO_BINDINGS):
                if binding.fits(probe):
                    return binding, Tier.WILDCARD_PEER
        guild = probe.guild
        if guild:
            if probe.roles:
                for binding in self.guild_roles.get((channel, guild), _NO_BINDINGS):
                    if binding.fits(probe):
                        return binding, Tier.GUILD_ROLES
            for binding in self.guild.get((channel, guild), _NO_BINDINGS):
                if binding.fits(probe):
                    return binding, Tier.GUILD
        if probe.team:
            for binding in self.team.get((channel, probe.team), _NO_BINDINGS):
                if binding.fits(probe):
                    return binding, Tier.TEAM
        for binding in self.account.get((channel, probe.account), _NO_BINDINGS):
            if binding.fits(probe):
                return binding, Tier.ACCOUNT
        for binding in self.channel.get(channel, _NO_BINDINGS):
            if binding.fits(probe):
                return binding, Tier.CHANNEL
        return None, Tier.DEFAULT

    def resolve(self, inbound: Inbound, *, dm_scope: str | None = None) -> Route:
        binding, tier = self.winner(inbound)
        if binding is None:
            agent, rule = self.default, self._default_rule
        else:
            agent = self.agents[binding.agent_id]
            known = self._rules.get((id(binding), tier))
            if known is None:
                label = binding.label
                if tier != binding.tier:  # a peer binding reached through a thread's parent
                    label = f"{tier} (inherited from {label})"
                known = self._rules.setdefault((id(binding), tier), Rule(tier, binding.id, label))
            rule = known
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


def routing_changed(sender, instance=None, created=False, raw=False, **kwargs) -> None:
    """A binding, an agent, an identity link or the settings changed: drop the index here,
    and bump the stored version so other processes drop theirs at their next message."""
    if raw:
        return
    if sender is GatewayConfig and created:
        return  # the settings row being made: nothing routing reads has changed
    route_index_invalidate()
    GatewayConfig.objects.get_or_create(pk=1)
    GatewayConfig.objects.filter(pk=1).update(routing_version=F("routing_version") + 1)
    transaction.on_commit(route_index_invalidate)


def resolve_route(
    inbound: Inbound, *, index: RouteIndex | None = None, dm_scope: str | None = None
) -> Route:
    """The agent, the session key and the rule that won, for one inbound message.

    ``index`` defaults to this process's (see :func:`route_index`); ``dm_scope``
    defaults to the index's (the gateway's setting). Never scans bindings.
    """
    return (index or route_index()).resolve(inbound, dm_scope=dm_scope)
