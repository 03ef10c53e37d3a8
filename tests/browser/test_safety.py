"""A model's words stay words in the browser: no script runs and no request goes out."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest
from playwright.sync_api import expect

from tests.browser.test_workspace import STEP, open_chat, row
from tests.factories import ChatFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOSTILE = (
    '<script>window.pwned = "script"</script>'
    "<img src=x onerror=\"window.pwned = 'img'; alert('img')\">"
    '<b hx-get="/evil-get/" hx-trigger="load">hx-get</b>'
    "<i hx-on:click=\"window.pwned = 'hx-on'; alert('hx-on')\">hx-on:click me</i>"
    '<div id="chat-list" hx-swap-oob="true">the sidebar is gone</div>'
)
HOSTILE_FILE = "<img src=y onerror=alert('file')>.txt"
HOSTILE_TITLE = "<img src=z onerror=\"window.pwned = 'title'\">"


def test_a_hostile_reply_shows_as_text_and_does_nothing(
    tab, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        reply=[
            {"say": HOSTILE, "delay": STEP},
            {"tool": "write_file", "args": {"path": HOSTILE_FILE, "content": "x"}},
        ],
        title=HOSTILE_TITLE,
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    page.get_by_label("Message").fill("Say something")
    page.get_by_label("Message").press("Enter")

    transcript = page.locator("#transcript")
    for check in ("live", "after a reload"):
        # Arrived over the socket first, then rendered by the page itself.
        expect(transcript.locator(".msg.from-assistant .text")).to_have_text(HOSTILE)
        expect(transcript.locator(".step .files li")).to_have_text(HOSTILE_FILE)
        expect(page.locator("#chat-heading")).to_have_text(HOSTILE_TITLE)
        expect(row(page, chat).locator(".row-title")).to_have_text(HOSTILE_TITLE)
        transcript.get_by_text("hx-on:click me").click()
        assert page.locator("main img, main script, #chat-list img").count() == 0, check
        assert page.evaluate("window.pwned") is None, check
        if check == "live":
            page.reload()

    assert tab.dialogs == []
    expect(page.locator("#chat-list")).not_to_contain_text("the sidebar is gone")
    paths = {urlparse(url).path for url in tab.requests}
    expected = {
        "/",
        f"/c/{chat.public_id}/",
        f"/c/{chat.public_id}/send/",
        f"/c/{chat.public_id}/regions/",
        "/chats/",
    }
    unexpected = {
        p for p in paths if p not in expected and not p.startswith(("/static/", "/signin/"))
    }
    assert unexpected == set()
