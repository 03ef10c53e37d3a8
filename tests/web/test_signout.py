"""Signing out, and a session's end closing every socket it opened, within a second."""

from __future__ import annotations

import re
import time

import pytest
from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from django.conf import settings
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client
from django.utils import timezone

from chats import consumers
from chats.routing import SameOriginValidator, websocket_urlpatterns
from chats.runtime.chats import conversation_rename
from chats.signout import session_group
from tests.factories import ChatFactory
from tests.web.sockets import HOST, ORIGIN, seq_of, socket

pytestmark = pytest.mark.django_db(transaction=True)

WITHIN = 1.0  # seconds, from the session's end to the socket's close
TIMEOUT = 5
SIGNED_OUT = {"type": "websocket.close", "code": consumers.CLOSE_UNAUTHENTICATED}


def browser(owner, *, enforce_csrf_checks: bool = False) -> Client:
    """A browser the owner signed in with, on Conch at 127.0.0.1:8000."""
    client = Client(
        enforce_csrf_checks=enforce_csrf_checks, headers={"Host": HOST, "Origin": ORIGIN}
    )
    client.force_login(owner)
    return client


def cookie_of(client: Client) -> str:
    return client.cookies[settings.SESSION_COOKIE_NAME].value


async def open_socket(cookie: str, app=None):
    communicator = socket(cookie=cookie, **({"app": app} if app else {}))
    connected, _ = await communicator.connect(timeout=TIMEOUT)
    assert connected
    seq_of(await communicator.receive_from(timeout=TIMEOUT))  # the hello
    return communicator


async def closed_by(communicator, deadline: float) -> dict:
    """What the socket sends next, waited for no later than ``deadline`` (monotonic)."""
    return await communicator.receive_output(timeout=max(deadline - time.monotonic(), 0.01))


@pytest.fixture
def chat(owner, agent, workspace):
    return ChatFactory(owner=owner, title="Plans", folder=str(workspace))


# ---------------------------------------------------------------------------
# The sign-out itself


def test_signing_out_is_a_post(owner, agent):
    client = browser(owner)

    assert client.get("/signout/").status_code == 405
    assert client.get("/").status_code == 200

    response = client.post("/signout/")

    assert response.status_code == 302 and response.url == "/signin/"
    assert client.get("/").status_code == 302
    assert not Session.objects.exists()


def test_the_workspace_has_a_sign_out_button_that_works_without_javascript(owner, agent):
    client = browser(owner, enforce_csrf_checks=True)
    page = client.get("/").content.decode()

    form = re.search(
        r'<form class="signout" method="post" action="/signout/">(.*?)</form>', page, re.S
    )
    assert form and "Sign out</button>" in form.group(1)
    token = re.search(r'name="csrfmiddlewaretoken" value="(\w+)"', form.group(1)).group(1)

    assert client.post("/signout/").status_code == 403  # another page can't sign you out
    assert client.get("/").status_code == 200
    assert client.post("/signout/", {"csrfmiddlewaretoken": token}).status_code == 302
    assert client.get("/").status_code == 302


# ---------------------------------------------------------------------------
# Sockets end with their session


async def test_signing_out_closes_every_socket_of_that_session_within_a_second(owner, chat):
    leaving = await database_sync_to_async(browser)(owner)
    staying = await database_sync_to_async(browser)(owner)  # another browser, its own session
    tabs = [await open_socket(cookie_of(leaving)) for _ in range(2)]
    other = await open_socket(cookie_of(staying))
    try:
        deadline = time.monotonic() + WITHIN
        response = await database_sync_to_async(leaving.post)("/signout/")
        assert response.status_code == 302

        for tab in tabs:
            assert await closed_by(tab, deadline) == SIGNED_OUT

        await database_sync_to_async(conversation_rename)(conversation=chat, title="Secret plans")
        assert "Secret plans" in await other.receive_from(timeout=TIMEOUT)
        for tab in tabs:
            assert await tab.receive_nothing(timeout=0.2)  # closed, and nothing more
    finally:
        for communicator in (*tabs, other):
            await communicator.disconnect()


async def test_the_admins_log_out_closes_the_sockets_too(owner, agent):
    client = await database_sync_to_async(browser)(owner)
    tab = await open_socket(cookie_of(client))
    try:
        deadline = time.monotonic() + WITHIN
        response = await database_sync_to_async(client.post)("/admin/logout/")
        assert response.status_code == 200

        assert await closed_by(tab, deadline) == SIGNED_OUT
    finally:
        await tab.disconnect()


async def test_signing_out_closes_the_sockets_whatever_engine_keeps_the_sessions(
    owner, agent, settings
):
    # In the cache no session row is deleted, so no post_delete: the sign-out itself tells.
    settings.SESSION_ENGINE = "django.contrib.sessions.backends.cache"
    client = await database_sync_to_async(browser)(owner)
    tab = await open_socket(cookie_of(client))
    try:
        deadline = time.monotonic() + WITHIN
        response = await database_sync_to_async(client.post)("/signout/")
        assert response.status_code == 302

        assert await closed_by(tab, deadline) == SIGNED_OUT
    finally:
        await tab.disconnect()


def _expire_in(client: Client, seconds: int):
    session = client.session
    session.set_expiry(seconds)
    session.save()
    return Session.objects.get(session_key=session.session_key).expire_date


async def test_a_socket_closes_when_its_session_expires(owner, agent):
    client = await database_sync_to_async(browser)(owner)
    expires_at = await database_sync_to_async(_expire_in)(client, 3)
    tab = await open_socket(cookie_of(client))
    try:
        deadline = time.monotonic() + (expires_at - timezone.now()).total_seconds() + WITHIN

        assert await closed_by(tab, deadline) == SIGNED_OUT
        assert timezone.now() >= expires_at  # not before: the session still held till then
    finally:
        await tab.disconnect()


async def test_a_session_deleted_without_a_sign_out_closes_its_sockets_within_a_second(
    owner, agent
):
    client = await database_sync_to_async(browser)(owner)
    tab = await open_socket(cookie_of(client))
    try:
        deadline = time.monotonic() + WITHIN
        # What a sweep of sessions, or a new sign-in cycling the key, does.
        await database_sync_to_async(Session.objects.filter(session_key=cookie_of(client)).delete)()

        assert await closed_by(tab, deadline) == SIGNED_OUT
    finally:
        await tab.disconnect()


def _delete_behind_djangos_back(session_key: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM django_session WHERE session_key = %s", [session_key])


async def test_a_session_deleted_where_no_signal_sees_it_closes_at_the_next_check(
    owner, agent, monkeypatch
):
    monkeypatch.setattr(consumers, "SESSION_RECHECK_SECONDS", 0.2)
    client = await database_sync_to_async(browser)(owner)
    tab = await open_socket(cookie_of(client))
    try:
        deadline = time.monotonic() + consumers.SESSION_RECHECK_SECONDS + WITHIN
        await database_sync_to_async(_delete_behind_djangos_back)(cookie_of(client))

        assert await closed_by(tab, deadline) == SIGNED_OUT
    finally:
        await tab.disconnect()


class SignOutMidway:
    """Signs the session out after the socket's auth read it, before the consumer runs:
    the ``session.ended`` this sends reaches a group the socket hasn't joined yet."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        key = scope["session"].session_key
        await database_sync_to_async(Session.objects.filter(session_key=key).delete)()
        return await self.application(scope, receive, send)


async def test_a_sign_out_racing_the_handshake_still_refuses_the_socket(owner, agent):
    client = await database_sync_to_async(browser)(owner)
    app = SameOriginValidator(AuthMiddlewareStack(SignOutMidway(URLRouter(websocket_urlpatterns))))
    communicator = socket(cookie=cookie_of(client), app=app)
    try:
        connected, _ = await communicator.connect(timeout=TIMEOUT)

        # Accepted only to be closed with the code a page reads as "signed out": a refused
        # handshake reaches the browser as 1006, "the server is away", and the tab would
        # say "reconnecting…" forever. Nothing at all comes before the close.
        assert connected
        assert await communicator.receive_output(timeout=TIMEOUT) == SIGNED_OUT
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()


def test_a_sessions_group_is_named_by_a_keyed_hash_never_the_key():
    key = "k" * 32
    name = session_group(key)

    assert key not in name and len(name) < 100
    assert get_channel_layer().require_valid_group_name(name)
    assert session_group(key) == name != session_group("j" * 32)
