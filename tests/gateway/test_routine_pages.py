"""A routine's pages and its admin: made with words refused beside their field, its next five
times on the person's clock, pause, resume and Run now, and its runs in the admin."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.urls import reverse
from django.utils import timezone

from chats.gateway.models import Routine, RoutineRun, RunTrigger
from chats.gateway.routines import routine_run_now
from tests.factories import RoutineFactory

UTC = dt.UTC


@pytest.fixture
def signed_in(client, owner):
    client.force_login(owner)
    return client


@pytest.fixture
def clock(monkeypatch):
    """The wall clock the pages read, set by the test."""

    class Clock:
        now = dt.datetime(2025, 3, 28, 11, 0, tzinfo=UTC)

    monkeypatch.setattr(timezone, "now", lambda: Clock.now)
    return Clock


def new_routine(**fields) -> dict:
    data = {
        "name": "Overnight alerts",
        "schedule": "0 8 * * 1-5",
        "time_zone": "Europe/Berlin",
        "agent": "",
        "folder": "",
        "mode": "auto",
        "text": "Summarise the overnight alerts.",
        "missed": "once",
        "deliver": "run",
    }
    data.update(fields)
    return data


def test_a_routine_is_made_from_its_page_and_opens_on_its_own(signed_in, owner, agent, clock):
    response = signed_in.post(reverse("gateway:routine-new"), new_routine(agent=agent.pk))

    routine = Routine.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("gateway:routine", args=[routine.public_id])
    assert (routine.owner, routine.schedule, routine.time_zone) == (
        owner,
        "0 8 * * 1-5",
        "Europe/Berlin",
    )
    # Friday 28 March 2025, 12:00 in Berlin: the next weekday 08:00 is Monday's, after the change.
    assert routine.next_due_at == dt.datetime(2025, 3, 31, 6, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("schedule", "every weekday at 8", "A schedule is five fields"),
        ("schedule", "0 25 * * *", "the hour is out of range (0-23)"),
        ("time_zone", "Berlin", "&#x27;Berlin&#x27; is not a time zone Conch knows"),
        ("folder", "relative/path", "Give the full path of the folder"),
    ],
)
def test_a_bad_field_is_refused_with_words_beside_it(signed_in, agent, field, value, words):
    response = signed_in.post(
        reverse("gateway:routine-new"), new_routine(agent=agent.pk, **{field: value})
    )

    assert response.status_code == 400
    html = response.content.decode()
    error = re.search(rf'<p class="error" role="alert" id="id_{field}-error">([^<]*)</p>', html)
    assert error is not None, html
    assert words in error.group(1)
    assert not Routine.objects.exists()


def test_the_page_shows_the_next_five_times_on_the_persons_clock(
    signed_in, owner, agent, clock, settings
):
    settings.CONCH_TIME_ZONE = "America/New_York"
    routine = RoutineFactory(
        owner=owner, schedule="30 2 * * *", time_zone="Europe/Berlin", now=clock.now
    )

    html = signed_in.get(reverse("gateway:routine", args=[routine.public_id])).content.decode()

    shown = re.findall(r'<li><time datetime="[^"]+">([^<]+)</time></li>', html)
    assert shown == [
        "Fri 28 Mar 2025, 21:30 EDT",
        "Sat 29 Mar 2025, 21:00 EDT",  # 03:00 in Berlin: its 02:30 never came that day
        "Sun 30 Mar 2025, 20:30 EDT",
        "Mon 31 Mar 2025, 20:30 EDT",
        "Tue 1 Apr 2025, 20:30 EDT",
    ]
    assert "On your clock, America/New_York." in html


def test_pause_resume_and_run_now_answer_htmx_with_the_pages_regions(
    signed_in, owner, agent, clock
):
    routine = RoutineFactory(owner=owner, now=clock.now)
    htmx = {"HTTP_HX_REQUEST": "true"}

    paused = signed_in.post(reverse("gateway:routine-pause", args=[routine.public_id]), **htmx)
    html = paused.content.decode()
    assert html.count('hx-swap-oob="true"') == 3
    assert "None while it is paused." in html and ">Resume</button>" in html
    routine.refresh_from_db()
    assert (routine.paused, routine.next_due_at) == (True, None)

    clock.now += dt.timedelta(days=2)
    resumed = signed_in.post(reverse("gateway:routine-resume", args=[routine.public_id]), **htmx)
    assert ">Pause</button>" in resumed.content.decode()
    routine.refresh_from_db()
    assert routine.next_due_at == dt.datetime(2025, 3, 31, 8, 0, tzinfo=UTC)

    ran = signed_in.post(reverse("gateway:routine-run-now", args=[routine.public_id]), **htmx)
    run = RoutineRun.objects.get()
    assert run.trigger == RunTrigger.RUN_NOW
    html = ran.content.decode()
    assert run.conversation.title in html
    assert 'hx-trigger="every 2s"' in html  # the history asks again until the run ends


def test_without_javascript_each_action_is_a_post_that_comes_back_to_the_page(
    signed_in, owner, agent, clock
):
    routine = RoutineFactory(owner=owner, now=clock.now)
    response = signed_in.post(reverse("gateway:routine-pause", args=[routine.public_id]))
    assert response.status_code == 302
    assert response["Location"] == reverse("gateway:routine", args=[routine.public_id])


def test_someone_elses_routine_is_not_found(client, second_owner, owner, agent, clock):
    routine = RoutineFactory(owner=owner, now=clock.now)
    client.force_login(second_owner)
    for name in ("gateway:routine", "gateway:routine-regions"):
        assert client.get(reverse(name, args=[routine.public_id])).status_code == 404
    response = client.post(reverse("gateway:routine-run-now", args=[routine.public_id]))
    assert response.status_code == 404
    assert not RoutineRun.objects.exists()


def test_the_admin_shows_routines_and_their_runs(signed_in, owner, agent, clock):
    routine = RoutineFactory(owner=owner, name="Overnight alerts", now=clock.now)
    run = routine_run_now(routine=routine, now=clock.now)

    listing = signed_in.get(reverse("admin:gateway_routine_changelist")).content.decode()
    assert "Overnight alerts" in listing
    page = signed_in.get(reverse("admin:gateway_routine_change", args=[routine.pk]))
    assert run.conversation.title in page.content.decode()
    runs = signed_in.get(reverse("admin:gateway_routinerun_changelist")).content.decode()
    assert "Run now" in runs and "running" in runs


def test_the_admin_refuses_a_bad_schedule_with_words_and_counts_a_good_one_afresh(
    signed_in, owner, agent, clock
):
    routine = RoutineFactory(owner=owner, schedule="0 8 * * *", now=clock.now)
    url = reverse("admin:gateway_routine_change", args=[routine.pk])
    form = {
        "owner": owner.pk,
        "name": routine.name,
        "schedule": "0 8 * * * *",
        "time_zone": "UTC",
        "agent": agent.pk,
        "folder": "",
        "mode": "auto",
        "text": routine.text,
        "deliver": "run",
        "channel": "",
        "account_id": "",
        "peer": "",
        "missed": "once",
        "created_at_0": "2025-03-28",
        "created_at_1": "11:00:00",
        "runs-TOTAL_FORMS": "0",
        "runs-INITIAL_FORMS": "0",
    }
    refused = signed_in.post(url, form)
    assert refused.status_code == 200
    assert "A schedule is five fields" in refused.content.decode()

    saved = signed_in.post(url, form | {"schedule": "15 9 * * *"})
    assert saved.status_code == 302
    routine.refresh_from_db()
    assert (routine.schedule, routine.next_due_at) == (
        "15 9 * * *",
        dt.datetime(2025, 3, 29, 9, 15, tzinfo=UTC),
    )
