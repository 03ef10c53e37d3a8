"""A routine's schedule: a five-field cron expression in a time zone, read by ``cronsim``.

``cronsim`` is the parser healthchecks.io runs its cron checks on. Its times
are Debian cron's: on the spring-forward day a time in the missing hour runs
once, just after the gap (02:30 runs at 03:00); on the fall-back day a time in
the repeated hour runs once, the first time. Time zones are the IANA names
``zoneinfo`` knows.

Everything here is pure: no database, no clock. Times go in and come out as
aware datetimes; the due times are the instants the person's wall clock reads.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from itertools import islice
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

FIELDS = "minute, hour, day of month, month, day of week"
EXAMPLE = "0 8 * * 1-5"
ERR_SCHEDULE_EMPTY = f"A routine needs a schedule: five fields ({FIELDS}), such as {EXAMPLE}."
ERR_SCHEDULE_FIELDS = (
    "A schedule is five fields ({fields}), such as {example}; this one has {count}."
)
ERR_SCHEDULE_BAD = (
    "That schedule can't be read: {why} (the fields are {fields}, such as {example})."
)
ERR_ZONE_EMPTY = "A routine needs a time zone, such as Europe/Berlin or UTC."
ERR_ZONE_UNKNOWN = "{zone!r} is not a time zone Conch knows; give one such as Europe/Berlin or UTC."

# cronsim's own words, said as a sentence.
_WHY = {
    "Bad second": "the seconds are out of range",
    "Bad minute": "the minute is out of range (0-59)",
    "Bad hour": "the hour is out of range (0-23)",
    "Bad day-of-month": "the day of the month is out of range, or that day never comes",
    "Bad month": "the month is out of range (1-12 or JAN-DEC)",
    "Bad day-of-week": "the day of the week is out of range (0-7 or SUN-SAT)",
}


class ScheduleError(ValueError):
    """A schedule or time zone that can't be used. ``field`` names which: ``schedule`` or ``time_zone``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def zone_check(name: str) -> ZoneInfo:
    """The time zone by its IANA name; raises :class:`ScheduleError` with words."""
    name = (name or "").strip()
    if not name:
        raise ScheduleError("time_zone", ERR_ZONE_EMPTY)
    try:
        # zoneinfo refuses a path (absolute, or with ..) as a key, not only an unknown name.
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError("time_zone", ERR_ZONE_UNKNOWN.format(zone=name)) from None


def expression_check(expression: str) -> str:
    """The expression, its fields single-spaced; raises :class:`ScheduleError` with words."""
    parts = (expression or "").split()
    if not parts:
        raise ScheduleError("schedule", ERR_SCHEDULE_EMPTY)
    if len(parts) != 5:
        raise ScheduleError(
            "schedule",
            ERR_SCHEDULE_FIELDS.format(fields=FIELDS, example=EXAMPLE, count=len(parts)),
        )
    normal = " ".join(parts)
    try:
        CronSim(normal, dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    except CronSimError as exc:
        why = _WHY.get(str(exc), str(exc).lower() or "it is not a cron expression")
        raise ScheduleError(
            "schedule", ERR_SCHEDULE_BAD.format(why=why, fields=FIELDS, example=EXAMPLE)
        ) from None
    return normal


def schedule_check(expression: str, zone: str) -> tuple[str, ZoneInfo]:
    """Both at once, the expression first: the normalised expression and the zone."""
    return expression_check(expression), zone_check(zone)


def times_after(expression: str, zone: str, after: dt.datetime) -> Iterator[dt.datetime]:
    """The schedule's times strictly after ``after``, in ``zone``, as aware datetimes.

    Counted from the instant, read on the zone's wall clock: the same instant
    gives the same times whatever zone ``after`` was in.
    """
    expr, tz = schedule_check(expression, zone)
    start = after.astimezone(dt.UTC).astimezone(tz)
    for when in CronSim(expr, start):
        yield when if when.tzinfo is not None else when.replace(tzinfo=tz)


def next_times(expression: str, zone: str, after: dt.datetime, count: int) -> list[dt.datetime]:
    return list(islice(times_after(expression, zone, after), count))


def next_time(expression: str, zone: str, after: dt.datetime) -> dt.datetime:
    return next(times_after(expression, zone, after))


def times_before(expression: str, zone: str, until: dt.datetime) -> Iterator[dt.datetime]:
    """The schedule's times at or before ``until``, latest first."""
    expr, tz = schedule_check(expression, zone)
    start = until.astimezone(dt.UTC).replace(microsecond=0) + dt.timedelta(seconds=1)
    for when in CronSim(expr, start.astimezone(tz), reverse=True):
        yield when if when.tzinfo is not None else when.replace(tzinfo=tz)


def due_between(
    expression: str, zone: str, *, since: dt.datetime, until: dt.datetime, cap: int
) -> tuple[list[dt.datetime], bool]:
    """The due times ``t`` with ``since <= t <= until``, oldest first: at most ``cap`` of
    them, the latest; and whether there were more. Walked back from ``until``, so a year
    of downtime on an every-minute schedule costs ``cap`` steps, not half a million."""
    found: list[dt.datetime] = []
    for when in times_before(expression, zone, until):
        if when < since:
            return found[::-1], False
        if len(found) == cap:
            return found[::-1], True
        found.append(when)
    return found[::-1], False
