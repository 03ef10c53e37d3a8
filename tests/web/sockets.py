"""Opening the workspace socket the way a browser does, through the real ASGI app."""

from __future__ import annotations

import re

from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from conch.asgi import application

HOST = "127.0.0.1:8000"
ORIGIN = "http://127.0.0.1:8000"
SEQ = re.compile(
    r'^<span id="conch-seq" data-seq="(\d+)" data-kind="(\w+)"(?: data-first="(\d+)")?'
)


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def socket(
    *,
    cookie: str | None = None,
    path: str = "/ws/",
    host: str | None = HOST,
    origin: str | None = ORIGIN,
    scheme: str | None = None,
    extra_headers: list[tuple[bytes, bytes]] = (),
    app=application,
) -> WebsocketCommunicator:
    headers = []
    if host is not None:
        headers.append((b"host", host.encode()))
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if cookie is not None:
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    headers.extend(extra_headers)
    communicator = WebsocketCommunicator(app, path, headers=headers)
    if scheme is not None:
        # Daphne puts "wss" here behind TLS; the communicator has no argument for it,
        # and the application hasn't started yet, so setting it now is what it sees.
        communicator.scope["scheme"] = scheme
    return communicator


def seq_of(message: str) -> tuple[int, str]:
    match = SEQ.match(message)
    assert match, f"a push must start with its sequence number: {message[:120]!r}"
    return int(match.group(1)), match.group(2)
