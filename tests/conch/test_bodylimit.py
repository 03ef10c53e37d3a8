"""A request body over the cap is refused as it arrives, before Django spools it to disk."""

from __future__ import annotations

import asyncio
import json

import pytest

from chats.limits import LIMITS
from conch.asgi import application
from conch.bodylimit import ERR_BAD_LENGTH, ERR_TOO_LARGE

CHUNK = 64 * 1024


class Client:
    """A client that sends a body in chunks and counts how many the server took."""

    def __init__(self, chunks: int, *, declared: int | None = None) -> None:
        self.chunks = chunks
        self.taken = 0
        self.sent: list[dict] = []
        self.headers = [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json")]
        if declared is not None:
            self.headers.append((b"content-length", str(declared).encode()))

    async def receive(self):
        if self.taken >= self.chunks:
            await asyncio.Event().wait()  # as a server does: nothing more until the client goes
        self.taken += 1
        more = self.taken < self.chunks
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": more}

    async def send(self, message):
        self.sent.append(message)

    async def post(self, path: str = "/gateway/inbound") -> tuple[int, dict]:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": self.headers,
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
        }
        await application(scope, self.receive, self.send)
        start = next(m for m in self.sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        return start["status"], json.loads(body) if body.startswith(b"{") else {}


@pytest.mark.django_db(transaction=True)
async def test_a_body_that_declares_more_than_the_cap_is_refused_unread():
    client = Client(chunks=1000, declared=LIMITS.request_body_bytes + 1)

    status, answer = await client.post()

    assert status == 413
    assert answer == {"error": f"The request body {ERR_TOO_LARGE}", "field": "body"}
    assert client.taken == 0


@pytest.mark.django_db(transaction=True)
async def test_a_body_without_a_length_is_read_no_further_than_the_cap():
    # 10 MB in 64 KB chunks: Django alone would spool all of it to a temporary file.
    client = Client(chunks=160)

    status, answer = await client.post()

    assert status == 413 and answer["field"] == "body"
    assert client.taken == LIMITS.request_body_bytes // CHUNK + 1


@pytest.mark.django_db(transaction=True)
async def test_a_body_that_lies_about_its_length_is_cut_off_too():
    client = Client(chunks=160, declared=100)

    status, _ = await client.post()

    assert status == 413
    assert client.taken == LIMITS.request_body_bytes // CHUNK + 1


@pytest.mark.django_db(transaction=True)
async def test_a_content_length_that_is_not_a_number_is_a_400():
    client = Client(chunks=1)
    client.headers.append((b"content-length", b"lots"))

    status, answer = await client.post()

    assert status == 400
    assert answer == {"error": f"The request body {ERR_BAD_LENGTH}", "field": "body"}


@pytest.mark.django_db(transaction=True)
async def test_a_body_under_the_cap_reaches_the_app():
    client = Client(chunks=2)

    status, _ = await client.post()

    # The gateway's door answers for itself: no token, 401.
    assert status == 401
    assert client.taken == 2
