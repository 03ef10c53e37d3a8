"""Routines: words a persona runs on a schedule, each run a fresh session on the cron lane.

A routine's schedule is cron in a time zone (:mod:`chats.gateway.schedule`).
The runner's sweep (:func:`routines_fire`, registered in ``apps.py``) looks at
the routines whose ``next_due_at`` has come:

- **Exactly once.** A due time is claimed by inserting its
  :class:`~chats.gateway.models.RoutineRun`; the (routine, due time) pair is
  unique, so with several runners one insert wins and the others get an
  IntegrityError and leave that time alone. The claim, the run's session and
  its first message commit together: a crash before the commit leaves the time
  unclaimed, and the next sweep runs it.
- **After downtime**, the due times that passed while nothing swept run once,
  as the latest of them (``missed`` counts the rest), or, for a routine set to
  skip, not at all: one skipped run records what was missed. A time is
  missed when it is more than :data:`MISSED_AFTER` old when first seen.
- **Each run is a fresh session** (seed ch. 1: "each run spawns a fresh
  session"): its key is ``agent:<persona>:cron:<routine>:<run>``, its chat's
  origin is a routine, so its reply runs on the cron lane (``CONCH_CRON_LANE``
  at once) and the chat list says "from a routine".
- **Where the result goes**: the run's chat always has it; a chat-app peer
  gets it through the outbox (the session's ``reply_to``, as any gateway
  reply); a chat of yours gets a note with the words fenced.

Pausing empties ``next_due_at``: the times that pass while paused are not
missed, they were not wanted. Resuming counts from the moment of resuming.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from chats import events
from chats.gateway.inbound import Inbound
from chats.gateway.keys import main_key_for, session_key_for
from chats.gateway.lifecycle import local_zone
from chats.gateway.models import (
    ChatType,
    Routine,
    RoutineDelivery,
    RoutineMissed,
    RoutineRun,
    RunState,
    RunTrigger,
)
from chats.gateway.schedule import due_between, next_time, next_times
from chats.gateway.services import session_start
from chats.limits import LIMITS
from chats.models import (
    Conversation,
    EntryKind,
    EntryRole,
    Origin,
    Taint,
    Turn,
)
from chats.quoting import conch_note, fence
from chats.runtime.chats import ConchError, entry_append
from chats.runtime.turns import message_send
from chats.taint import Cause, taint_raise

log = logging.getLogger(__name__)

# A due time first seen later than this was missed (Conch was down, or no runner swept).
MISSED_AFTER = dt.timedelta(minutes=2)
# After downtime, at most this many missed times are counted, walking back from now.
MISSED_COUNT_CAP = 1000
RESULT_CHARS = 4000
CRON_CHANNEL = "cron"

ERR_SKIPPED = "Missed while Conch was down; this routine skips what it missed."
ERR_RUN_FAILED = "The run could not start: {why}"


# ---------------------------------------------------------------------------
# Making, pausing, resuming


def routine_create(*, owner, now: dt.datetime | None = None, **fields) -> Routine:
    """Check and save a routine; its first due time is the first after ``now``.

    Raises django's ValidationError naming the field at fault.
    """
    now = now or timezone.now()
    routine = Routine(owner=owner, **fields)
    routine.full_clean()
    if not routine.paused:
        routine.next_due_at = next_time(routine.schedule, routine.time_zone, now)
    routine.save()
    return routine


def routine_pause(*, routine: Routine) -> Routine:
    Routine.objects.filter(pk=routine.pk).update(paused=True, next_due_at=None)
    routine.paused, routine.next_due_at = True, None
    return routine


def routine_resume(*, routine: Routine, now: dt.datetime | None = None) -> Routine:
    """Due again from now on: what passed while paused is not run."""
    now = now or timezone.now()
    due = next_time(routine.schedule, routine.time_zone, now)
    Routine.objects.filter(pk=routine.pk, paused=True).update(paused=False, next_due_at=due)
    routine.refresh_from_db()
    return routine


def routine_next_times(
    *, routine: Routine, now: dt.datetime | None = None, count: int = 5, zone=None
) -> list[dt.datetime]:
    """The next ``count`` times it will run, on ``zone``'s clock (the person's, by default)."""
    now = now or timezone.now()
    zone = zone or local_zone()
    start = now
    if routine.next_due_at is not None and routine.next_due_at <= now:
        start = routine.next_due_at - dt.timedelta(seconds=1)  # due, not yet swept
    return [
        t.astimezone(zone) for t in next_times(routine.schedule, routine.time_zone, start, count)
    ]


# ---------------------------------------------------------------------------
# Claiming a due time, and starting its run


def _claim(
    routine: Routine,
    *,
    due_at: dt.datetime,
    trigger: str,
    missed: int = 0,
    missed_more: bool = False,
    state: str = RunState.RUNNING,
    reason: str = "",
    now: dt.datetime,
) -> RoutineRun | None:
    """Insert the (routine, due time) row, or None: another runner has that time.

    Call inside ``atomic()``; the insert has a savepoint of its own, so losing
    the race rolls back only the insert.
    """
    try:
        with transaction.atomic():
            return RoutineRun.objects.create(
                routine=routine,
                due_at=due_at,
                trigger=trigger,
                missed=missed,
                missed_more=missed_more,
                state=state,
                reason=reason,
                started_at=now,
                ended_at=now if state != RunState.RUNNING else None,
            )
    except IntegrityError:
        return None


def _run_title(routine: Routine, due_at: dt.datetime) -> str:
    from chats.gateway.schedule import zone_check

    local = due_at.astimezone(zone_check(routine.time_zone))
    return f"{routine.name} · {local:%a %d %b %H:%M}"[: LIMITS.title_chars]


def _run_start(routine: Routine, run: RoutineRun) -> Conversation:
    """The run's fresh session, with the routine's words sent: its reply starts on the cron lane."""
    peer = routine.deliver == RoutineDelivery.PEER
    channel = routine.channel if peer else CRON_CHANNEL
    job = Inbound(
        channel=channel,
        chat_type=ChatType.CRON,
        job_id=routine.job_id,
        message_id=f"run-{run.pk}",
    )
    chat = session_start(
        owner=routine.owner,
        agent=routine.agent,
        session_key=session_key_for(routine.agent.slug, main_key_for(job)),
        title=_run_title(routine, run.due_at),
        origin_fields={
            "chat_type": ChatType.CRON,
            "channel": channel,
            "account_id": routine.account_id if peer else "",
            "peer": routine.peer if peer else "",
            "job_id": routine.job_id,
            "reply_to": {"chat_id": routine.peer} if peer else {},
            "rule": f"routine {routine.public_id}",
        },
        origin=Origin.ROUTINE,
        taint=Taint.NONE,
        mode=routine.mode,
        folder=routine.folder,
    )
    message_send(conversation=chat, text=routine.text)
    return chat


def _claim_and_start(routine: Routine, *, now: dt.datetime, **claim) -> RoutineRun | None:
    with transaction.atomic():
        run = _claim(routine, now=now, **claim)
        if run is None or run.state != RunState.RUNNING:
            return run
        try:
            with transaction.atomic():
                chat = _run_start(routine, run)
        except (ConchError, OSError, ValueError) as exc:
            log.warning("routine %s could not start its run: %s", routine.public_id, exc)
            run.state, run.ended_at = RunState.FAILED, now
            run.reason = ERR_RUN_FAILED.format(why=exc)[:2000]
            run.save(update_fields=["state", "ended_at", "reason"])
            return run
        run.conversation = chat
        run.save(update_fields=["conversation"])
    log.info("routine %s runs for %s as %s", routine.public_id, run.due_at, chat.public_id)
    return run


def routine_run_now(*, routine: Routine, now: dt.datetime | None = None) -> RoutineRun:
    """Run it at once, paused or not; the schedule is left as it was."""
    now = now or timezone.now()
    run = _claim_and_start(routine, now=now, due_at=now, trigger=RunTrigger.RUN_NOW)
    if run is None:  # the same instant, twice: it is running already
        run = RoutineRun.objects.get(routine=routine, due_at=now)
    return run


# ---------------------------------------------------------------------------
# The sweep


@dataclass
class FireReport:
    looked_at: int = 0
    started: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    taken_elsewhere: int = 0


def routine_fire_due(
    *, routine: Routine, now: dt.datetime, report: FireReport | None = None
) -> RoutineRun | None:
    """Run the routine's latest due time at or before ``now``, once; move its next time on."""
    report = report or FireReport()
    since = routine.next_due_at
    if since is None or since > now:  # paused (no next time), or not yet
        return None
    times, more = due_between(
        routine.schedule, routine.time_zone, since=since, until=now, cap=MISSED_COUNT_CAP
    )
    run = None
    if times:
        latest = times[-1]
        missed = len(times) - 1
        late = now - latest > MISSED_AFTER
        claim: dict[str, Any] = {"due_at": latest, "missed": missed, "missed_more": more}
        if routine.missed == RoutineMissed.SKIP and (missed or late):
            claim |= {"trigger": RunTrigger.CAUGHT_UP, "state": RunState.SKIPPED}
            run = _claim(routine, now=now, reason=ERR_SKIPPED, **claim)
            if run is not None:
                report.skipped.append(run.pk)
        else:
            claim["trigger"] = RunTrigger.CAUGHT_UP if (missed or late) else RunTrigger.SCHEDULE
            run = _claim_and_start(routine, now=now, **claim)
            if run is not None:
                report.started.append(run.pk)
        if run is None:
            report.taken_elsewhere += 1
    # Forward only: a runner that read an older next time never moves it back, and a
    # routine paused meanwhile (no next time: NULL compares false) stays paused.
    following = next_time(routine.schedule, routine.time_zone, now)
    Routine.objects.filter(pk=routine.pk, next_due_at__lt=following).update(next_due_at=following)
    return run


def routines_fire(*, now: dt.datetime | None = None, batch: int = 200) -> FireReport:
    """The runner's sweep: every routine whose time has come runs, once across all runners."""
    now = now or timezone.now()
    report = FireReport()
    due = (
        Routine.objects.filter(next_due_at__lte=now)  # a paused routine has none
        .select_related("agent", "owner")
        .order_by("next_due_at", "pk")[:batch]
    )
    for routine in due:
        report.looked_at += 1
        try:
            routine_fire_due(routine=routine, now=now, report=report)
        except Exception:
            log.exception("routine %s failed to fire", routine.public_id)
    return report


# ---------------------------------------------------------------------------
# A run's reply ended: how, and its words to where the routine sends them


def _last_words(turn: Turn) -> str:
    last = (
        turn.entries.filter(role=EntryRole.ASSISTANT, kind=EntryKind.MESSAGE)
        .order_by("-seq")
        .first()
    )
    return last.text if last else ""


def on_run_end(turn: Turn) -> None:
    """The turn-end hook: the run's first reply ended; record how, and deliver to a chat.

    Only a routine's runs have run chats (``_run_start``): any other reply's end, most of
    them, is told apart by its chat's origin, not by asking for a run it doesn't have."""
    if turn.conversation.origin != Origin.ROUTINE:
        return
    run = (
        RoutineRun.objects.filter(conversation_id=turn.conversation_id, state=RunState.RUNNING)
        .select_related("routine", "conversation")
        .first()
    )
    if run is None:
        return
    words = _last_words(turn)
    ended = RoutineRun.objects.filter(pk=run.pk, state=RunState.RUNNING).update(
        state=turn.state,
        ended_at=turn.ended_at or timezone.now(),
        result=words[:RESULT_CHARS],
        reason=(turn.end_reason or "")[:2000],
    )
    routine = run.routine
    if not ended or routine.deliver != RoutineDelivery.CHAT or not words or not run.conversation:
        return
    _deliver_to_chat(routine=routine, run_chat=run.conversation, words=words)


def _deliver_to_chat(*, routine: Routine, run_chat: Conversation, words: str) -> None:
    target_id = routine.target_chat_id
    if target_id is None:
        return
    with transaction.atomic():
        try:
            target = Conversation.objects.lock(target_id)
        except Conversation.DoesNotExist:
            return
        if target.owner_id != routine.owner_id:
            return  # a result goes to a chat of the routine's owner, never anyone else's
        note = conch_note(
            "the routine {name} ran; its run is chat {chat}. What it said:",
            name=routine.name,
            chat=run_chat.public_id,
        )
        entry_append(
            conversation=target,
            role=EntryRole.CONCH,
            kind=EntryKind.NOTE,
            text=note + "\n" + fence("routine-result", words, limit=RESULT_CHARS),
            data={"routine": routine.public_id, "run": run_chat.public_id},
        )
        if run_chat.taint != Taint.NONE:
            taint_raise(
                conversation=target,
                taint=run_chat.taint,
                cause=Cause.routine(run_chat, routine_id=routine.public_id, name=routine.name),
            )
        events.publish_chat(target, routine=routine.public_id)
