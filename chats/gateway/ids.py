"""How the gateway spells the ids it is given: account ids, peer kinds, case folding.

Pure functions, no rows: the ladder, the keys, the inbound parser and the
migrations all spell ids the same way through here. The rules are OpenClaw's
(``src/routing/account-id.ts``, ``src/routing/resolve-route.ts``):

- an account id is trimmed and lower-cased, and runs of odd characters become
  ``-``; an empty one is the channel's default account, ``default``;
- a peer has a kind, ``direct``, ``group`` or ``channel`` (and Conch's own
  ``cron``, a scheduled job); ``group`` and ``channel`` are one kind to
  matching, as OpenClaw's compatibility rule has it, and ``direct`` never
  meets them;
- a person's id in a DM is lower-cased on every channel, as OpenClaw's
  ``buildAgentPeerSessionKey`` does (``Alice@Example.com`` and
  ``alice@example.com`` DMing over iMessage are one person); a group's, a
  channel's, a room's and a thread's id is kept as the platform gave it, on every
  channel: Matrix room ids (``!MixedRoomAbCdEf:example.org``) and Signal's base64
  group ids tell rooms apart by case, and folding them once gave two rooms one
  session. (OpenClaw keeps only Signal's and Matrix's as given and lower-cases the
  rest; Conch keeps them all, since no platform gives one room in two cases, and
  the README lists the difference.)
"""

from __future__ import annotations

import re

DEFAULT_ACCOUNT = "default"
ANY_ACCOUNT = "*"
ANY_PEER = "*"

_VALID_ACCOUNT = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$", re.ASCII | re.IGNORECASE)
_ODD_CHARACTERS = re.compile(r"[^a-z0-9_-]+", re.ASCII)

DIRECT, GROUP, CHANNEL, CRON = "direct", "group", "channel", "cron"
PEER_KINDS = (DIRECT, GROUP, CHANNEL, CRON)


def normalize_account_id(value: str | None) -> str:
    """An account id as routing and keys compare it: ``" Prod/US East "`` is ``prod-us-east``.

    Empty, or nothing left once odd characters go, is :data:`DEFAULT_ACCOUNT`.
    """
    trimmed = (value or "").strip()
    if not trimmed:
        return DEFAULT_ACCOUNT
    lowered = trimmed.lower()
    if _VALID_ACCOUNT.match(trimmed):
        return lowered
    canonical = _ODD_CHARACTERS.sub("-", lowered).lstrip("-").rstrip("-")[:64]
    return canonical or DEFAULT_ACCOUNT


def binding_account(value: str | None) -> str | None:
    """A binding's account: ``None`` for ``"*"`` (any account), else the normalized id,
    so an empty one is the channel's default account."""
    if (value or "").strip() == ANY_ACCOUNT:
        return None
    return normalize_account_id(value)


def kind_class(kind: str | None) -> str | None:
    """What a peer kind matches as: ``group`` and ``channel`` are one. ``None`` stays ``None``."""
    if not kind:
        return None
    return GROUP if kind in (GROUP, CHANNEL) else kind


def peer_id(kind: str | None, value: str | None) -> str:
    """A peer's id as compared and keyed: a person's (``direct``) lower-cased, on every
    channel; a group's, channel's or thread's kept as given. Trimmed either way."""
    value = (value or "").strip()
    return value.lower() if kind == DIRECT else value
