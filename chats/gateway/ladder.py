"""The bindings ladder's words and ties, with no rows and no messages (seed ch. 6).

A binding compiles to a :class:`CompiledBinding`, whose tier is the most
specific field it sets. Two bindings that could both win for one origin tie
(:func:`binding_conflicts`): ``Binding.clean`` refuses them when saved, the
admin and the playground refuse them before. ``chats.gateway.routing`` builds
the index that routes messages from these.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from chats.gateway.ids import (
    ANY_PEER,
    DEFAULT_ACCOUNT,
    GROUP,
    binding_account,
    kind_class,
    peer_id,
)

CHANNEL_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


class Tier(enum.StrEnum):
    PEER = "peer"
    PARENT_PEER = "parentPeer"
    WILDCARD_PEER = "wildcardPeer"
    GUILD_ROLES = "guild+roles"
    GUILD = "guild"
    TEAM = "team"
    ACCOUNT = "accountId"
    CHANNEL = "channel"
    DEFAULT = "default"


LADDER = tuple(Tier)

# Why a tie is refused, not settled: the words the admin, Binding.clean and the playground say.
ERR_TIE = (
    "“{this}” and “{other}” would tie: both are {tier} rules for the same messages, and "
    "nothing would say which wins but the order they were added in. Change one, or delete one."
)
ERR_ROLES_NEED_GUILD = "Roles belong to a guild: set guild_id too."
ERR_CHANNEL = "A channel is letters, digits, - or _ (at most 32)."
ERR_KIND_NEEDED = (
    'A peer needs its kind: direct, group, channel or cron ("*" too: any of that kind).'
)
ERR_KIND_WITHOUT_PEER = (
    'A peer kind goes with a peer: set peer too ("*" for any peer of that kind).'
)
ERR_KIND = "A peer kind is direct, group, channel or cron."
ERR_WILDCARD_PARENT = 'A "*" peer is any peer of its kind: it takes no parent peer.'


_NO_ROLES: frozenset[str] = frozenset()


class Probe(NamedTuple):
    """What the ladder reads of one inbound message, spelled as bindings are (ids folded)."""

    account: str
    peer: str
    kind: str | None  # its kind class: "direct", "group" (group or channel) or "cron"
    parent: str
    guild: str
    roles: tuple[str, ...]
    team: str


class CompiledBinding(NamedTuple):
    """A binding as the index keeps it: a tuple, so a hundred thousand build in well under a second."""

    id: int | None
    agent_id: int
    agent_slug: str
    tier: Tier
    channel: str
    account: str | None  # None: any account ("*"); "" in the row is the default account
    peer: str  # "*": any peer of its kind
    kind: str | None  # the peer's kind class; None: any kind (a row saved before kinds)
    parent_peer: str
    guild: str
    roles: frozenset[str]
    team: str

    @property
    def label(self) -> str:
        """Its words, e.g. ``peer: slack peer direct:mom → work``."""
        parts = [self.channel]
        if self.account is None:
            parts.append('account "*"')
        elif self.account != DEFAULT_ACCOUNT:
            parts.append(f"account {self.account}")
        if self.peer:
            parts.append(f"peer {self.kind or 'any kind'}:{self.peer}")
        for name, value in (
            ("parent", self.parent_peer),
            ("guild", self.guild),
            ("team", self.team),
        ):
            if value:
                parts.append(f"{name} {value}")
        if self.roles:
            parts.append("roles " + ",".join(sorted(self.roles)))
        return f"{self.tier}: {' '.join(parts)} → {self.agent_slug}"

    def fits(self, probe: Probe, *, inherited: bool = False) -> bool:
        """Every field this binding sets matches (``inherited``: its peer is the thread's parent)."""
        if self.account is not None and self.account != probe.account:
            return False
        if inherited:
            if self.peer != probe.parent or self.kind not in (None, GROUP):
                return False  # a thread's parent is a group or channel, never a DM
        elif self.peer:
            if self.peer != ANY_PEER and self.peer != probe.peer:
                return False
            if self.kind is not None and self.kind != probe.kind:
                return False
        if self.parent_peer and self.parent_peer != probe.parent:
            return False
        if self.guild and self.guild != probe.guild:
            return False
        if self.roles and self.roles.isdisjoint(probe.roles):
            return False
        return not (self.team and self.team != probe.team)

    def slots(self) -> list[tuple[Tier, str, dict[str, str | None]]]:
        """Where this binding can win, each with the constraints left to match there."""
        others = {"account": self.account, "guild": self.guild or None, "team": self.team or None}
        if self.tier == Tier.PEER:
            slots = [
                (
                    Tier.PEER,
                    self.peer,
                    {**others, "parent_peer": self.parent_peer or None, "kind": self.kind},
                )
            ]
            if not self.parent_peer and self.kind in (None, GROUP):
                slots.append((Tier.PARENT_PEER, self.peer, others))  # threads under it inherit
            return slots
        if self.tier == Tier.PARENT_PEER:
            return [(Tier.PARENT_PEER, self.parent_peer, others)]
        if self.tier == Tier.WILDCARD_PEER:
            return [(Tier.WILDCARD_PEER, self.kind or "", others)]
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
    peer_kind: str = "",
    parent_peer: str = "",
    guild_id: str = "",
    roles: Iterable[Any] | None = (),
    team_id: str = "",
) -> CompiledBinding:
    channel = (channel or "").strip().lower()
    account = binding_account(account_id)
    peer = peer_id(peer_kind, peer)
    parent_peer = (parent_peer or "").strip()
    guild = (guild_id or "").strip()
    team = (team_id or "").strip()
    role_set = frozenset(r for r in (str(r).strip() for r in roles) if r) if roles else _NO_ROLES
    if peer == ANY_PEER:
        tier = Tier.WILDCARD_PEER
    elif peer:
        tier = Tier.PEER
    elif parent_peer:
        tier = Tier.PARENT_PEER
    elif guild:
        tier = Tier.GUILD_ROLES if role_set else Tier.GUILD
    elif team:
        tier = Tier.TEAM
    elif account is not None:
        tier = Tier.ACCOUNT
    else:
        tier = Tier.CHANNEL
    return CompiledBinding(
        id,
        agent_id,
        agent_slug,
        tier,
        channel,
        account,
        peer,
        kind_class(peer_kind) if peer else None,
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
