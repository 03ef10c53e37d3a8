"""A session's life: timestamps, resets (daily, idle, /new and /reset, none) that lose nothing."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from chats.gateway.lifecycle import daily_boundary, manual_reset
from chats.gateway.models import ResetMode, ResetPolicy, SessionOrigin
from chats.gateway.services import sessions_reset_sweep
from chats.models import Conversation, EntryKind, EntryRole, QueuedInput
from chats.runtime.runner import drain

BERLIN = ZoneInfo("Europe/Berlin")


def chat_of(result) -> Conversation:
    return Conversation.objects.get(public_id=result.chat)


def replied(result) -> Conversation:
    """Let the message's reply run to its end; the chat, fresh."""
    drain()
    return chat_of(result)


def test_a_session_records_when_it_started_was_last_used_and_was_written(receive):
    before = timezone.now()
    first = replied(receive(text="one"))
    assert first.session_started_at >= before
    assert first.last_interaction_at >= first.session_started_at
    assert first.updated_at >= first.session_started_at
    later = timezone.now() + dt.timedelta(minutes=3)
    again = chat_of(receive(text="two", now=later))
    assert again.pk == first.pk
    assert again.session_started_at == first.session_started_at
    assert again.last_interaction_at == later
    assert again.updated_at > first.updated_at


def assert_reset_lost_nothing(old: Conversation, new: Conversation, why: str, old_texts):
    old.refresh_from_db()
    assert old.archived and not new.archived
    assert old.session_key == new.session_key
    assert list(old.entries.order_by("seq").values_list("text", flat=True)) == old_texts
    assert SessionOrigin.objects.get(pk=new.pk).previous_id == old.pk
    note = new.entries.order_by("seq").first()
    assert (note.role, note.kind) == (EntryRole.CONCH, EntryKind.NOTE)
    assert why in note.text and old.public_id in note.text and "started fresh" in note.text
    # still found by what was said in it
    said = old_texts[0]
    assert old.pk in Conversation.objects.filter(entries__text=said).values_list("pk", flat=True)


def test_after_the_idle_minutes_the_next_message_starts_fresh_and_nothing_is_lost(receive):
    ResetPolicy.objects.create(mode=ResetMode.IDLE, idle_minutes=30)
    old = replied(receive(text="remember 4471"))
    old_texts = list(old.entries.order_by("seq").values_list("text", flat=True))
    later = old.last_interaction_at + dt.timedelta(minutes=31)
    result = receive(text="hello again", now=later)
    new = chat_of(result)
    assert new.pk != old.pk
    assert result.outcome == "started"
    assert_reset_lost_nothing(old, new, "no messages for 30 minutes", old_texts)
    assert new.entries.order_by("seq").last().text == "hello again"


def test_within_the_idle_minutes_the_session_carries_on(receive):
    ResetPolicy.objects.create(mode=ResetMode.IDLE, idle_minutes=30)
    old = replied(receive(text="one"))
    later = old.last_interaction_at + dt.timedelta(minutes=29)
    assert chat_of(receive(text="two", now=later)).pk == old.pk


def test_the_daily_reset_is_at_four_local_time_by_default(receive, settings):
    settings.CONCH_TIME_ZONE = "Europe/Berlin"
    old = replied(receive(text="yesterday's talk"))
    old_texts = list(old.entries.order_by("seq").values_list("text", flat=True))
    day = dt.date(2025, 3, 10)
    Conversation.objects.filter(pk=old.pk).update(
        last_interaction_at=dt.datetime.combine(day, dt.time(3, 59), tzinfo=BERLIN)
    )
    result = receive(text="morning", now=dt.datetime.combine(day, dt.time(4, 1), tzinfo=BERLIN))
    new = chat_of(result)
    assert new.pk != old.pk
    assert_reset_lost_nothing(old, new, "the daily reset at 04:00", old_texts)


def test_before_four_local_time_last_nights_session_carries_on(receive, settings):
    settings.CONCH_TIME_ZONE = "Europe/Berlin"
    old = replied(receive(text="late night"))
    day = dt.date(2025, 3, 10)
    Conversation.objects.filter(pk=old.pk).update(
        last_interaction_at=dt.datetime.combine(day, dt.time(0, 30), tzinfo=BERLIN)
    )
    now = dt.datetime.combine(day, dt.time(3, 59), tzinfo=BERLIN)
    assert chat_of(receive(text="still up", now=now)).pk == old.pk


def test_the_daily_reset_hour_is_a_policy_setting(receive, settings):
    settings.CONCH_TIME_ZONE = "UTC"
    ResetPolicy.objects.create(mode=ResetMode.DAILY, at_hour=7)
    old = replied(receive(text="x"))
    day = dt.date(2025, 6, 1)
    Conversation.objects.filter(pk=old.pk).update(
        last_interaction_at=dt.datetime.combine(day, dt.time(5), tzinfo=dt.UTC)
    )
    at_six = dt.datetime.combine(day, dt.time(6), tzinfo=dt.UTC)
    assert replied(receive(text="y", now=at_six)).pk == old.pk
    Conversation.objects.filter(pk=old.pk).update(last_interaction_at=at_six)
    at_eight = dt.datetime.combine(day, dt.time(8), tzinfo=dt.UTC)
    assert chat_of(receive(text="z", now=at_eight)).pk != old.pk


@pytest.mark.parametrize(
    ("zone", "local", "expected_local"),
    [
        ("Europe/Berlin", dt.datetime(2025, 3, 10, 4, 1), dt.datetime(2025, 3, 10, 4, 0)),
        ("Europe/Berlin", dt.datetime(2025, 3, 10, 3, 59), dt.datetime(2025, 3, 9, 4, 0)),
        ("America/New_York", dt.datetime(2025, 11, 2, 12, 0), dt.datetime(2025, 11, 2, 4, 0)),
    ],
)
def test_the_daily_boundary_is_the_last_local_four_oclock(zone, local, expected_local):
    tz = ZoneInfo(zone)
    got = daily_boundary(local.replace(tzinfo=tz), 4, tz)
    assert got == expected_local.replace(tzinfo=tz)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/new", ("/new", "")),
        ("/reset", ("/reset", "")),
        ("/NEW  tell me a joke", ("/new", "tell me a joke")),
        ("/new@conchbot", None),  # a bot's name is Telegram's to judge: see test_telegram_users
        ("/newish", None),
        ("please /new", None),
    ],
)
def test_new_and_reset_are_read_from_the_start_of_a_message(text, expected):
    assert manual_reset(text) == expected


@pytest.mark.parametrize("command", ["/new", "/reset"])
def test_new_or_reset_starts_the_session_fresh_and_says_why(receive, command):
    old = replied(receive(text="first words"))
    old_texts = list(old.entries.order_by("seq").values_list("text", flat=True))
    result = receive(text=command)
    assert result.outcome == "reset"
    new = chat_of(result)
    assert new.pk != old.pk
    assert_reset_lost_nothing(old, new, f"you sent {command}", old_texts)
    assert not new.turns.exists()  # a bare command starts no reply


def test_words_after_new_go_to_the_fresh_session(receive):
    old = replied(receive(text="first"))
    result = receive(text="/new what's the weather")
    new = chat_of(result)
    assert (result.outcome, new.pk != old.pk) == ("started", True)
    assert new.entries.order_by("seq").last().text == "what's the weather"


def test_mode_none_never_resets(receive):
    ResetPolicy.objects.create(mode=ResetMode.NONE)
    old = replied(receive(text="x"))
    much_later = old.last_interaction_at + dt.timedelta(days=10)
    assert chat_of(receive(text="y", now=much_later)).pk == old.pk


def test_a_channels_policy_beats_a_chat_types_policy(receive):
    ResetPolicy.objects.create(chat_type="dm", mode=ResetMode.IDLE, idle_minutes=5)
    ResetPolicy.objects.create(channel="telegram", mode=ResetMode.NONE)
    telegram = replied(receive(channel="telegram", text="a"))
    slack = replied(receive(channel="slack", text="a"))
    later = max(telegram.last_interaction_at, slack.last_interaction_at) + dt.timedelta(minutes=10)
    assert chat_of(receive(channel="telegram", text="b", now=later)).pk == telegram.pk
    assert chat_of(receive(channel="slack", text="b", now=later)).pk != slack.pk


def test_a_groups_policy_applies_to_groups_only(receive):
    ResetPolicy.objects.create(chat_type="group", mode=ResetMode.IDLE, idle_minutes=5)
    ResetPolicy.objects.create(mode=ResetMode.NONE)
    group = replied(receive(chat_type="group", group_id="fam", text="a"))
    dm = replied(receive(text="a"))
    later = max(group.last_interaction_at, dm.last_interaction_at) + dt.timedelta(minutes=10)
    assert chat_of(receive(chat_type="group", group_id="fam", text="b", now=later)).pk != group.pk
    assert chat_of(receive(text="b", now=later)).pk == dm.pk


def test_a_working_chat_is_never_reset_mid_reply_the_reset_waits_for_the_reply(
    receive, django_capture_on_commit_callbacks
):
    ResetPolicy.objects.create(mode=ResetMode.IDLE, idle_minutes=1)
    running = receive(text="long job")
    old = chat_of(running)
    assert old.turns.get().ended_at is None  # its reply is still running
    later = timezone.now() + dt.timedelta(minutes=5)
    waiting = receive(text="are you there?", now=later)
    assert waiting.outcome == "reset_pending"
    assert waiting.chat == old.public_id
    old.refresh_from_db()
    assert not old.archived
    assert QueuedInput.objects.get(conversation=old).text == "are you there?"

    with django_capture_on_commit_callbacks(execute=True):
        drain()  # the reply ends; the reset that waited for it happens
    old.refresh_from_db()
    assert old.archived
    assert old.entries.filter(role=EntryRole.PERSON).get().text == "long job"
    new = Conversation.objects.get(session_key=old.session_key, archived=False)
    assert SessionOrigin.objects.get(pk=new.pk).previous_id == old.pk
    assert "no messages for 1 minutes" in new.entries.order_by("seq").first().text
    # the message that came meanwhile went to the new generation, and its reply started
    assert new.entries.filter(role=EntryRole.PERSON).get().text == "are you there?"
    assert new.turns.count() == 1


def test_reset_during_a_reply_waits_and_the_next_message_opens_the_fresh_session(
    receive, django_capture_on_commit_callbacks
):
    old = chat_of(receive(text="long job"))
    assert receive(text="/reset").outcome == "reset_pending"
    with django_capture_on_commit_callbacks(execute=True):
        drain()
    old.refresh_from_db()
    assert old.archived
    assert not Conversation.objects.filter(session_key=old.session_key, archived=False).exists()
    new = chat_of(receive(text="hi"))
    assert SessionOrigin.objects.get(pk=new.pk).previous_id == old.pk
    assert "you sent /reset" in new.entries.order_by("seq").first().text


def test_the_sweep_resets_due_sessions_without_waiting_for_a_message(receive):
    ResetPolicy.objects.create(mode=ResetMode.IDLE, idle_minutes=30)
    quiet = replied(receive(peer="alice", text="a"))
    fresh = replied(receive(peer="carol", text="c"))
    busy = chat_of(receive(peer="bob", text="b"))  # its reply is still running
    Conversation.objects.filter(pk__in=[quiet.pk, busy.pk]).update(
        last_interaction_at=timezone.now() - dt.timedelta(hours=1)
    )
    report = sessions_reset_sweep()
    assert (report.archived, report.pending) == (1, 1)
    quiet.refresh_from_db(), busy.refresh_from_db(), fresh.refresh_from_db()
    assert quiet.archived and not busy.archived and not fresh.archived
    assert SessionOrigin.objects.get(pk=busy.pk).reset_pending == "no messages for 30 minutes"
    assert SessionOrigin.objects.get(pk=quiet.pk).ended_because == "no messages for 30 minutes"
    # alice's next message opens the next generation, saying why
    new = chat_of(receive(peer="alice", text="back"))
    assert SessionOrigin.objects.get(pk=new.pk).previous_id == quiet.pk
    assert "no messages for 30 minutes" in new.entries.order_by("seq").first().text


def test_the_sweep_never_resets_a_cron_run(receive):
    ResetPolicy.objects.create(mode=ResetMode.IDLE, idle_minutes=1)
    run = replied(receive(channel="cron", chat_type="cron", job_id="mail", peer=""))
    Conversation.objects.filter(pk=run.pk).update(
        last_interaction_at=timezone.now() - dt.timedelta(hours=5)
    )
    assert sessions_reset_sweep().archived == 0
    run.refresh_from_db()
    assert not run.archived
