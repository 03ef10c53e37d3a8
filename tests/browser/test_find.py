"""Finding your chats, in a real browser: the archived chats and
Unarchive, the search box over the chats' words (with htmx and without JavaScript),
"1 held" in the list, and the tab's title counting what needs you, kept live.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from chats.models import EntryRole
from chats.runtime.chats import conversation_archive
from chats.runtime.turns import message_send
from tests.browser.test_together import held_pair
from tests.browser.test_workspace import row
from tests.factories import ChatFactory, ConversationFactory, EntryFactory, TurnFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def said(chat, text: str, role: str = EntryRole.ASSISTANT) -> None:
    """A finished reply in ``chat`` with ``text`` in it: what the search index holds."""
    turn = TurnFactory(conversation=chat, ended=True)
    EntryFactory(conversation=chat, turn=turn, role=role, text=text)


def test_an_archived_chat_waits_in_the_archived_view_and_unarchive_brings_it_back(
    tab, sign_in, conch_server, owner, agent
):
    kept = ConversationFactory(owner=owner, agent=agent, title="Fix the login")
    old = ConversationFactory(owner=owner, agent=agent, title="Last year's taxes")
    page = tab.page
    sign_in(tab)
    page.goto(f"{conch_server.url}/c/{old.public_id}/")
    expect(page.locator("body")).to_have_attribute("data-socket", "open")

    page.locator("#chat-settings").get_by_role("button", name="Archive").click()

    expect(row(page, old)).to_have_count(0)  # gone from the list, live
    expect(row(page, kept)).to_be_visible()
    page.get_by_role("link", name="Archived chats").click()
    expect(page.get_by_role("heading", name="Archived chats")).to_be_visible()
    archived = page.locator(f"#archived-{old.public_id}")
    expect(archived).to_contain_text("Last year's taxes")
    expect(page.locator(f"#archived-{kept.public_id}")).to_have_count(0)

    archived.get_by_role("button", name="Unarchive “Last year's taxes”").click()

    expect(page).to_have_url(f"{conch_server.url}/c/{old.public_id}/")
    expect(row(page, old)).to_be_visible()
    old.refresh_from_db()
    assert not old.archived
    page.get_by_role("link", name="Archived chats").click()
    expect(page.get_by_text("No archived chats.")).to_be_visible()


def test_the_search_box_finds_your_chats_words_and_only_yours_escaped(
    tab, sign_in, conch_server, owner, second_owner, agent
):
    mine = ConversationFactory(owner=owner, agent=agent, title="Deploy notes")
    said(mine, "Run <b>frobnicate</b> before the deploy, then check the logs.")
    archived = ConversationFactory(owner=owner, agent=agent, title="Old deploy")
    said(archived, "We frobnicate on Fridays.", role=EntryRole.PERSON)
    conversation_archive(conversation=archived)
    theirs = ConversationFactory(owner=second_owner, agent=agent, title="Not yours")
    said(theirs, "Their own frobnicate secret.")
    page = tab.page
    sign_in(tab)
    page.goto(f"{conch_server.url}/c/{mine.public_id}/")
    page.evaluate("window.stillTheSamePage = true")

    box = page.get_by_role("searchbox", name="Search your chats")
    box.fill("frobnicate")
    box.press("Enter")

    expect(page).to_have_url(f"{conch_server.url}/search/?q=frobnicate")
    assert page.evaluate("window.stillTheSamePage === true")  # htmx swapped the main column
    results = page.locator(".find-row")
    expect(results).to_have_count(2)
    expect(results.filter(has_text="Deploy notes")).to_contain_text(
        "Run <b>frobnicate</b> before the deploy"
    )
    expect(results.filter(has_text="Old deploy")).to_contain_text("you")
    expect(page.locator(".find-row b")).to_have_count(0)  # the words are text, never markup
    expect(page.locator(".find-row mark").first).to_have_text("frobnicate")
    expect(page.get_by_text("Not yours")).to_have_count(0)
    expect(page.get_by_text("secret")).to_have_count(0)

    results.filter(has_text="Deploy notes").get_by_role("link").click()
    expect(page.locator("#chat-heading")).to_have_text("Deploy notes")


def test_the_search_box_works_without_javascript(
    chromium, console, sign_in, conch_server, owner, agent
):
    mine = ConversationFactory(owner=owner, agent=agent, title="Deploy notes")
    said(mine, "The deploy key rotates monthly.")
    context = chromium.new_context(java_script_enabled=False)
    context.on("page", console.watch)
    try:
        page = context.new_page()
        from tests.browser.conftest import Tab

        sign_in(Tab(page))
        page.get_by_role("searchbox", name="Search your chats").fill("rotates")
        page.get_by_role("button", name="Search").click()
        expect(page).to_have_url(re.compile(r"/search/\?q=rotates$"))
        expect(page.locator(".find-row")).to_have_count(1)
        expect(page.locator(".find-row")).to_contain_text("Deploy notes")
        expect(page.locator(".find-row mark")).to_have_text("rotates")
    finally:
        context.close()


def test_held_shows_in_the_list_and_the_tabs_title_counts_what_needs_you_live(
    tab, browser_context, sign_in, conch_server, owner, agent, workspace
):
    sender, receiver = held_pair(owner, agent, workspace)
    asking = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        reply=[{"tool": "write_file", "args": {"path": "x.txt", "content": "1"}}],
        title="Asks first",
        mode="ask",
    )
    page = tab.page
    sign_in(tab)
    expect(page.locator("body")).to_have_attribute("data-socket", "open")
    expect(page).to_have_title("Conch")

    message_send(conversation=sender, text="Ask the login chat to run its tests")

    expect(row(page, receiver).locator(".badge.is-held")).to_have_text("1 held")
    expect(page).to_have_title("(1) Conch")
    message_send(conversation=asking, text="Write it")
    expect(row(page, asking).locator(".badge")).to_have_text("needs you")
    expect(page).to_have_title("(2) Conch")

    # Dismissed in another tab (no reply starts, so only the card's event says so):
    # this tab's list and title follow over the socket.
    other = browser_context.new_page()
    other.goto(f"{conch_server.url}/c/{receiver.public_id}/")
    expect(other).to_have_title("(2) Fix the login · Conch")
    other.locator("#transcript .card-message").get_by_role("button", name="Dismiss").click()
    expect(row(other, receiver).locator(".badge.is-held")).to_have_count(0)
    expect(row(page, receiver).locator(".badge.is-held")).to_have_count(0)
    expect(page).to_have_title("(1) Conch")
