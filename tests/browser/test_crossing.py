"""What a page shows never goes back when an answer and a push cross on the way.

An answer to a request, and a refetch, carry the number their regions were read
at; every push carries its event's. A push can reach the page before the answer
it follows, and an answer before the push it follows: conch.js keeps the newer.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from chats.models import Mode
from tests.browser.test_workspace import open_chat, row
from tests.factories import ChatFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_answer_older_than_a_push_already_shown_is_fetched_again(
    tab, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        mode=Mode.ASK,
        # The answer to the send is rendered while the reply still thinks.
        reply=[{"tool": "write_file", "args": {"path": "a.txt", "content": "a\n"}, "delay": 1}],
        title="Fix the login bug",
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    held = []

    def hold(route) -> None:  # the server answers now; the page gets it only later
        held.append((route, route.fetch()))

    page.route("**/send/", hold)
    page.get_by_label("Message").fill("Write a.txt")
    page.get_by_label("Message").press("Enter")

    # The reply asks for its OK, pushed while the send's answer is on its way.
    expect(row(page, chat).locator(".badge")).to_have_text("needs you")
    expect(page.locator(".request")).to_contain_text("It needs your OK")
    route, answer = held[0]
    assert "It needs your OK" not in answer.text()  # older than what the page shows
    route.fulfill(response=answer)
    expect(page.locator("#composer")).not_to_have_class(re.compile(r"htmx-request"))

    expect(page.locator(".request")).to_contain_text("It needs your OK")
    expect(row(page, chat).locator(".badge")).to_have_text("needs you")
    expect(page.locator("body")).to_have_attribute("data-refetches", "1")


def test_a_push_older_than_an_answer_already_shown_is_dropped(
    tab, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Fix the login bug")
    page = tab.page
    held: list[str] = []
    holding = {"next": False}
    sockets = []

    def socket(ws) -> None:  # the page's socket, through the test
        sockets.append(ws)
        server = ws.connect_to_server()

        def from_server(message) -> None:
            if holding["next"] and 'data-kind="event"' in str(message):
                holding["next"] = False
                held.append(message)
                return
            ws.send(message)

        server.on_message(from_server)

    page.route_web_socket(re.compile(r"/ws/"), socket)
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    plan, auto = (page.get_by_role("button", name=name) for name in ("Plan", "Auto"))

    holding["next"] = True
    plan.click()  # its answer shows Plan; its push waits in the test
    expect(plan).to_have_attribute("aria-pressed", "true")
    auto.click()  # a newer answer, and a newer push
    expect(auto).to_have_attribute("aria-pressed", "true")
    assert len(held) == 1 and "Plan" in held[0]

    page.evaluate(
        "document.body.addEventListener('htmx:wsBeforeMessage',"
        " () => { window.pushesSeen = (window.pushesSeen || 0) + 1; })"
    )
    sockets[-1].send(held.pop())  # the older push, at last
    page.wait_for_function("window.pushesSeen >= 1")

    expect(auto).to_have_attribute("aria-pressed", "true")
    expect(plan).to_have_attribute("aria-pressed", "false")
