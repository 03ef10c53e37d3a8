"""A page that loses its socket gets it back and catches up on what it missed."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from chats.runtime.chats import conversation_rename
from tests.browser.test_workspace import open_chat
from tests.factories import ChatFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AGAIN = re.compile(r"^([2-9]|\d\d+)$")  # opened a second time, or more


def test_a_socket_the_server_closes_reconnects_and_catches_up(
    tab, sign_in, short_lived_server, owner, agent, workspace, console
):
    # The server goes away while the page is open (here, or when the fixture stops it
    # at teardown): the browser logs the refused socket and htmx its error event.
    console.allow(r"ERR_CONNECTION_REFUSED")
    console.allow(r"console.error: \[object Event\] \(.*/htmx-2\.0\.11\.min\.js")
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Fix the login bug")
    page = tab.page
    body = page.locator("body")
    sign_in(tab, short_lived_server)
    open_chat(tab, short_lived_server, chat)
    expect(body).to_have_attribute("data-socket-opens", "1")

    # Changed behind the page's back: no event will ever tell it.
    conversation_rename(conversation=chat, title="Renamed while it was away")

    # Daphne closes the socket at its websocket_timeout (2 s on this server) with a
    # clean close, which htmx's ws extension would not retry by itself.
    expect(body).to_have_attribute("data-socket-opens", AGAIN, timeout=15_000)
    expect(body).to_have_attribute("data-socket-closed", "1000")
    expect(page.locator("#chat-heading")).to_have_text("Renamed while it was away")
    expect(page.locator("#offline")).to_be_hidden()


def test_a_page_says_it_is_offline_keeps_what_was_typed_and_recovers(
    tab, sign_in, short_lived_server, owner, agent, workspace, console
):
    # The server goes away while the page is open (here, or when the fixture stops it
    # at teardown): the browser logs the refused socket and htmx its error event.
    console.allow(r"ERR_CONNECTION_REFUSED")
    console.allow(r"console.error: \[object Event\] \(.*/htmx-2\.0\.11\.min\.js")
    console.allow(
        r"htmx:(sendError|afterRequest), \[object HTMLFormElement\]"
    )  # the send while offline
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Fix the login bug")
    page = tab.page
    sign_in(tab, short_lived_server)
    open_chat(tab, short_lived_server, chat)
    composer = page.get_by_label("Message")

    short_lived_server.stop()
    expect(page.locator("#offline")).to_be_visible()
    composer.fill("Written while Conch was down")
    composer.press("Enter")
    expect(page.locator("#composer-error")).to_contain_text("could not be reached")
    expect(composer).to_have_value("Written while Conch was down")
    conversation_rename(conversation=chat, title="Renamed while it was down")

    short_lived_server.start()  # the same port: the page's socket finds it again

    expect(page.locator("#offline")).to_be_hidden(timeout=20_000)
    expect(page.locator("#chat-heading")).to_have_text("Renamed while it was down")
    composer.press("Enter")
    expect(composer).to_have_value("")
    expect(page.locator("#composer-error")).to_be_hidden()
    expect(page.locator("#transcript .msg.from-person .text")).to_have_text(
        "Written while Conch was down"
    )


def test_a_lost_event_is_noticed_by_the_gap_in_the_numbers(
    browser_context, sign_in, conch_server, owner, agent, workspace
):
    from tests.browser.conftest import watch

    shown = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Shown")
    elsewhere = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Elsewhere")
    watching, acting = watch(browser_context.new_page()), watch(browser_context.new_page())
    sign_in(watching)
    open_chat(watching, conch_server, shown)
    open_chat(acting, conch_server, shown)

    # An event numbered but never delivered (the channel layer delivers at most once).
    conversation_rename(conversation=elsewhere, title="Renamed, and the event lost")
    expect(watching.page.locator(f"#row-{elsewhere.public_id}")).to_contain_text("Elsewhere")

    # The next event this page gets is one number too far ahead: it fetches again.
    acting.page.get_by_role("button", name="Plan").click()

    expect(watching.page.get_by_role("button", name="Plan")).to_have_attribute(
        "aria-pressed", "true"
    )
    expect(watching.page.locator(f"#row-{elsewhere.public_id} .row-title")).to_have_text(
        "Renamed, and the event lost"
    )
    expect(watching.page.locator("body")).to_have_attribute("data-refetches", "1")


def _pushed(page, first: int, last: int) -> None:
    """A push of the events ``first`` to ``last``, as the ws extension hands one over."""
    page.evaluate(
        """([first, last]) => htmx.trigger(document.getElementById('shell'),
            'htmx:wsBeforeMessage', {message: '<span id="conch-seq" data-seq="' + last +
            '" data-kind="event" data-first="' + first + '" hidden></span>'})""",
        [first, last],
    )


def _received(page, text: str) -> None:
    """``text`` as the page's socket receives a push: through the ws extension's own
    handling (its events, its out-of-band swaps), not only the event conch.js hears."""
    page.evaluate(
        """(text) => {
            const holder = document.querySelector('[ws-connect]');
            const socket = holder['htmx-internal-data'].webSocket.socket;
            socket.dispatchEvent(new MessageEvent('message', {data: text}));
        }""",
        text,
    )


def _open_at_its_number(tab, sign_in, server, chat) -> int:
    """The chat's page, its socket open; the number the page was rendered at."""
    sign_in(tab)
    open_chat(tab, server, chat)
    expect(tab.page.locator("body")).to_have_attribute("data-socket-opens", "1")
    return int(tab.page.locator("#shell").get_attribute("data-seq"))


def test_a_push_carrying_a_run_of_events_is_no_gap_but_a_run_past_one_is(
    tab, sign_in, conch_server, owner, agent, workspace
):
    """A push may carry every event the server heard while it rendered the last one
    (data-first to data-seq): the page takes it as those numbers, in a row."""
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Fix the login bug")
    page, body = tab.page, tab.page.locator("body")
    seq = _open_at_its_number(tab, sign_in, conch_server, chat)
    for n in range(7):  # numbered here; their pushes, below, are the test's own
        conversation_rename(conversation=chat, title=f"Renamed {n + 1} times")

    _pushed(page, seq + 1, seq + 3)
    _pushed(page, seq + 4, seq + 4)
    expect(body).not_to_have_attribute("data-refetches", re.compile(r".*"))

    _pushed(page, seq + 6, seq + 7)  # seq + 5 never came
    expect(body).to_have_attribute("data-refetches", "1")
    expect(page.locator("#chat-heading")).to_have_text("Renamed 7 times")


def test_a_page_whose_number_is_ahead_of_the_servers_settles_on_the_servers(
    tab, sign_in, conch_server, owner, agent, workspace
):
    """A store put back from a copy numbers its events from an older number than the
    page last saw: a refetch older than the page again is taken as the truth, once."""
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Fix the login bug")
    page, body = tab.page, tab.page.locator("body")
    seq = _open_at_its_number(tab, sign_in, conch_server, chat)

    _pushed(page, seq + 50, seq + 50)  # far past anything the server numbered
    expect(body).to_have_attribute("data-refetches", "2")
    page.wait_for_load_state("networkidle")
    assert body.get_attribute("data-refetches") == "2"  # and no more

    conversation_rename(conversation=chat, title="Renamed after")  # pushed by the test:
    _pushed(page, seq + 1, seq + 1)  # the server's next number, no gap from its own
    expect(body).to_have_attribute("data-refetches", "2")


def test_words_take_no_number_and_words_for_a_reply_not_shown_fetch_nothing(
    tab, sign_in, conch_server, owner, agent, workspace
):
    """A running reply's words come unnumbered (data-kind="words"): they neither move the
    page's number nor make a gap, and words for a reply the page doesn't show (it ended
    before they came) have nowhere to go and need nothing fetched."""
    from chats import regions

    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Fix the login bug")
    page, body = tab.page, tab.page.locator("body")
    seq = _open_at_its_number(tab, sign_in, conch_server, chat)
    conversation_rename(conversation=chat, title="Renamed once")  # numbered here: seq + 1

    # Words for a reply: the page has its place (a running reply's, drawn empty) once.
    page.evaluate(
        """() => { const place = document.createElement('div');
            place.id = 'reply-1-text'; place.hidden = true;
            document.getElementById('transcript').appendChild(place); }"""
    )
    _received(page, regions.render_words(words=regions.Words(turn=1, text="Hello, **world**")))
    expect(page.locator("#reply-1-text.is-streaming strong")).to_have_text("world")
    # And for a reply it doesn't show: nowhere to go.
    _received(page, regions.render_words(words=regions.Words(turn=9, text="Too late")))
    expect(page.locator("#reply-9-text")).to_have_count(0)

    _pushed(page, seq + 1, seq + 1)  # the next number: no gap, whatever the words did
    expect(page.locator("#reply-1-text")).to_contain_text("Hello, world")
    page.wait_for_load_state("networkidle")
    assert body.get_attribute("data-refetches") is None
