"""Nobody but the signed-in owner uses Conch: not a stranger, not another site, not a rebinding page."""

from __future__ import annotations

import re

import pytest
from channels.db import database_sync_to_async
from channels.testing import HttpCommunicator
from django.test import Client

from chats import consumers
from chats.models import Conversation, Mode
from chats.runtime.chats import default_agent
from chats.signin import signin_link_create
from conch.asgi import application
from tests.web.sockets import HOST, ORIGIN, session_cookie, socket

PAGES = ["/", "/chats/", "/c/{id}/", "/c/{id}/regions/"]
# A token another program's page on the same site chose, and set as Conch's CSRF cookie:
# cookies don't isolate ports, so it can.
TOSSED_TOKEN = "A" * 32
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

    # Closed at once with "signed out" (the page's cue to go to the sign-in), and
    # nothing sent first: not the hello, not a single push.
    assert connected
    assert await communicator.receive_output(timeout=5) == {
        "type": "websocket.close",
        "code": consumers.CLOSE_UNAUTHENTICATED,
    }
    assert await communicator.receive_nothing(timeout=0.2)
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("host", "origin", "scheme"),
    [
        (HOST, ORIGIN, None),
        ("localhost:8000", "http://localhost:8000", None),
        ("[::1]:8000", "http://[::1]:8000", None),
        ("127.0.0.1", "http://127.0.0.1", None),  # Conch itself on port 80
        (HOST, "https://127.0.0.1:8000", "wss"),  # behind TLS
    ],
)
async def test_the_socket_accepts_the_signed_in_owner_from_conchs_own_origin(
    owner, agent, host, origin, scheme
):
    communicator = socket(
        cookie=await database_sync_to_async(session_cookie)(owner),
        host=host,
        origin=origin,
        scheme=scheme,
    )

    connected, _ = await communicator.connect(timeout=5)

    assert connected  # so the refusals here are about the one thing each changes
    await communicator.disconnect()


# ---------------------------------------------------------------------------
# DNS rebinding, other sites, and other programs on this machine


@pytest.mark.django_db(transaction=True)
async def test_a_request_for_a_foreign_host_is_a_400(owner, agent):
    for host, expected in ((b"evil.example", 400), (HOST.encode(), 302)):
        communicator = HttpCommunicator(application, "GET", "/", headers=[(b"host", host)])
        response = await communicator.get_response(timeout=5)
        assert response["status"] == expected, host


async def refused_before_any_event(communicator) -> bool:
    """The handshake was refused (Daphne answers that with a 403) and nothing was sent."""
    connected, _ = await communicator.connect(timeout=5)
    nothing_after = await communicator.receive_nothing(timeout=0.2)
    await communicator.disconnect()
    return not connected and nothing_after


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("evil.example", "http://127.0.0.1:8000"),  # DNS rebinding: the Host gives it away
        ("evil.example:8000", "http://evil.example:8000"),
        ("127.0.0.1:8000", "http://evil.example"),  # another site's page
    ],
)
async def test_the_socket_refuses_a_foreign_host_or_origin(owner, agent, host, origin):
    cookie = await database_sync_to_async(session_cookie)(owner)

    assert await refused_before_any_event(socket(cookie=cookie, host=host, origin=origin))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:9999",  # another program's page, same host, another port
        "http://127.0.0.1",  # port 80
        "http://127.0.0.1:8000.evil.example",
        "https://127.0.0.1:8000",  # another scheme
        "http://localhost:8000",  # another loopback name for the same server
        "http://[::1]:8000",
        "http://localhost:9999",
        "null",  # a sandboxed frame or a file:// page
        "http://127.0.0.1:8000/",  # not an origin at all
    ],
)
async def test_a_page_on_another_loopback_origin_cannot_open_the_socket(owner, agent, origin):
    cookie = await database_sync_to_async(session_cookie)(owner)

    assert await refused_before_any_event(socket(cookie=cookie, host=HOST, origin=origin))


@pytest.mark.django_db(transaction=True)
async def test_the_socket_refuses_a_handshake_without_exactly_one_origin(owner, agent):
    cookie = await database_sync_to_async(session_cookie)(owner)
    twice = [(b"origin", b"http://127.0.0.1:9999")]

    assert await refused_before_any_event(socket(cookie=cookie, origin=None))
    assert await refused_before_any_event(socket(cookie=cookie, extra_headers=twice))


@pytest.mark.django_db(transaction=True)
async def test_the_socket_over_tls_wants_the_https_origin(owner, agent):
    cookie = await database_sync_to_async(session_cookie)(owner)

    assert await refused_before_any_event(socket(cookie=cookie, origin=ORIGIN, scheme="wss"))


@pytest.mark.django_db(transaction=True)
async def test_the_socket_refuses_a_second_host_header(owner, agent):
    cookie = await database_sync_to_async(session_cookie)(owner)
    smuggled = [(b"host", b"evil.example:8000")]

    assert await refused_before_any_event(socket(cookie=cookie, extra_headers=smuggled))


# ---------------------------------------------------------------------------
# CSRF


def browser(owner, *, origin: str | None = ORIGIN, referer: str | None = None) -> Client:
    """The owner's browser on Conch at 127.0.0.1:8000, with CSRF checks on, sending
    the Origin (and Referer) a browser would for a page at ``origin``."""
    headers = {"Host": HOST}
    if origin is not None:
        headers["Origin"] = origin
    if referer is not None:
        headers["Referer"] = referer
    client = Client(enforce_csrf_checks=True, headers=headers)
    client.force_login(owner)
    return client


def new_chat(token: str, title: str) -> dict:
    # A chat in Auto mode in / : the worst a forged post could start.
    return {
        "title": title,
        "folder": "/",
        "agent": default_agent().pk,
        "mode": Mode.AUTO,
        "csrfmiddlewaretoken": token,
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1",  # port 80: once trusted by a port-less CSRF_TRUSTED_ORIGINS entry
        "http://127.0.0.1:9999",
        "http://localhost",
        "http://localhost:8000",
        "http://[::1]",
        "null",
    ],
)
def test_a_page_on_another_loopback_origin_cannot_post_even_with_the_csrf_cookie_it_set(
    owner, agent, origin
):
    client = browser(owner, origin=origin, referer=f"{origin}/")
    client.cookies["csrftoken"] = TOSSED_TOKEN

    response = client.post("/chats/new/", new_chat(TOSSED_TOKEN, "Forged"))

    assert response.status_code == 403
    assert not Conversation.objects.exists()


@pytest.mark.django_db
def test_the_same_origin_post_with_that_cookie_is_what_works(owner, agent):
    client = browser(owner)
    client.cookies["csrftoken"] = TOSSED_TOKEN

    response = client.post("/chats/new/", new_chat(TOSSED_TOKEN, "Mine"))

    # So the refusals above are about the origin alone.
    assert response.status_code == 302
    assert Conversation.objects.filter(title="Mine").exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("referer", "expected"),
    [
        (None, 403),
        ("http://127.0.0.1/", 403),
        ("http://127.0.0.1:9999/hostile.html", 403),
        ("https://127.0.0.1:8000/", 403),
        ("not a url", 403),
        ("http://127.0.0.1:8000/", 302),
    ],
)
def test_a_post_without_an_origin_needs_a_referer_from_conchs_own_origin(
    owner, agent, referer, expected
):
    client = browser(owner, origin=None, referer=referer)
    client.cookies["csrftoken"] = TOSSED_TOKEN

    response = client.post("/chats/new/", new_chat(TOSSED_TOKEN, "No origin"))

    assert response.status_code == expected
    assert Conversation.objects.filter(title="No origin").exists() == (expected == 302)


@pytest.mark.django_db
def test_a_post_without_the_csrf_token_is_refused(owner, chat):
    client = browser(owner)

    response = client.post(
        f"/c/{chat.public_id}/send/", {"text": "hi"}, headers={"HX-Request": "true"}
    )

    assert response.status_code == 403
    assert not chat.turns.exists()


@pytest.mark.django_db
def test_a_post_with_the_token_from_hx_headers_is_accepted(owner, chat):
    client = browser(owner)
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
    client = browser(owner)
    page = client.get("/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="(\w+)"', page).group(1)

    response = client.post(
        "/chats/new/",
        {
            "title": "Plain",
            "folder": "",
            "agent": default_agent().pk,
            "mode": "auto",
            "csrfmiddlewaretoken": token,
        },
    )

    assert response.status_code == 302
    assert Conversation.objects.filter(title="Plain").exists()


# ---------------------------------------------------------------------------
# The Content-Security-Policy is a header on every response


def _policy(response) -> dict[str, str]:
    value = response.headers.get("Content-Security-Policy", "")
    return dict(
        (part.strip().split(" ", 1) + [""])[:2] for part in value.split(";") if part.strip()
    )


@pytest.mark.django_db
def test_every_response_carries_the_policy_the_admins_and_errors_too(owner, chat):
    client = Client()
    signed_out = ["/", "/signin/", "/admin/login/", "/signin/made-up/", "/no-such-page/"]
    responses = [(url, client.get(url)) for url in signed_out]
    client.force_login(owner)
    signed_in = [
        "/",
        f"/c/{chat.public_id}/",
        "/connect/",
        "/admin/",
        "/admin/chats/",
        "/c/c_none/",
    ]
    responses += [(url, client.get(url)) for url in signed_in]
    responses.append(("bad POST", client.post(f"/c/{chat.public_id}/mode/", {"mode": "x"})))
    statuses = {response.status_code for _, response in responses}
    assert {200, 302, 400, 403, 404} <= statuses  # pages, redirects and errors alike
    for url, response in responses:
        policy = _policy(response)
        assert policy.get("frame-ancestors") == "'none'", url
        assert policy.get("script-src") == "'self'" and policy.get("style-src") == "'self'", url
        assert policy.get("object-src") == "'none'" and policy.get("base-uri") == "'none'", url
        assert policy.get("default-src") == "'self'", url


@pytest.mark.django_db(transaction=True)
async def test_the_policy_is_sent_by_the_asgi_application_that_serves(owner, agent):
    communicator = HttpCommunicator(
        application, "GET", "/signin/", headers=[(b"host", HOST.encode())]
    )
    response = await communicator.get_response(timeout=5)
    headers = {name.lower(): value for name, value in response["headers"]}
    assert response["status"] == 200
    assert b"frame-ancestors 'none'" in headers[b"content-security-policy"]
