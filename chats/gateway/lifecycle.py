"""When a session starts fresh (seed ch. 3): daily at a local hour, after idle minutes,
on ``/new`` or ``/reset``, or never.

The policy for a session is the most specific :class:`ResetPolicy`: its
channel and chat type, then its channel, then its chat type, then the
catch-all; with none, daily at 04:00 in ``CONCH_TIME_ZONE``. Cron runs are
fresh every run and never reset.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from django.conf import settings

from chats.gateway.models import ResetMode, ResetPolicy

# A bare /new or /reset. A chat app whose commands name a bot (Telegram's /new@bot)
# drops its own bot's name before here and keeps back commands for other bots.
MANUAL_RESET = re.compile(r"^/(new|reset)(?:\s+(.*))?$", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class Policy:
    mode: str = ResetMode.DAILY
    at_hour: int = 4
    idle_minutes: int | None = None


DEFAULT_POLICY = Policy()


def local_zone() -> ZoneInfo:
    return ZoneInfo(settings.CONCH_TIME_ZONE)


def daily_boundary(now: dt.datetime, at_hour: int, zone: ZoneInfo) -> dt.datetime:
    """The latest local ``at_hour:00`` at or before ``now``."""
    local = now.astimezone(zone)
    day = local.date()
    boundary = dt.datetime.combine(day, dt.time(at_hour), tzinfo=zone)
    if boundary > local:
        boundary = dt.datetime.combine(day - dt.timedelta(days=1), dt.time(at_hour), tzinfo=zone)
    return boundary.astimezone(dt.UTC)


class Policies:
    """Every reset policy, read once; ``for_session`` picks the most specific."""

    def __init__(self, rows: dict[tuple[str, str], Policy]) -> None:
        self.rows = rows

    @classmethod
    def load(cls) -> Policies:
        return cls(
            {
                (p.chat_type, p.channel.lower()): Policy(p.mode, p.at_hour, p.idle_minutes)
                for p in ResetPolicy.objects.all()
            }
        )

    def for_session(self, *, chat_type: str, channel: str) -> Policy:
        for key in ((chat_type, channel), ("", channel), (chat_type, ""), ("", "")):
            if key in self.rows:
                return self.rows[key]
        return DEFAULT_POLICY

    def all(self) -> list[Policy]:
        policies = list(self.rows.values())
        if ("", "") not in self.rows:
            policies.append(DEFAULT_POLICY)
        return policies


def reset_reason(
    policy: Policy, *, last_interaction_at: dt.datetime, now: dt.datetime, zone: ZoneInfo
) -> str:
    """Why a session is due to start fresh now, or "" if it isn't."""
    if policy.mode == ResetMode.NONE:
        return ""
    if policy.mode == ResetMode.DAILY:
        boundary = daily_boundary(now, policy.at_hour, zone)
        if last_interaction_at < boundary:
            return f"the daily reset at {policy.at_hour:02d}:00"
    if policy.idle_minutes and now - last_interaction_at >= dt.timedelta(
        minutes=policy.idle_minutes
    ):
        return f"no messages for {policy.idle_minutes} minutes"
    return ""


def due_before(policy: Policy, *, now: dt.datetime, zone: ZoneInfo) -> dt.datetime | None:
    """Sessions last touched before this are due under ``policy`` (None: never)."""
    if policy.mode == ResetMode.NONE:
        return None
    cutoffs = []
    if policy.mode == ResetMode.DAILY:
        cutoffs.append(daily_boundary(now, policy.at_hour, zone))
    if policy.idle_minutes:
        cutoffs.append(now - dt.timedelta(minutes=policy.idle_minutes))
    return max(cutoffs) if cutoffs else None


def manual_reset(text: str) -> tuple[str, str] | None:
    """``/new`` or ``/reset``: the command, and the words after it."""
    match = MANUAL_RESET.match(text.strip())
    if match is None:
        return None
    return f"/{match.group(1).lower()}", (match.group(2) or "").strip()
