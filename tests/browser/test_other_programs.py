"""Other programs on this machine: a page they serve on loopback reads nothing of Conch,
and a tab that signed out takes its other tabs' sockets with it."""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.conf import settings
from playwright.sync_api import expect

from tests.browser.test_workspace import open_chat
from tests.factories import ChatFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SECRET_TITLE = "Quarterly numbers, not for anyone else"

# The page another program serves: it opens Conch's socket with the person's cookie
# (another port is the same site) and writes down everything it gets.
HOSTILE_PAGE = """<!doctype html><title>Something else</title>
<script>
window.report = {opened: false, messages: [], closed: null};
var ws = new WebSocket("ws://127.0.0.1:%(port)d/ws/");
ws.onopen = function () { window.report.opened = true; };
ws.onmessage = function (e) { window.report.messages.push(String(e.data)); };
ws.onclose = function (e) { window.report.closed = e.code; };
</script>"""


class HostileSite:
    """A tiny web server on another loopback port, like any other program's."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802  http.server's name
                body = site.pages.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.end_headers()
                self.wfile.write((body or "").encode())

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def hostile_site() -> Iterator[HostileSite]:
    site = HostileSite()
    site.thread.start()
    yield site
    site.server.shutdown()
    site.server.server_close()


def handshake_status(port: int, *, origin: str, session: str) -> int:
    """The HTTP status Daphne answers a WebSocket handshake with."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(
            "GET",
            "/ws/",
            headers={
                "Host": f"127.0.0.1:{port}",
                "Connection": "Upgrade",
                "Upgrade": "websocket",
                "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
                "Origin": origin,
                "Cookie": f"{settings.SESSION_COOKIE_NAME}={session}",
            },
        )
        return connection.getresponse().status
    finally:
        connection.close()


def session_of(context) -> str:
    (cookie,) = [c for c in context.cookies() if c["name"] == settings.SESSION_COOKIE_NAME]
    return cookie["value"]


def test_a_page_on_another_loopback_port_cannot_open_the_socket(
    browser_context, tab, sign_in, conch_server, hostile_site, owner, agent, workspace, console
):
    # The hostile page's own console: the refused handshake is the point, and its
    # little server has no icon.
    console.allow(rf"Unexpected response code: 403 \(http://127\.0\.0\.1:{hostile_site.port}/")
    console.allow(rf"404 \(Not Found\) \(http://127\.0\.0\.1:{hostile_site.port}/favicon\.ico")
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Plans")
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    hostile_site.pages["/"] = HOSTILE_PAGE % {"port": conch_server.port}

    hostile = browser_context.new_page()  # the same browser, so the same cookies
    hostile.goto(hostile_site.origin + "/")
    hostile.wait_for_function("window.report.opened || window.report.closed !== null")

    # The person renames the chat in Conch's own tab: Conch's socket tells that tab...
    page = tab.page
    page.get_by_text("Rename", exact=True).click()
    page.get_by_label("New title").fill(SECRET_TITLE)
    page.get_by_role("button", name="Save").click()
    expect(page.locator(f"#row-{chat.public_id} .row-title")).to_have_text(SECRET_TITLE)

    # ...and the other program's page got nothing: refused at the handshake.
    report = hostile.evaluate("window.report")
    assert report["opened"] is False
    assert report["messages"] == []
    assert report["closed"] == 1006  # what a browser reports for a refused handshake
    assert SECRET_TITLE not in json.dumps(report)
    # The refusal is a 403, and it is the origin alone that makes it one.
    session = session_of(browser_context)
    assert handshake_status(conch_server.port, origin=hostile_site.origin, session=session) == 403
    assert handshake_status(conch_server.port, origin=conch_server.url, session=session) == 101


def test_signing_out_in_one_tab_closes_the_other_tabs_socket(
    browser_context, tab, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Plans")
    sign_in(tab)
    other = browser_context.new_page()
    sockets = []
    other.on("websocket", lambda socket: sockets.append(socket))
    other.goto(f"{conch_server.url}/c/{chat.public_id}/")
    expect(other.locator("body")).to_have_attribute("data-socket", "open")
    (socket,) = sockets

    tab.page.goto(conch_server.url + "/")
    tab.page.get_by_role("button", name="Sign out").click()
    expect(tab.page).to_have_url(conch_server.url + "/signin/")

    if not socket.is_closed():
        socket.wait_for_event("close", timeout=1_000)  # within a second of the sign-out
    # The page learnt why, and went to the sign-in rather than reconnecting.
    expect(other).to_have_url(re.compile(rf"/signin/\?next=/c/{chat.public_id}/$"))
    expect(other.get_by_text("Open the sign-in link")).to_be_visible()
    assert SECRET_TITLE not in other.content()
