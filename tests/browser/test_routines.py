"""A routine made in a real browser, run with Run now, its run arriving in its history.

Real Daphne with its embedded runner (``conch_server``), real Chromium. The
default persona is the scripted engine; with no script, its reply says so,
which is a reply all the same: the run ends completed with those words. Every
wait is on a condition in the page: the history region asks again every two
seconds while a run is running (HTMX), and the wait is for its words.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from chats.engines.scripted import NO_MODEL
from chats.gateway.models import Routine, RoutineRun, RunState, RunTrigger
from chats.models import Lane

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_routine_made_in_the_browser_runs_now_and_its_run_arrives(
    tab, sign_in, conch_server, owner, agent, settings, console
):
    console.allow(r"status of 400 \(Bad Request\) \(http://[^ ]+/gateway/routines/new/:")  # refused
    page = tab.page
    sign_in(tab)
    page.goto(f"{conch_server.url}/gateway/routines/")
    expect(page.get_by_role("heading", name="Routines", exact=True)).to_be_visible()

    form = page.locator("#rt-new")
    form.get_by_label("Name").fill("Overnight alerts")
    form.get_by_label("Schedule").fill("0 8 * * 1-5")
    form.get_by_label("Time zone").fill("Mars/Olympus")
    form.get_by_label("Words to run").fill("Summarise the overnight alerts.")
    form.get_by_role("button", name="Make the routine").click()
    # Refused with words, beside the field; what was typed stays.
    expect(page.locator("#id_time_zone-error")).to_have_text(
        "'Mars/Olympus' is not a time zone Conch knows; give one such as Europe/Berlin or UTC."
    )
    expect(form.get_by_label("Name")).to_have_value("Overnight alerts")

    form.get_by_label("Time zone").fill("Europe/Berlin")
    form.get_by_role("button", name="Make the routine").click()
    expect(page.get_by_role("heading", name="Overnight alerts")).to_be_visible()
    routine = Routine.objects.get()
    assert page.url == f"{conch_server.url}/gateway/routines/{routine.public_id}/"

    # The next five times, on the person's clock: weekdays at 08:00 Berlin time.
    times = page.locator("#rt-times li")
    expect(times).to_have_count(5)
    zone = settings.CONCH_TIME_ZONE
    expect(page.locator("#rt-times .hint")).to_have_text(f"On your clock, {zone}.")
    for text in times.all_inner_texts():
        assert re.fullmatch(r"(Mon|Tue|Wed|Thu|Fri) \d{1,2} \w{3} \d{4}, \d{2}:00 \w+", text), text

    page.evaluate("window.stillTheSamePage = true")
    page.get_by_role("button", name="Run now").click()
    run_row = page.locator("#rt-runs .rt-run")
    expect(run_row).to_have_count(1)
    # The runner plays the reply; the history asks again until the run has ended.
    expect(run_row).to_have_attribute("data-state", "completed", timeout=30_000)
    expect(run_row.locator(".rt-result")).to_have_text(NO_MODEL.format(persona="Conch"))
    expect(run_row.locator(".tier")).to_have_text("completed")
    assert page.evaluate("window.stillTheSamePage") is True  # swapped, not reloaded

    run = RoutineRun.objects.get()
    assert (run.trigger, run.state) == (RunTrigger.RUN_NOW, RunState.COMPLETED)
    assert run.conversation.turns.get().lane == Lane.CRON

    # Its chat is in the list, from a routine, and opens from the history.
    run_row.get_by_role("link", name=run.conversation.title).click()
    row = page.locator(f"#row-{run.conversation.public_id}")
    expect(row.locator(".origin")).to_have_text("from a routine")
    expect(page.locator("#transcript")).to_contain_text(NO_MODEL.format(persona="Conch"))
