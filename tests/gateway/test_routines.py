"""Routines: cron in a time zone, run once per due time, each run a fresh session on the cron lane.

Every clock here is given: the services take ``now``, so nothing sleeps. The
daylight-saving dates are the EU's and the US's 2025 changes (Europe/Berlin
springs forward on 30 March at 02:00 and falls back on 26 October at 03:00;
America/New_York springs forward on 9 March at 02:00), as the system's tzdata
has them.
"""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ValidationError

from chats.engines import register_engine
from chats.engines.base import Decision, EngineInput, Fail
from chats.engines.scripted import NO_MODEL
from chats.gateway.forms import RoutineForm
from chats.gateway.models import (
    ChannelAccount,
    OutboxMessage,
    Routine,
    RoutineDelivery,
    RoutineMissed,
    RoutineRun,
    RunState,
    RunTrigger,
    SessionOrigin,
)
from chats.gateway.outbox import sender_channels
from chats.gateway.routines import (
    MISSED_AFTER,
    routine_next_times,
    routine_pause,
    routine_resume,
    routine_run_now,
    routines_fire,
)
from chats.gateway.schedule import ScheduleError, schedule_check
from chats.models import Conversation, EntryKind, EntryRole, Lane, Origin, Taint, TurnState
from chats.runtime.runner import drain
from chats.templatetags.conch import origin_label
from tests.factories import ChatFactory, RoutineFactory

UTC = dt.UTC
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")

# What a scripted persona with no script left answers (It says how to connect a model).
NO_SCRIPT_LEFT = NO_MODEL.format(persona="Conch")


def at(zone, *parts) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=zone)


def sweep_every(start: dt.datetime, end: dt.datetime, step: dt.timedelta) -> None:
    """The runner's sweep, as a runner up all that time would call it."""
    now = start
    while now <= end:
        routines_fire(now=now)
        now += step


class FailingEngine:
    name = "routine-fails"

    def next_action(self, given: EngineInput) -> Decision:
        return Decision(Fail("the model is down"), given.state)


register_engine(FailingEngine())


# ---------------------------------------------------------------------------
# Daylight saving


def test_a_0230_daily_routine_runs_once_at_0300_on_berlins_spring_forward_day(owner, agent):
    routine = RoutineFactory(
        owner=owner,
        schedule="30 2 * * *",
        time_zone="Europe/Berlin",
        now=at(BERLIN, 2025, 3, 29, 12),
    )
    # 02:30 never comes on 30 March: the clocks go from 02:00 to 03:00. It runs once, at 03:00.
    assert routine.next_due_at == at(BERLIN, 2025, 3, 30, 3, 0)
    assert routine.next_due_at == at(UTC, 2025, 3, 30, 1, 0)

    sweep_every(at(UTC, 2025, 3, 29, 11), at(UTC, 2025, 3, 31, 12), dt.timedelta(minutes=15))

    runs = list(RoutineRun.objects.order_by("due_at").values_list("due_at", "trigger"))
    assert runs == [
        (at(UTC, 2025, 3, 30, 1, 0), RunTrigger.SCHEDULE),  # 03:00 CEST, the day of the change
        (at(UTC, 2025, 3, 31, 0, 30), RunTrigger.SCHEDULE),  # 02:30 CEST, the day after
    ]


def test_a_0230_daily_routine_runs_once_on_new_yorks_spring_forward_day(owner, agent):
    routine = RoutineFactory(
        owner=owner,
        schedule="30 2 * * *",
        time_zone="America/New_York",
        now=at(NEW_YORK, 2025, 3, 8, 12),
    )
    sweep_every(at(UTC, 2025, 3, 8, 17), at(UTC, 2025, 3, 10, 12), dt.timedelta(minutes=10))

    local = [
        r.due_at.astimezone(NEW_YORK).strftime("%m-%d %H:%M %Z")
        for r in routine.runs.order_by("due_at")
    ]
    assert local == ["03-09 03:00 EDT", "03-10 02:30 EDT"]


def test_a_0230_daily_routine_runs_once_on_the_fall_back_day_though_0230_comes_twice(owner, agent):
    routine = RoutineFactory(
        owner=owner,
        schedule="30 2 * * *",
        time_zone="Europe/Berlin",
        now=at(BERLIN, 2025, 10, 25, 12),
    )
    sweep_every(at(UTC, 2025, 10, 25, 11), at(UTC, 2025, 10, 26, 12), dt.timedelta(minutes=15))

    assert [r.due_at for r in routine.runs.all()] == [at(UTC, 2025, 10, 26, 0, 30)]  # 02:30 CEST


# ---------------------------------------------------------------------------
# Downtime


def hourly(owner, **fields) -> Routine:
    return RoutineFactory(
        owner=owner, schedule="0 * * * *", now=at(UTC, 2025, 5, 1, 10, 30), **fields
    )


def test_downtime_across_three_due_times_runs_once_as_the_latest(owner, agent):
    routine = hourly(owner)
    # Conch was down from 10:30 to 13:30: 11:00, 12:00 and 13:00 passed unswept.
    for _ in range(3):
        routines_fire(now=at(UTC, 2025, 5, 1, 13, 30))

    run = routine.runs.get()
    assert (run.due_at, run.trigger, run.missed) == (
        at(UTC, 2025, 5, 1, 13),
        RunTrigger.CAUGHT_UP,
        2,
    )
    assert run.conversation is not None
    assert Conversation.objects.filter(origin=Origin.ROUTINE).count() == 1
    routine.refresh_from_db()
    assert routine.next_due_at == at(UTC, 2025, 5, 1, 14)

    routines_fire(now=at(UTC, 2025, 5, 1, 14, 0, 5))  # and then on schedule again
    assert list(routine.runs.values_list("due_at", "trigger")) == [
        (at(UTC, 2025, 5, 1, 14), RunTrigger.SCHEDULE),
        (at(UTC, 2025, 5, 1, 13), RunTrigger.CAUGHT_UP),
    ]


def test_downtime_across_three_due_times_runs_none_when_the_routine_skips(owner, agent):
    routine = hourly(owner, missed=RoutineMissed.SKIP)
    for _ in range(3):
        routines_fire(now=at(UTC, 2025, 5, 1, 13, 30))

    skipped = routine.runs.get()
    assert (skipped.state, skipped.missed, skipped.conversation) == (RunState.SKIPPED, 2, None)
    assert "Conch was down" in skipped.reason
    assert not Conversation.objects.filter(origin=Origin.ROUTINE).exists()
    routine.refresh_from_db()
    assert routine.next_due_at == at(UTC, 2025, 5, 1, 14)


def test_a_due_time_seen_within_moments_runs_even_for_a_routine_that_skips(owner, agent):
    routine = hourly(owner, missed=RoutineMissed.SKIP)
    routines_fire(now=at(UTC, 2025, 5, 1, 11) + MISSED_AFTER - dt.timedelta(seconds=1))

    run = routine.runs.get()
    assert (run.trigger, run.state) == (RunTrigger.SCHEDULE, RunState.RUNNING)


def test_a_year_of_downtime_on_an_every_minute_routine_counts_only_so_far(owner, agent):
    routine = RoutineFactory(owner=owner, schedule="* * * * *", now=at(UTC, 2024, 5, 1))
    routines_fire(now=at(UTC, 2025, 5, 1))

    run = routine.runs.get()
    assert run.due_at == at(UTC, 2025, 5, 1)
    assert run.missed_more is True


# ---------------------------------------------------------------------------
# A run: a fresh session on the cron lane, from a routine


def test_each_run_is_a_fresh_session_on_the_cron_lane_shown_as_from_a_routine(
    owner, agent, tmp_path
):
    folder = tmp_path / "alerts"
    folder.mkdir()
    routine = RoutineFactory(
        owner=owner, name="Alerts", folder=str(folder), now=at(UTC, 2025, 5, 1)
    )
    first = routine_run_now(routine=routine, now=at(UTC, 2025, 5, 1, 9))
    second = routine_run_now(routine=routine, now=at(UTC, 2025, 5, 1, 10))

    assert first.conversation_id != second.conversation_id
    for run in (first, second):
        chat = run.conversation
        turn = chat.turns.get()
        assert turn.lane == Lane.CRON
        assert origin_label(chat) == "a routine"
        assert chat.folder == str(folder)
        assert chat.session_key == f"agent:main:cron:{routine.public_id}:run-{run.pk}"
        assert [e.text for e in chat.entries.all()] == ["Summarise the overnight alerts."]
        origin = SessionOrigin.objects.get(pk=chat.pk)
        assert (origin.chat_type, origin.job_id) == ("cron", routine.public_id)
    assert first.conversation.title == "Alerts · Thu 01 May 09:00"


def test_run_now_runs_at_once_even_when_paused_and_leaves_the_schedule_alone(owner, agent):
    routine = RoutineFactory(owner=owner, now=at(UTC, 2025, 5, 1, 9))
    assert routine.next_due_at == at(UTC, 2025, 5, 2, 8)
    routine_pause(routine=routine)

    run = routine_run_now(routine=routine, now=at(UTC, 2025, 5, 1, 12, 0, 0, 250))

    assert (run.trigger, run.state, run.due_at) == (
        RunTrigger.RUN_NOW,
        RunState.RUNNING,
        at(UTC, 2025, 5, 1, 12, 0, 0, 250),
    )
    assert run.conversation.turns.get().state == TurnState.RUNNING
    routine.refresh_from_db()
    assert (routine.paused, routine.next_due_at) == (True, None)


def test_a_run_that_cannot_start_is_recorded_as_failed_with_why(owner, agent):
    routine = RoutineFactory(owner=owner, now=at(UTC, 2025, 5, 1))
    Routine.objects.filter(pk=routine.pk).update(text="   ")  # written past the form

    run = routine_run_now(routine=Routine.objects.get(pk=routine.pk), now=at(UTC, 2025, 5, 1, 9))

    assert run.state == RunState.FAILED
    assert run.reason == "The run could not start: A message needs some words."
    assert not Conversation.objects.filter(origin=Origin.ROUTINE).exists()


# ---------------------------------------------------------------------------
# Pausing


def test_a_paused_routine_does_not_run_and_resuming_does_not_run_what_passed(owner, agent):
    routine = hourly(owner)
    routine_pause(routine=routine)
    sweep_every(at(UTC, 2025, 5, 1, 10, 30), at(UTC, 2025, 5, 1, 15), dt.timedelta(minutes=5))
    assert not routine.runs.exists()

    routine_resume(routine=routine, now=at(UTC, 2025, 5, 1, 15, 10))
    assert routine.next_due_at == at(UTC, 2025, 5, 1, 16)
    routines_fire(now=at(UTC, 2025, 5, 1, 15, 20))
    assert not routine.runs.exists()  # 11:00 to 15:00 were paused, not missed
    routines_fire(now=at(UTC, 2025, 5, 1, 16, 0, 10))
    assert list(routine.runs.values_list("due_at", flat=True)) == [at(UTC, 2025, 5, 1, 16)]


# ---------------------------------------------------------------------------
# How each run ended, and where its words go


@pytest.mark.django_db(transaction=True)
def test_the_history_says_how_each_run_ended(owner, agent):
    routine = RoutineFactory(owner=owner, now=at(UTC, 2025, 5, 1))
    done = routine_run_now(routine=routine, now=at(UTC, 2025, 5, 1, 9))
    drain()
    agent.engine = "routine-fails"
    agent.save()
    failed = routine_run_now(
        routine=Routine.objects.get(pk=routine.pk), now=at(UTC, 2025, 5, 1, 10)
    )
    drain()

    done.refresh_from_db()
    failed.refresh_from_db()
    # The scripted persona with no script says so: a reply all the same.
    assert (done.state, done.result) == (
        RunState.COMPLETED,
        NO_SCRIPT_LEFT,
    )
    assert (failed.state, failed.reason) == (RunState.FAILED, "the model is down")
    assert done.ended_at is not None and failed.ended_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_runs_words_go_to_the_chat_of_yours_it_names_fenced(owner, agent):
    target = ChatFactory(owner=owner, title="Morning desk")
    routine = RoutineFactory(
        owner=owner,
        name="Alerts",
        deliver=RoutineDelivery.CHAT,
        target_chat=target,
        now=at(UTC, 2025, 5, 1),
    )
    run = routine_run_now(routine=routine, now=at(UTC, 2025, 5, 1, 9))
    drain()

    note = target.entries.get()
    assert (note.role, note.kind) == (EntryRole.CONCH, EntryKind.NOTE)
    assert note.text == (
        f"[Conch: the routine Alerts ran; its run is chat {run.conversation.public_id}. "
        f"What it said:]\n<routine-result>\n{NO_SCRIPT_LEFT}\n</routine-result>"
    )
    assert note.data == {"routine": routine.public_id, "run": run.conversation.public_id}


@pytest.mark.django_db(transaction=True)
def test_a_tainted_runs_words_raise_the_taint_of_the_chat_they_go_to(owner, agent):
    target = ChatFactory(owner=owner, title="Morning desk")
    routine = RoutineFactory(
        owner=owner, deliver=RoutineDelivery.CHAT, target_chat=target, now=at(UTC, 2025, 5, 1)
    )
    run = routine_run_now(routine=routine, now=at(UTC, 2025, 5, 1, 9))
    Conversation.objects.filter(pk=run.conversation_id).update(taint=Taint.UNTRUSTED)
    drain()

    target.refresh_from_db()
    assert target.taint == Taint.UNTRUSTED


@pytest.mark.django_db(transaction=True)
def test_a_runs_words_go_to_a_chat_app_peer_through_the_outbox(owner, agent):
    routine = RoutineFactory(
        owner=owner,
        deliver=RoutineDelivery.PEER,
        channel="Telegram",
        account_id="mybot",
        peer="42",
        now=at(UTC, 2025, 5, 1),
    )
    run = routine_run_now(routine=routine, now=at(UTC, 2025, 5, 1, 9))
    drain()

    queued = OutboxMessage.objects.get()
    assert (queued.channel, queued.account_id, queued.target, queued.conversation_id) == (
        "telegram",
        "mybot",
        {"chat_id": "42"},
        run.conversation_id,
    )
    assert queued.text == NO_SCRIPT_LEFT
    assert origin_label(run.conversation) == "a routine"


# ---------------------------------------------------------------------------
# Refused with words


@pytest.mark.parametrize(
    ("schedule", "zone", "field", "words"),
    [
        ("", "UTC", "schedule", "A routine needs a schedule: five fields"),
        ("0 8 * *", "UTC", "schedule", "A schedule is five fields"),
        ("0 0 8 * * *", "UTC", "schedule", "this one has 6."),
        ("61 8 * * *", "UTC", "schedule", "the minute is out of range (0-59)"),
        ("0 24 * * *", "UTC", "schedule", "the hour is out of range (0-23)"),
        ("0 8 31 2 *", "UTC", "schedule", "that day never comes"),
        ("0 8 * * MON-FUNDAY", "UTC", "schedule", "the day of the week is out of range"),
        ("@daily", "UTC", "schedule", "this one has 1."),
        ("0 8 * * *", "Mars/Olympus", "time_zone", "'Mars/Olympus' is not a time zone"),
        ("0 8 * * *", "../../etc/passwd", "time_zone", "is not a time zone Conch knows"),
        ("0 8 * * *", "", "time_zone", "A routine needs a time zone"),
    ],
)
def test_bad_expressions_and_time_zones_are_refused_with_words(
    owner, agent, schedule, zone, field, words
):
    with pytest.raises(ScheduleError) as raised:
        schedule_check(schedule, zone)
    assert (raised.value.field, words in raised.value.message) == (field, True)

    routine = Routine(
        owner=owner, agent=agent, name="x", text="go", schedule=schedule, time_zone=zone
    )
    with pytest.raises(ValidationError) as refused:
        routine.full_clean()
    assert words in refused.value.message_dict[field][0]


def test_a_bad_schedule_is_refused_even_when_saved_outside_a_form(owner, agent):
    with pytest.raises(ValidationError) as refused:
        Routine.objects.create(owner=owner, agent=agent, name="x", text="go", schedule="8am daily")
    assert "A schedule is five fields" in refused.value.message_dict["schedule"][0]
    assert not Routine.objects.exists()


def test_results_go_only_to_a_chat_of_the_routines_owner(owner, second_owner, agent):
    theirs = ChatFactory(owner=second_owner, title="Not yours")
    routine = Routine(
        owner=owner,
        agent=agent,
        name="x",
        text="go",
        schedule="0 8 * * *",
        deliver=RoutineDelivery.CHAT,
        target_chat=theirs,
    )
    with pytest.raises(ValidationError) as refused:
        routine.full_clean()
    assert refused.value.message_dict["target_chat"] == [
        "The result can only go to a chat of yours."
    ]


def test_a_peer_on_an_app_conch_cannot_send_to_is_refused(owner, agent):
    form = RoutineForm(
        {
            "name": "x",
            "schedule": "0 8 * * *",
            "time_zone": "UTC",
            "agent": agent.pk,
            "mode": "auto",
            "text": "go",
            "missed": "once",
            "deliver": "peer",
            "channel": "pigeonpost",
            "peer": "coop-3",
        },
        owner=owner,
    )
    assert not form.is_valid()
    known = ", ".join(sender_channels())
    assert form.errors["channel"] == [f"Conch can't send to pigeonpost yet; it sends to: {known}."]
    assert "telegram" in known
    telegram = RoutineForm(form.data | {"channel": "Telegram"}, owner=owner)
    assert not telegram.is_valid()  # Conch sends to Telegram, but through no bot of the owner's
    assert "No telegram bot account (any) is this account's" in telegram.errors["account_id"][0]
    ChannelAccount.objects.create(owner=owner, channel="telegram", account_id="mybot")
    assert RoutineForm(form.data | {"channel": "Telegram"}, owner=owner).is_valid()


# ---------------------------------------------------------------------------
# The next five times, on the person's clock


def test_the_next_five_times_are_on_the_persons_clock_across_a_change(owner, agent):
    routine = RoutineFactory(
        owner=owner,
        schedule="30 2 * * *",
        time_zone="Europe/Berlin",
        now=at(BERLIN, 2025, 3, 28, 12),
    )
    times = routine_next_times(routine=routine, now=at(BERLIN, 2025, 3, 28, 12), zone=NEW_YORK)

    assert [t.strftime("%a %d %b %H:%M %Z") for t in times] == [
        "Fri 28 Mar 21:30 EDT",  # 02:30 CET on the 29th
        "Sat 29 Mar 21:00 EDT",  # 03:00 CEST on the 30th: 02:30 never came in Berlin
        "Sun 30 Mar 20:30 EDT",
        "Mon 31 Mar 20:30 EDT",
        "Tue 01 Apr 20:30 EDT",
    ]
