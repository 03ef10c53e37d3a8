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
- on channels whose ids ignore case (Slack, Discord, Matrix, Telegram
  usernames) peer and thread ids are case-folded before they are compared or
  keyed; elsewhere (Signal's base64 group ids, WhatsApp numbers) they are kept.
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

# Channels whose peer and thread ids are the same whatever their case.
CASE_INSENSITIVE_CHANNELS = frozenset({"slack", "discord", "matrix", "telegram"})


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


def fold_id(channel: str, value: str) -> str:
    """A peer or thread id as compared and keyed on ``channel``: folded where case means nothing."""
    if channel in CASE_INSENSITIVE_CHANNELS:
        return value.casefold()
    return value
