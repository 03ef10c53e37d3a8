"""A chat list people can organise, in a real browser: the list grouped
under Today, Yesterday, Previous 7 days and Older in the browser's own days, Pin and
Unpin live in every tab, a chat that needs you rising to the top and falling back, and
the search box finding a chat by its title, its words quoted as text."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connections
from django.utils import timezone
from playwright.sync_api import expect

from chats.models import Conversation, Mode
from tests.browser.a11y import axe_violations
from tests.browser.conftest import watch
from tests.browser.test_find import said
from tests.browser.test_workspace import open_chat
from tests.factories import ChatFactory, ConversationFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ZONE = "America/New_York"  # not the server's own (UTC): the browser must say it
SIZES = pytest.mark.parametrize(
    "size",
    [{"width": 390, "height": 844}, {"width": 1280, "height": 800}],
    ids=["phone", "desktop"],
)


@pytest.fixture
def new_york(chromium, console) -> Iterator:
    """A browser whose clock is New York's."""
    context = chromium.new_context(color_scheme="light", timezone_id=ZONE)
    context.set_default_timeout(10_000)
    context.on("page", console.watch)
    yield context
    context.close()
    connections.close_all()
    unexpected = console.unexpected()
    assert not unexpected, "the page logged errors:\n" + "\n".join(unexpected)


def show_the_list(page) -> None:
    """On a narrow screen the list may sit in a drawer behind its button: open it."""
    button = page.locator(".drawer-button")
    if button.count() and button.is_visible() and button.get_attribute("aria-expanded") != "true":
        button.click()
        expect(page.locator("#sidebar")).to_be_in_viewport(ratio=1)  # slid all the way in


def headings(page):
    return page.locator("#chat-rows .chat-group:not([hidden]) .chat-group-head")


def group_rows(page, group: str):
    return page.locator(f"#group-{group} li.chat-row .row-title")


def shown_groups(page) -> list[tuple[str, list[str]]]:
    """The list as a tab shows it: each heading shown, with its rows' ids in order."""
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('#chat-rows .chat-group'))
            .filter((g) => !g.hidden)
            .map((g) => [g.id, Array.from(g.querySelectorAll('li.chat-row')).map((r) => r.id)])"""
    )


def at(chat, moment: datetime):
    Conversation.objects.filter(pk=chat.pk).update(last_interaction_at=moment)
    return chat


# ---------------------------------------------------------------------------


@SIZES
def test_the_list_is_grouped_by_the_browsers_own_days(
    new_york, sign_in, conch_server, owner, agent, workspace, size
):
    zone = ZoneInfo(ZONE)
    now = timezone.now()
    midnight = datetime.combine(now.astimezone(zone).date(), time(0), tzinfo=zone)
    made = {
        name: ConversationFactory(owner=owner, agent=agent, title=name)
        for name in ("Just now", "Last night", "Four days ago", "Last month", "Kept at the top")
    }
    at(made["Just now"], now)
    at(made["Last night"], midnight - timedelta(minutes=30))  # 23:30 in New York
    at(made["Four days ago"], midnight - timedelta(days=3, hours=12))
    at(made["Last month"], midnight - timedelta(days=30))
    Conversation.objects.filter(pk=made["Kept at the top"].pk).update(
        pinned=True, last_interaction_at=midnight - timedelta(days=90)
    )
    tab = watch(new_york.new_page())
    page = tab.page
    page.set_viewport_size(size)
    sign_in(tab)
    # The first page came before the browser said its zone: it fetches its list again.
    expect(page.locator("#chat-rows")).to_have_attribute("data-time-zone", ZONE)
    expect(page.locator("body")).to_have_attribute("data-refetches", "1")
    open_chat(tab, conch_server, made["Just now"])
    show_the_list(page)

    expect(page.locator("#chat-rows")).to_have_attribute("data-time-zone", ZONE)
    expect(headings(page)).to_have_text(
        ["Pinned", "Today", "Yesterday", "Previous 7 days", "Older"]
    )
    for heading in headings(page).all():
        expect(heading).to_be_visible()
        box = heading.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= size["width"]
    expect(group_rows(page, "pinned")).to_have_text(["Kept at the top"])
    expect(group_rows(page, "today")).to_have_text(["Just now"])
    expect(group_rows(page, "yesterday")).to_have_text(["Last night"])
    expect(group_rows(page, "week")).to_have_text(["Four days ago"])
    expect(group_rows(page, "older")).to_have_text(["Last month"])
    expect(page.locator("#group-needs-you")).to_be_hidden()
    assert axe_violations(page) == []


def test_pin_and_unpin_move_the_row_live_in_another_tab(
    browser_context, sign_in, conch_server, owner, agent, workspace
):
    now = timezone.now()
    old = at(
        ConversationFactory(owner=owner, agent=agent, title="An old plan"), now - timedelta(days=60)
    )
    other = at(ConversationFactory(owner=owner, agent=agent, title="Today's work"), now)
    first, second = watch(browser_context.new_page()), watch(browser_context.new_page())
    sign_in(first)
    open_chat(first, conch_server, old)
    open_chat(second, conch_server, other)
    expect(headings(second.page)).to_have_text(["Today", "Older"])

    first.page.bring_to_front()
    first.page.get_by_role("button", name="Pin", exact=True).click()

    expect(first.page.get_by_role("button", name="Unpin")).to_be_focused()
    expect(headings(second.page)).to_have_text(["Pinned", "Today"])
    expect(headings(first.page)).to_have_text(["Pinned", "Today"])
    expect(group_rows(second.page, "pinned")).to_have_text(["An old plan"])
    assert shown_groups(first.page) == shown_groups(second.page)

    first.page.get_by_role("button", name="Unpin").click()

    expect(first.page.get_by_role("button", name="Pin", exact=True)).to_be_visible()
    expect(headings(second.page)).to_have_text(["Today", "Older"])
    expect(headings(first.page)).to_have_text(["Today", "Older"])
    expect(group_rows(second.page, "older")).to_have_text(["An old plan"])
    expect(second.page.locator("#group-pinned")).to_be_hidden()
    assert shown_groups(first.page) == shown_groups(second.page)
    # Placed from the pushes alone: no gap, no list fetched again.
    assert second.page.evaluate("document.body.getAttribute('data-refetches')") is None


def test_a_chat_that_needs_you_rises_to_the_top_and_falls_back_once_answered(
    browser_context, sign_in, conch_server, owner, agent, workspace
):
    now = timezone.now()
    asking = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        reply=[
            {"tool": "write_file", "args": {"path": "hello.txt", "content": "hello\n"}},
            {"say": "Done."},
        ],
        mode=Mode.ASK,
        title="Asks first",
    )
    at(asking, now - timedelta(days=60))
    newest = at(ChatFactory(owner=owner, agent=agent, folder=workspace, title="Newest"), now)
    first, second, third = (watch(browser_context.new_page()) for _ in range(3))
    sign_in(first)
    open_chat(first, conch_server, asking)
    open_chat(second, conch_server, newest)
    open_chat(third, conch_server, asking)
    titles = second.page.locator("#chat-rows .row-title")
    expect(titles).to_have_text(["Newest", "Asks first"])

    first.page.bring_to_front()
    first.page.get_by_label("Message").fill("Say hello in a file")
    first.page.get_by_label("Message").press("Enter")

    for each in (first, second, third):
        expect(headings(each.page)).to_have_text(["Needs you", "Today"])
    expect(titles).to_have_text(["Asks first", "Newest"])
    expect(group_rows(second.page, "needs-you")).to_have_text(["Asks first"])
    assert shown_groups(second.page) == shown_groups(third.page) == shown_groups(first.page)

    first.page.get_by_role("button", name="Approve", exact=True).click()

    expect(first.page.locator("#transcript .msg.from-assistant")).to_have_text("Done.")
    expect(second.page.locator("#group-needs-you")).to_be_hidden()
    for each in (first, second, third):
        expect(headings(each.page)).to_have_text(["Today"])
    expect(group_rows(second.page, "today")).to_have_text(["Asks first", "Newest"])
    assert shown_groups(second.page) == shown_groups(third.page) == shown_groups(first.page)
    assert second.page.evaluate("document.body.getAttribute('data-refetches')") is None


@SIZES
def test_the_search_box_finds_a_chat_by_its_title_and_quotes_words_as_text(
    tab, sign_in, conch_server, owner, agent, workspace, size
):
    named = ConversationFactory(owner=owner, agent=agent, title="Quarterly invoices")
    wordy = ConversationFactory(owner=owner, agent=agent, title="Bookkeeping")
    said(
        wordy,
        "## Steps\n\nSend the **invoices** with `mail`, as [the guide](https://example.com) says.",
    )
    page = tab.page
    page.set_viewport_size(size)
    sign_in(tab)
    open_chat(tab, conch_server, wordy)

    page.locator("#chat-heading").click()
    page.keyboard.press("Control+k")
    box = page.locator("#search-q")
    expect(box).to_be_focused()
    box.fill("invoices")
    box.press("Enter")

    expect(page).to_have_url(f"{conch_server.url}/search/?q=invoices")
    title_hit = page.locator(".find-chat")
    expect(title_hit).to_have_count(1)
    expect(title_hit).to_have_text("Quarterly invoices")
    expect(title_hit.locator("mark")).to_have_text("invoices")
    snippet = page.locator(".find-row .find-snippet")
    expect(snippet).to_have_text("Steps Send the invoices with mail, as the guide says.")
    expect(snippet.locator("mark")).to_have_text("invoices")
    assert axe_violations(page) == []

    title_hit.get_by_role("link").click()
    expect(page.locator("#chat-heading")).to_have_text(named.title)


def test_the_list_is_fetched_again_when_the_day_turns(tab, sign_in, conch_server, owner, agent):
    """Today's chats become Yesterday's at midnight with no event to say so: the page
    asks for its list again then, at the moment the server said its day ends."""
    chat = ConversationFactory(owner=owner, agent=agent, title="Before midnight")
    page = tab.page
    page.clock.install()
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    body = page.locator("body")
    expect(body).not_to_have_attribute("data-refetches", re.compile(r".*"))
    turns_at = int(page.locator("#chat-rows").get_attribute("data-regroup-at"))
    wait = turns_at - page.evaluate("Date.now()")

    page.clock.fast_forward(max(0, wait - 5_000))  # runs the timers due by then, at once
    assert body.get_attribute("data-refetches") is None
    page.clock.fast_forward(10_000)

    expect(body).to_have_attribute("data-refetches", "1")
