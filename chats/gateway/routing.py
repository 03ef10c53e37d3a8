"""Which agent, which session: the routing index over the bindings ladder (seed ch. 6).

:func:`resolve_route` never scans bindings: a :class:`RouteIndex` keeps one dict
per tier, keyed by ``(channel, id)``, built once (``RouteIndex.build`` from any
binding-shaped objects, for the playground) or channel by channel as messages
arrive (``RouteIndex.load`` from the database: until a channel is indexed, its
messages are routed by one indexed lookup a tier, so a cold start never waits for
a channel's bindings). A binding saved or deleted changes just that binding in
place, here and, at their next message, in every other process (each binding is
stamped with the routing version it was saved at, and deletions are recorded); an
agent, an identity link, a reset policy or the gateway's settings changing makes
every process load its index afresh (:func:`routing_changed`). A binding's ``peer`` is matched against
:attr:`Inbound.routing_peer` (the DM's sender, the group, the thread, the cron
job); a thread inherits its parent's binding. The tiers and their ties are
:mod:`chats.gateway.ladder`'s.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q, TextField, Value
from django.db.models.functions import Cast, Greatest
from django.db.models.signals import post_delete

from chats.gateway.ids import (
    ANY_ACCOUNT,
    ANY_PEER,
    DEFAULT_ACCOUNT,
    DIRECT,
    GROUP,
    kind_class,
    peer_id,
)
from chats.gateway.inbound import Inbound
from chats.gateway.keys import is_shared_dm, main_key_for, session_key_for
from chats.gateway.ladder import CompiledBinding, Probe, Tier, compile_binding
from chats.gateway.lifecycle import Policies
from chats.gateway.models import Binding, BindingDeletion, DmScope, GatewayConfig, IdentityLink
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


def _binding_id(binding: CompiledBinding) -> int:
    return binding.id or 0


def _fetch_rows(rows) -> list[tuple]:
    """A queryset of ``_COLUMNS`` as plain tuples (no model instances, roles as text)."""
    sql, params = rows.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _columns(rows):
    return rows.values_list(*_COLUMNS[:7], Cast("roles", output_field=TextField()), "team_id")


def _channel_rows(channel: str, after: int = 0, limit: int | None = None) -> list[tuple]:
    """One channel's bindings past pk ``after``, in pk order, at most ``limit`` of them:
    one query on ``binding_by_channel``."""
    rows = _columns(Binding.objects.filter(channel=channel, pk__gt=after).order_by("pk"))
    return _fetch_rows(rows if limit is None else rows[:limit])


_ACCOUNT_OR_CHANNEL = {"peer": "", "parent_peer": "", "guild_id": "", "team_id": ""}


def _tier_arms(name: str, key: str) -> list[dict[str, Any]]:
    """Where a binding of ``name``'s table under ``key`` may be stored: never fewer rows
    than :func:`_places` puts there (a superset, narrowed after), each arm a prefix of
    the index ``binding_by_tier_keys`` (channel, peer, parent_peer, guild_id, team_id,
    account_id) once the channel is added."""
    if name == "peer":
        return [{"peer": key}]
    if name == "parent":  # a parent peer rule, or a peer rule its threads inherit
        return [{"peer": "", "parent_peer": key}, {"peer": key, "parent_peer": ""}]
    if name == "wildcard":
        return [{"peer": ANY_PEER}]
    if name in ("guild_roles", "guild"):
        return [{"peer": "", "parent_peer": "", "guild_id": key}]
    if name == "team":
        return [{"peer": "", "parent_peer": "", "guild_id": "", "team_id": key}]
    if name == "account":  # an empty account id is the channel's default account
        accounts = [key, ""] if key == DEFAULT_ACCOUNT else [key]
        return [{**_ACCOUNT_OR_CHANNEL, "account_id__in": accounts}]
    return [{**_ACCOUNT_OR_CHANNEL, "account_id": ANY_ACCOUNT}]


def _tier_rows(channel: str, name: str, key: str) -> list[tuple]:
    """The rows that may sit in one table under one key, in pk order: one indexed query
    (each arm names the channel, so SQLite looks each up in the index and unions them)."""
    with connection.cursor() as cursor:
        cursor.execute(*tier_statement(channel, name, key))
        return sorted(cursor.fetchall(), key=itemgetter(0))


def tier_statement(channel: str, name: str, key: str) -> tuple[str, list]:
    """The SQL and parameters of :func:`_tier_rows`' query."""
    sql, params = _tier_sql(connection.vendor, name, key == DEFAULT_ACCOUNT)
    given = {_CHANNEL: channel, _KEY: key}
    return sql, [given.get(p, p) if isinstance(p, str) else p for p in params]


# Stand-ins for a lookup's channel and key, so each table's SQL is made once, not per message.
_CHANNEL, _KEY = "\x00channel", "\x00key"


@functools.cache
def _tier_sql(vendor: str, name: str, default_account: bool) -> tuple[str, tuple]:
    """One table's lookup as SQL with stand-ins (``vendor`` keys the cache: SQL differs)."""
    key = DEFAULT_ACCOUNT if default_account else _KEY
    return _columns(_tier_query(_CHANNEL, name, key)).query.sql_with_params()


def _tier_query(channel: str, name: str, key: str):
    where = Q()
    for arm in _tier_arms(name, key):
        where |= Q(channel=channel, **arm)
    # Unordered: ordered by pk, SQLite would walk the channel's whole index to skip a sort.
    return Binding.objects.filter(where).order_by()


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


def _places(binding: CompiledBinding) -> tuple[tuple[str, str], ...]:
    """Which tables of a :class:`RouteIndex` hold ``binding``, and under which key."""
    tier = binding.tier
    if tier == Tier.PEER:
        if not binding.parent_peer and binding.kind in (None, GROUP):
            return (("peer", binding.peer), ("parent", binding.peer))  # threads inherit it
        return (("peer", binding.peer),)
    if tier == Tier.ACCOUNT:
        return (("account", binding.account or ""),)
    if tier == Tier.PARENT_PEER:
        return (("parent", binding.parent_peer),)
    if tier == Tier.WILDCARD_PEER:
        return (("wildcard", binding.kind or ""),)
    if tier == Tier.GUILD_ROLES:
        return (("guild_roles", binding.guild),)
    if tier == Tier.GUILD:
        return (("guild", binding.guild),)
    if tier == Tier.TEAM:
        return (("team", binding.team),)
    return (("channel", ""),)


TABLES = ("peer", "parent", "wildcard", "guild_roles", "guild", "team", "account", "channel")

# A cold channel's lookups, remembered until the channel is indexed; past this many,
# forgotten at once (each is one indexed query to read again), so strangers cannot grow it.
COLD_MEMO_LIMIT = 20_000

# How many more of a cold channel's bindings each message routed on it indexes, until
# all are: a few milliseconds a message, never the whole channel at once.
WARM_ROWS_PER_MESSAGE = 500


class _ColdTable:
    """One table of a channel not yet indexed: each key looked up in the database."""

    __slots__ = ("_channel", "_index", "_name")

    def __init__(self, index: RouteIndex, channel: str, name: str) -> None:
        self._index, self._channel, self._name = index, channel, name

    def get(self, key: tuple[str, str] | str, default: Any = None) -> tuple[CompiledBinding, ...]:
        name = self._name
        return self._index._cold_lookup(self._channel, name, "" if name == "channel" else key[1])


class RouteIndex:
    """Bindings by tier, each a dict keyed by ``(channel, id)``; read lock-free.

    Built from bindings given at once (:meth:`build`, the playground), or, from
    the database (:meth:`load`), one channel at a time, without ever holding up a
    message for it. While a channel is cold, a message on it is routed by looking
    up, in the database, only the keys its origin has, tier by tier down the
    ladder, stopping at the first tier with a binding that fits: at most one
    indexed query a tier, however many bindings the channel has. Each such
    message also indexes :data:`WARM_ROWS_PER_MESSAGE` more of the channel's
    bindings; once all are, the channel is warm and routed from the dicts alone.
    Both ways run the one ladder (:meth:`_winner`) over the same tables, so they
    answer alike.
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
        channel_rows: Callable[[str, int, int | None], list[tuple]] | None = None,
        tier_rows: Callable[[str, str, str], list[tuple]] | None = None,
        warm_rows_per_message: int = WARM_ROWS_PER_MESSAGE,
    ) -> None:
        self.agents = {agent.id: agent for agent in agents}
        if default_agent_id not in self.agents:
            raise ValueError("The default agent must be one of the agents.")
        self.default = self.agents[default_agent_id]
        self.dm_scope = dm_scope
        # Both sides lower-cased, as OpenClaw's resolveLinkedPeerId compares them.
        self.identity_links = {
            (channel.lower(), peer_id(DIRECT, peer)): name
            for (channel, peer), name in (identity_links or {}).items()
        }
        self.version = version
        self.peer: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.parent: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.wildcard: dict[tuple[str, str], list[CompiledBinding]] = {}  # by (channel, kind)
        self.guild_roles: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.guild: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.team: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.account: dict[tuple[str, str], list[CompiledBinding]] = {}
        self.channel: dict[str, list[CompiledBinding]] = {}
        self._tables: dict[str, dict] = {name: getattr(self, name) for name in TABLES}
        self.count = 0
        self._channel_rows = channel_rows  # None: every binding was given
        self._tier_rows = tier_rows
        self._warm_rows = warm_rows_per_message
        self._by_id: dict[int, CompiledBinding] = {}
        self._loaded: set[str] = set()
        self._read_up_to: dict[str, int] = {}  # a cold channel's last pk indexed
        self._cold: dict[str, dict[tuple[str, str], tuple[CompiledBinding, ...]]] = {}
        self._loading = threading.Lock()
        self._slugs = {agent.id: agent.slug for agent in self.agents.values()}
        with _no_gc_pauses():
            for binding in bindings:
                self._add(binding)
        self._default_rule = Rule(Tier.DEFAULT, None, f"default: → {self.default.slug}")
        self._rules: dict[tuple[int, Tier], Rule] = {}  # made the first time each rule wins
        self._policies: Policies | None = None

    def _add(self, binding: CompiledBinding) -> None:
        """Index a binding read in pk order (a channel's rows, or bindings given at once)."""
        if binding.agent_id not in self.agents:
            return
        self.count += 1
        if binding.id is not None:
            self._by_id[binding.id] = binding
        channel = binding.channel
        tables = self._tables
        for name, key in _places(binding):
            where = channel if name == "channel" else (channel, key)
            tables[name].setdefault(where, []).append(binding)

    def _remove(self, binding_id: int) -> None:
        """Take a binding out of every table that holds it. Each list is replaced, never
        changed, so a message being routed meanwhile reads the old one whole."""
        binding = self._by_id.pop(binding_id, None)
        if binding is None:
            return
        self.count -= 1
        tables = self._tables
        for name, key in _places(binding):
            where = binding.channel if name == "channel" else (binding.channel, key)
            kept = [b for b in tables[name].get(where, ()) if b.id != binding_id]
            if kept:
                tables[name][where] = kept
            else:
                tables[name].pop(where, None)

    def _insert(self, binding: CompiledBinding) -> None:
        """Index one binding in its pk's place among the others (a new list each table)."""
        if binding.agent_id not in self.agents or binding.id is None:
            return
        self.count += 1
        self._by_id[binding.id] = binding
        tables = self._tables
        for name, key in _places(binding):
            where = binding.channel if name == "channel" else (binding.channel, key)
            bindings = list(tables[name].get(where, ()))
            bisect.insort(bindings, binding, key=_binding_id)
            tables[name][where] = bindings

    def _holds(self, channel: str, binding_id: int) -> bool:
        """Whether ``channel``'s bindings up to ``binding_id`` are indexed here."""
        return self.is_warm(channel) or binding_id <= self._read_up_to.get(channel, 0)

    def apply_changes(
        self, *, changed: Iterable[tuple], deleted: Iterable[int], version: int
    ) -> None:
        """Bring the index to ``version`` in place: ``changed`` are the bindings saved since
        (``channel`` then ``_COLUMNS``), ``deleted`` the ids deleted since.

        Only what changed is touched; a message routed meanwhile sees the index before or
        after each binding's change. A cold channel's remembered lookups are forgotten
        (each is one indexed query to read again).
        """
        with self._loading:
            for binding_id in deleted:
                self._remove(binding_id)
            for channel, *row in changed:
                self._remove(row[0])
                if self._holds(channel, row[0]):
                    self._insert(_stored_binding(tuple(row), channel, self._slugs))
            self._cold.clear()
            self._rules = {}
            self.version = version

    def reset_policies(self) -> Policies:
        """The reset policies, read once for this index: a policy changed anywhere makes
        every process load a fresh index (:func:`routing_changed`)."""
        policies = self._policies
        if policies is None:
            policies = self._policies = Policies.load()
        return policies

    def is_warm(self, channel: str) -> bool:
        """Whether ``channel``'s bindings are all indexed (always, for a built index)."""
        return self._channel_rows is None or channel in self._loaded

    def _index_rows(self, channel: str, limit: int | None) -> None:
        """Index the next ``limit`` (None: all the rest) of ``channel``'s bindings; the
        caller holds ``_loading``."""
        assert self._channel_rows is not None
        if channel in self._loaded:
            return
        rows = self._channel_rows(channel, self._read_up_to.get(channel, 0), limit)
        with _no_gc_pauses():
            for row in rows:
                self._add(_stored_binding(row, channel, self._slugs))
        if limit is None or len(rows) < limit:
            self._loaded.add(channel)
            self._read_up_to.pop(channel, None)
            self._cold.pop(channel, None)
        else:
            self._read_up_to[channel] = rows[-1][0]

    def load_channel(self, channel: str) -> None:
        """Index all of ``channel``'s bindings now, in one query (a no-op for a built index)."""
        if self.is_warm(channel):
            return
        with self._loading:
            self._index_rows(channel, None)

    def _warm_some(self, channel: str) -> None:
        """Index a few more of a cold channel's bindings, unless another thread is at it."""
        if self._warm_rows <= 0 or not self._loading.acquire(blocking=False):
            return
        try:
            self._index_rows(channel, self._warm_rows)
        finally:
            self._loading.release()

    def _cold_lookup(self, channel: str, name: str, key: str) -> tuple[CompiledBinding, ...]:
        """What table ``name`` would hold under ``key`` once ``channel`` is indexed, read
        from the database in one indexed query, and remembered until it is."""
        memo = self._cold.setdefault(channel, {})
        found = memo.get((name, key))
        if found is not None:
            return found
        assert self._tier_rows is not None
        rows = self._tier_rows(channel, name, key)
        # guild+roles and guild rules share a query: keep both answers.
        names = ("guild_roles", "guild") if name in ("guild_roles", "guild") else (name,)
        kept: dict[str, list[CompiledBinding]] = {n: [] for n in names}
        for row in rows:
            binding = _stored_binding(row, channel, self._slugs)
            if binding.agent_id not in self.agents:
                continue
            for place, place_key in _places(binding):
                if place in kept and place_key == key:
                    kept[place].append(binding)
        if len(memo) >= COLD_MEMO_LIMIT:
            memo.clear()
        for n, bindings in kept.items():
            memo[(n, key)] = tuple(bindings)
        return memo[(name, key)]

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
    def load(cls, *, warm_rows_per_message: int = WARM_ROWS_PER_MESSAGE) -> RouteIndex:
        """From the database, in four queries and no bindings: every channel starts cold."""
        config = gateway_config()  # read first: a change after this only makes the index newer
        default = default_agent()
        agents = [
            AgentRef(*row) for row in Agent.objects.values_list("id", "slug", "name", "workspace")
        ]
        links = {
            (channel.lower(), peer_id(DIRECT, peer)): name
            for channel, peer, name in IdentityLink.objects.values_list("channel", "peer", "name")
        }
        return cls(
            agents=agents,
            default_agent_id=default.id,
            dm_scope=config.dm_scope,
            identity_links=links,
            version=config.routing_version,
            channel_rows=_channel_rows,
            tier_rows=_tier_rows,
            warm_rows_per_message=warm_rows_per_message,
        )

    def load_every_channel(self) -> None:
        """Index every channel's bindings now (the admin's and the benchmark's door)."""
        if self._channel_rows is None:
            return
        for channel in Binding.objects.order_by().values_list("channel", flat=True).distinct():
            self.load_channel(channel)

    def winner(self, inbound: Inbound) -> tuple[CompiledBinding | None, Tier]:
        """The first tier down the ladder with a binding that fits."""
        binding, tier, _ = self._winner(inbound)
        return binding, tier

    def _winner(self, inbound: Inbound) -> tuple[CompiledBinding | None, Tier, bool]:
        """:meth:`winner`, and whether the channel was warm (its bindings kept, not read)."""
        channel = inbound.channel
        warm = self._channel_rows is None or channel in self._loaded
        # A warm channel's dicts, or a cold one's lookups: both answer .get(key, default).
        tables: tuple[Any, ...]
        if warm:
            tables = (
                *(self.peer, self.parent, self.wildcard),
                *(self.guild_roles, self.guild, self.team),
                *(self.account, self.channel),
            )
        else:
            tables = tuple(_ColdTable(self, channel, name) for name in TABLES)
        peers, parents, wildcards, guild_roles, guilds, teams, accounts, channels = tables
        probe = Probe(
            inbound.account_id,
            peer_id(inbound.peer_kind, inbound.routing_peer),
            kind_class(inbound.peer_kind),
            inbound.thread_parent.strip(),
            inbound.guild_id,
            inbound.member_roles,
            inbound.team_id,
        )
        binding, tier = self._ladder(
            probe, channel, peers, parents, wildcards, guild_roles, guilds, teams, accounts,
            channels,
        )  # fmt: skip
        if not warm:
            self._warm_some(channel)
        return binding, tier, warm

    @staticmethod
    def _ladder(
        probe, channel, peers, parents, wildcards, guild_roles, guilds, teams, accounts, channels
    ) -> tuple[CompiledBinding | None, Tier]:
        """Down the ladder over the tables given (a warm channel's dicts, or a cold one's
        lookups); each table is consulted only when the origin has its key."""
        peer = probe.peer
        if peer:
            for binding in peers.get((channel, peer), _NO_BINDINGS):
                if binding.fits(probe):
                    return binding, Tier.PEER
        parent = probe.parent
        if parent:
            for binding in parents.get((channel, parent), _NO_BINDINGS):
                if binding.fits(probe, inherited=binding.tier == Tier.PEER):
                    return binding, Tier.PARENT_PEER
        if peer:
            for binding in wildcards.get((channel, probe.kind or ""), _NO_BINDINGS):
                if binding.fits(probe):
                    return binding, Tier.WILDCARD_PEER
        guild = probe.guild
        if guild:
            if probe.roles:
                for binding in guild_roles.get((channel, guild), _NO_BINDINGS):
                    if binding.fits(probe):
                        return binding, Tier.GUILD_ROLES
            for binding in guilds.get((channel, guild), _NO_BINDINGS):
                if binding.fits(probe):
                    return binding, Tier.GUILD
        if probe.team:
            for binding in teams.get((channel, probe.team), _NO_BINDINGS):
                if binding.fits(probe):
                    return binding, Tier.TEAM
        for binding in accounts.get((channel, probe.account), _NO_BINDINGS):
            if binding.fits(probe):
                return binding, Tier.ACCOUNT
        for binding in channels.get(channel, _NO_BINDINGS):
            if binding.fits(probe):
                return binding, Tier.CHANNEL
        return None, Tier.DEFAULT

    def resolve(self, inbound: Inbound, *, dm_scope: str | None = None) -> Route:
        binding, tier, warm = self._winner(inbound)
        if binding is None:
            agent, rule = self.default, self._default_rule
        else:
            agent = self.agents[binding.agent_id]
            # A warm binding lives as long as the index, so its rule is made once; a cold
            # one was read for this message.
            known = self._rules.get((id(binding), tier)) if warm else None
            if known is None:
                label = binding.label
                if tier != binding.tier:  # a peer binding reached through a thread's parent
                    label = f"{tier} (inherited from {label})"
                known = Rule(tier, binding.id, label)
                if warm:
                    known = self._rules.setdefault((id(binding), tier), known)
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
# The process's index: built on first use, brought up to date in place


# How many versions of binding deletions are kept for processes behind; an index older
# than the oldest kept is loaded afresh.
DELETIONS_KEPT = 10_000

_lock = threading.Lock()
_cached: RouteIndex | None = None


def route_index() -> RouteIndex:
    """This process's index, loaded on first use; no query after that.

    A caller that routes a message checks the stored routing version in a query it
    makes anyway (the inbound path's session lookup: ``routing_version_stored``), and
    calls :func:`route_index_catch_up` when its index is older: a binding changed by
    another process is seen on the next message, and a message costs no query for it.
    """
    global _cached
    index = _cached
    if index is None:
        with _lock:
            index = _cached
            if index is None:
                index = _cached = RouteIndex.load()
    return index


def _catch_up(index: RouteIndex) -> RouteIndex:
    """``index`` with the bindings changed since its version applied in place (three
    queries), or a fresh index if what changed was more than bindings."""
    stored = GatewayConfig.objects.filter(pk=1).values_list(
        "routing_version", "routing_reset_version"
    )
    found = stored.first()
    if found is None:  # the settings row is gone: all is new
        return RouteIndex.load()
    version, reset_version = found
    if version == index.version:
        return index
    if reset_version > index.version:
        return RouteIndex.load()
    since = {"routing_version__gt": index.version, "routing_version__lte": version}
    changed = _fetch_rows(
        Binding.objects.filter(**since)
        .order_by("pk")
        .values_list("channel", *_COLUMNS[:7], Cast("roles", output_field=TextField()), "team_id")
    )
    deleted = BindingDeletion.objects.filter(**since).values_list("binding_id", flat=True)
    index.apply_changes(changed=changed, deleted=list(deleted), version=version)
    return index


def route_index_catch_up() -> RouteIndex:
    """This process's index, brought up to the stored version now: just the bindings
    changed since applied in place (or loaded afresh, see :func:`_catch_up`)."""
    global _cached
    with _lock:
        index = _cached = RouteIndex.load() if _cached is None else _catch_up(_cached)
    return index


def _catch_up_after_commit() -> None:
    """A binding changed here: apply it to this process's index, if it has one yet."""
    if _cached is not None:
        route_index_catch_up()


def route_index_invalidate() -> None:
    global _cached
    _cached = None


def _bump(*, reset: bool) -> int:
    """The next routing version, stored; ``reset``: every index older is loaded afresh."""
    GatewayConfig.objects.get_or_create(pk=1)
    changes: dict[str, Any] = {"routing_version": F("routing_version") + 1}
    if reset:
        changes["routing_reset_version"] = F("routing_version") + 1
    GatewayConfig.objects.filter(pk=1).update(**changes)
    return GatewayConfig.objects.values_list("routing_version", flat=True).get(pk=1)


def routing_changed(sender, instance=None, created=False, raw=False, **kwargs) -> None:
    """A binding, an agent, an identity link, a reset policy or the settings changed: bump
    the stored version, so every process sees it at its next message.

    A binding is stamped with the version it was saved at (a deletion is recorded), so
    this process and the others apply just that binding's change in place. Anything
    else drops the index here, and marks the version for a fresh load everywhere.
    """
    if raw:
        return
    if sender is GatewayConfig and created:
        return  # the settings row being made: nothing routing reads has changed
    if sender is not Binding:
        route_index_invalidate()
        _bump(reset=True)
        transaction.on_commit(route_index_invalidate)
        return
    version = _bump(reset=False)
    if kwargs.get("signal") is post_delete:
        BindingDeletion.objects.create(binding_id=instance.pk, routing_version=version)
        horizon = version - DELETIONS_KEPT
        if BindingDeletion.objects.filter(routing_version__lte=horizon).delete()[0]:
            # An index older than the deletions still kept could miss one: load it afresh.
            GatewayConfig.objects.filter(pk=1).update(
                routing_reset_version=Greatest("routing_reset_version", Value(horizon))
            )
    else:
        Binding.objects.filter(pk=instance.pk).update(routing_version=version)
    transaction.on_commit(_catch_up_after_commit)


def resolve_route(
    inbound: Inbound, *, index: RouteIndex | None = None, dm_scope: str | None = None
) -> Route:
    """The agent, the session key and the rule that won, for one inbound message.

    ``index`` defaults to this process's, checked against the stored routing version
    first (one query: this door is the admin's and the tests', not the inbound path's,
    which reads the version with the session); ``dm_scope`` defaults to the index's
    (the gateway's setting). Never scans bindings.
    """
    if index is None:
        index = route_index()
        stored = GatewayConfig.objects.filter(pk=1).values_list("routing_version", flat=True)
        found = stored.first()
        if found is None or found > index.version:
            index = route_index_catch_up()
    return index.resolve(inbound, dm_scope=dm_scope)
