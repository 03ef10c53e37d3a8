"""Nobody but the signed-in owner uses Conch: not a stranger, not another site, not a rebinding page."""

from __future__ import annotations

import re

import pytest
from channels.testing import HttpCommunicator
from django.test import Client

from chats.models import Conversation
from chats.runtime import services
from chats.signin import signin_link_create
from conch.asgi import application
from tests.web.sockets import HOST, session_cookie, socket

PAGES = ["/", "/chats/", "/c/{id}/", "/c/{id}/regions/"]
ACTIONS = ["send", "stop", "approve", "deny", "mode", "rename", "archive", "delete"]


# ---------------------------------------------------------------------------
# Sign-in


@pytest.mark.django_db
def test_every_page_needs_the_sign_in(chat):
    client = Client()
    for page in PAGES:
        url = page.format(id=chat.public_id)
        response = client.get(url, headers={"HX-Request": "true"})
        assert response.status_code == 302, url
        assert response.url.startswith("/signin/?next="), url


@pytest.mark.django_db
def test_every_action_needs_the_sign_in_and_does_nothing_without_it(chat):
    client = Client()
    for action in ACTIONS:
        response = client.post(f"/c/{chat.public_id}/{action}/", {"text": "hi", "title": "x"})
        assert response.status_code == 302 and response.url.startswith("/signin/")
    assert client.post("/chats/new/", {"title": "x"}).status_code == 302

    chat.refresh_from_db()
    assert not chat.turns.exists() and chat.title == "Fix the login bug"
    assert Conversation.objects.count() == 1


@pytest.mark.django_db
def test_the_sign_in_link_signs_the_owner_in_once(owner):
    token = signin_link_create(user=owner)
    browser, stranger = Client(), Client()

    first = browser.get(f"/signin/{token}/")
    again = stranger.get(f"/signin/{token}/")

    assert first.status_code == 302 and first.url == "/"
    assert browser.get("/").status_code == 200
    assert again.status_code == 403
    assert stranger.get("/").status_code == 302


@pytest.mark.django_db
def test_a_made_up_link_signs_nobody_in():
    client = Client()

    assert client.get("/signin/not-a-real-token/").status_code == 403
    assert client.get("/").status_code == 302


@pytest.mark.django_db
def test_the_admin_login_works_too(owner, agent):
    owner.set_password("correct horse")
    owner.save()
    client = Client()

    response = client.post(
        "/admin/login/?next=/", {"username": "owner", "password": "correct horse", "next": "/"}
    )

    assert response.status_code == 302
    assert client.get("/").status_code == 200


@pytest.mark.django_db(transaction=True)
async def test_the_socket_refuses_a_stranger(chat):
    communicator = socket(cookie=None)

    connected, _ = await communicator.connect(timeout=5)

    assert not connected
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_the_socket_accepts_the_signed_in_owner(owner, agent):
    from channels.db import database_sync_to_async

    communicator = socket(cookie=await database_sync_to_async(session_cookie)(owner))

    connected, _ = await communicator.connect(timeout=5)

    assert connected  # so the refusals here are about the one thing each changes
    await communicator.disconnect()


# ---------------------------------------------------------------------------
# DNS rebinding and other sites


@pytest.mark.django_db(transaction=True)
async def test_a_request_for_a_foreign_host_is_a_400(owner, agent):
    for host, expected in ((b"evil.example", 400), (HOST.encode(), 302)):
        communicator = HttpCommunicator(application, "GET", "/", headers=[(b"host", host)])
        response = await communicator.get_response(timeout=5)
        assert response["status"] == expected, host


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("evil.example", "http://127.0.0.1:8000"),  # DNS rebinding: the Host gives it away
        ("evil.example:8000", "http://evil.example:8000"),
        ("127.0.0.1:8000", "http://evil.example"),  # another site's page
        ("127.0.0.1:8000", None),  # no Origin at all
    ],
)
async def test_the_socket_refuses_a_foreign_host_or_origin(owner, agent, host, origin):
    from channels.db import database_sync_to_async

    cookie = await database_sync_to_async(session_cookie)(owner)
    communicator = socket(cookie=cookie, host=host, origin=origin)

    connected, _ = await communicator.connect(timeout=5)

    assert not connected
    await communicator.disconnect()


# ---------------------------------------------------------------------------
# CSRF


@pytest.mark.django_db
def test_a_post_without_the_csrf_token_is_refused(owner, chat):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)

    response = client.post(
        f"/c/{chat.public_id}/send/", {"text": "hi"}, headers={"HX-Request": "true"}
    )

    assert response.status_code == 403
    assert not chat.turns.exists()


@pytest.mark.django_db
def test_a_post_with_the_token_from_hx_headers_is_accepted(owner, chat):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    page = client.get(f"/c/{chat.public_id}/").content.decode()
    token = re.search(r"hx-headers='\{\"X-CSRFToken\": \"(\w+)\"\}'", page).group(1)

    response = client.post(
        f"/c/{chat.public_id}/send/",
        {"text": "hi"},
        headers={"HX-Request": "true", "X-CSRFToken": token},
    )

    assert response.status_code == 200
    assert chat.turns.exists()


@pytest.mark.django_db
def test_the_new_chat_form_carries_its_token_for_plain_posts(owner, agent):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    page = client.get("/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="(\w+)"', page).group(1)

    response = client.post(
        "/chats/new/",
        {
            "title": "Plain",
            "folder": "",
            "agent": services.default_agent().pk,
            "mode": "auto",
            "csrfmiddlewaretoken": token,
        },
    )

    assert response.status_code == 302
    assert Conversation.objects.filter(title="Plain").exists()
