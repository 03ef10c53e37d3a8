"""The trust timeline in a real browser: a chat reads another that read a page, and the
header's badge comes with the push; it opens the timeline with the path back to the page,
by the keyboard too; the ask it then makes names its cause in one line, in the browser's
own time zone; the timeline stays open across pushes; its links go where they say; and axe
finds nothing serious with it open, at a desktop's size and a phone's, light and dark."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest
from django.db import transaction
from playwright.sync_api import expect

from chats.models import EntryRole, Mode, Taint, TaintRise
from chats.runtime.chats import entry_append
from chats.taint import Cause, taint_raise
from tests.browser.test_a11y import violations_everywhere
from tests.browser.test_words import send
from tests.browser.test_workspace import open_chat
from tests.factories import ChatFactory, StepFactory, TurnFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

URL = "https://example.com/release-notes"
ZONE = "Asia/Tokyo"  # the browser's, not the server's: the times on the page are in it
SECRET = "marmalade-octopus-7731"


@pytest.fixture
def browser_context_args() -> dict:
    return {"timezone_id": ZONE}


def a_chat_that_read_a_page(owner, agent, workspace):
    """‘Release notes’: a finished reply with the secret in its words, and a page it read."""
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Release notes")
    turn = TurnFactory(conversation=chat, ended=True)
    with transaction.atomic():
        entry_append(conversation=chat, role=EntryRole.PERSON, text="Read it", turn=turn)
        entry_append(
            conversation=chat, role=EntryRole.ASSISTANT, text=f"It says {SECRET}", turn=turn
        )
    step = StepFactory(turn=turn, tool="fetch_page", family="browsing", result=SECRET)
    taint_raise(
        conversation=chat, taint=Taint.UNTRUSTED, cause=Cause.page(URL, turn=turn, step=step.pk)
    )
    return chat


def clock(rise: TaintRise) -> str:
    return f"{rise.at.astimezone(ZoneInfo(ZONE)):%H:%M}"


def test_the_badge_the_timeline_and_an_ask_that_names_its_cause(
    tab, sign_in, conch_server, owner, agent, workspace
):
    notes = a_chat_that_read_a_page(owner, agent, workspace)
    deploy = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Deploy")
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        title="Publish",
        mode=Mode.AUTO,
        reply=[
            {"tool": "read_chat", "args": {"chat": notes.public_id}},
            {"tool": "stop_chat", "args": {"chat": deploy.public_id, "reason": "it said so"}},
            {"say": "Done."},
        ],
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    badge = page.locator("#trust-summary")
    expect(badge).to_have_count(0)

    send(page, "Publish the notes")

    # The rise comes with the push, and so does the ask it makes.
    expect(badge).to_have_text("Careful: read something from outside")
    rise = TaintRise.objects.get(conversation=chat)
    notes_rise = TaintRise.objects.get(conversation=notes)
    why = page.locator("#chat-controls .request-why")
    expect(why).to_have_text(
        f"This chat asks because it read the words of ‘Release notes’ at {clock(rise)}. "
        "Why it is careful"
    )

    # The keyboard opens the timeline: the rise, where it came in, and the path to the page.
    badge.focus()
    page.keyboard.press("Enter")
    menu = page.locator("#trust-menu")
    expect(menu).to_have_attribute("open", "")
    row = page.locator(f"#rise-{rise.pk}")
    expect(row.locator(".trust-why-line")).to_have_text(
        "It read the words of ‘Release notes’. Go to the step"
    )
    expect(row.locator(".trust-path li")).to_have_text(
        [f"from ‘Release notes’, which had read {URL} (fetch_page) at {clock(notes_rise)}"]
    )
    # The step that read them shows the words it read; the timeline and the ask, none.
    assert SECRET not in menu.inner_html() and SECRET not in why.inner_html()
    assert violations_everywhere(page) == []

    # Escape closes it; the ask's link opens it at the rise, which takes the focus.
    page.keyboard.press("Escape")
    expect(menu).not_to_have_attribute("open", "")
    expect(badge).to_be_focused()
    why.get_by_role("link", name="Why it is careful").click()
    expect(menu).to_have_attribute("open", "")
    expect(row).to_be_focused()

    # Open, it stays open as the pushes swap the header in again: the person denies the ask.
    page.get_by_label("Reason for denying (optional)").fill("Not now.")
    page.get_by_role("button", name="Deny").click()
    expect(page.locator("#transcript .msg.from-assistant")).to_have_text("Done.")
    expect(page.locator("#chat-title .badge.is-idle")).to_have_text("idle")
    expect(menu).to_have_attribute("open", "")

    # Its link to the step closes it and goes there.
    row.get_by_role("link", name="Go to the step").click()
    expect(menu).not_to_have_attribute("open", "")
    expect(page.locator(f"#step-{rise.step_id}")).to_be_focused()

    # And the path's link opens the chat it names, at the rise there.
    menu.locator("summary").click()
    row.get_by_role("link", name="‘Release notes’").first.click()
    expect(page.locator("#chat-heading")).to_have_text("Release notes")
    expect(page.locator("#trust-menu")).to_have_attribute("open", "")
    expect(page.locator(f"#rise-{notes_rise.pk}")).to_be_focused()
