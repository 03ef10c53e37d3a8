"""A clean console and an accessible page (issue 15, item 10), in a real browser.

axe-core (vendored, tests/browser/a11y.py) runs on the chat list, a chat with its
steps and a request for an OK, ADR 0134's cards, the routing playground after a
message, and the routines page: no serious or critical violation on any. Every
browser test also fails on any console error (conftest.py's ``console``); the
first test here is the flow that used to log ``htmx:oobErrorNoTarget``.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from chats.models import Mode
from chats.runtime.turns import message_send
from tests.browser.a11y import axe_violations
from tests.browser.test_together import held_pair, message_card
from tests.browser.test_workspace import STEP, open_chat, row
from tests.factories import ChatFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_new_chat_logs_nothing_in_another_tabs_console(
    tab, browser_context, sign_in, conch_server, owner, agent, console
):
    page = tab.page
    sign_in(tab)
    watching = browser_context.new_page()
    watching.goto(conch_server.url + "/")
    expect(watching.locator("body")).to_have_attribute("data-socket", "open")

    page.get_by_label("Title").fill("Brand new")
    page.get_by_role("button", name="Start chat").click()
    expect(page.get_by_role("heading", name="Brand new")).to_be_visible()

    # The other tab's list gains the row from the push itself: no miss, no refetch.
    expect(watching.locator("#chat-rows .row-title")).to_have_text(["Brand new"])
    assert watching.evaluate("document.body.getAttribute('data-refetches')") is None
    assert console.errors == []


def test_the_list_and_a_chat_have_no_serious_accessibility_violations(
    tab, sign_in, conch_server, owner, agent, workspace
):
    asking = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        title="Roll out 2.4",
        mode=Mode.ASK,
        reply=[
            {"tool": "list_files", "args": {}, "delay": STEP},
            {"say": "I'll write the version file."},
            {"tool": "write_file", "args": {"path": "deploy.txt", "content": "2.4"}},
        ],
    )
    ChatFactory(owner=owner, agent=agent, folder=workspace, title="Fix the login")
    page = tab.page
    sign_in(tab)
    expect(page.locator("#chat-rows li.chat-row")).to_have_count(2)
    assert axe_violations(page) == []  # the list, and the new chat form

    open_chat(tab, conch_server, asking)
    message_send(conversation=asking, text="Roll it out")
    expect(page.locator(".request")).to_contain_text("It needs your OK")
    expect(row(page, asking).locator(".badge")).to_have_text("needs you")
    assert axe_violations(page) == []


def test_the_cards_have_no_serious_accessibility_violations(
    tab, sign_in, conch_server, owner, agent, workspace
):
    sender, receiver = held_pair(owner, agent, workspace)
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, receiver)
    message_send(conversation=sender, text="Ask the login chat to run its tests")
    expect(message_card(page).locator(".badge")).to_have_text("held for you")
    assert axe_violations(page) == []  # the held message, with Pass it on and Dismiss

    open_chat(tab, conch_server, sender)
    expect(message_card(page)).to_be_visible()
    assert axe_violations(page) == []  # the sender's side


def test_the_playground_and_routines_have_no_serious_accessibility_violations(
    tab, sign_in, conch_server, owner, agent
):
    page = tab.page
    sign_in(tab)
    page.goto(f"{conch_server.url}/gateway/playground/")
    expect(page.get_by_role("heading", name="Routing playground")).to_be_visible()
    page.locator("#pg-palette button[name]").first.click()
    expect(page.locator("#pg-result .pg-key")).to_be_visible()
    assert axe_violations(page) == []

    page.goto(f"{conch_server.url}/gateway/routines/")
    expect(page.get_by_role("heading", name="Routines", exact=True)).to_be_visible()
    assert axe_violations(page) == []


def test_axe_finds_a_nameless_button(tab, sign_in, conch_server, owner, agent):
    """The check above can fail: a button with no name is a critical violation."""
    page = tab.page
    sign_in(tab)
    page.evaluate("document.getElementById('main').appendChild(document.createElement('button'))")

    found = axe_violations(page)

    assert len(found) == 1 and found[0].startswith("button-name (critical)")
