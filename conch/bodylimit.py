"""A cap on every HTTP request's body, before any of it is kept.

Django's ASGI handler spools a request's whole body to a temporary file
before any view runs, so a view's own limit (the gateway's doors take at
most 1 MB) comes after the disk has filled. Conch takes no uploads: this
refuses a body over ``LIMITS.request_body_bytes`` as it arrives, from its
declared length or, when it has none or lies, from what has been read.
"""

from __future__ import annotations

import json

from chats.limits import LIMITS

ERR_TOO_LARGE = f"is too large: at most {LIMITS.request_body_bytes:,} bytes."
ERR_BAD_LENGTH = "has a Content-Length that is not a whole number."


def _declared_length(scope) -> int | None:
    """The body's declared length; -1 when the header is there but not a number."""
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return -1
            return length if length >= 0 else -1
    return None


async def _refuse(send, status: int, error: str) -> None:
    body = json.dumps({"error": f"The request body {error}", "field": "body"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """ASGI middleware: a 413 for a body over ``limit`` bytes, read no further than that."""

    def __init__(self, app, limit: int = LIMITS.request_body_bytes) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _declared_length(scope)
        if declared == -1:
            return await _refuse(send, 400, ERR_BAD_LENGTH)
        if declared is not None and declared > self.limit:
            return await _refuse(send, 413, ERR_TOO_LARGE)

        read = 0
        over = False
        answered = False

        async def limited_receive():
            nonlocal read, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > self.limit:
                    # To the app the client has gone: Django stops reading and answers nothing.
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def watched_send(message):
            nonlocal answered
            if message["type"] == "http.response.start":
                answered = True
            await send(message)

        await self.app(scope, limited_receive, watched_send)
        if over and not answered:
            await _refuse(send, 413, ERR_TOO_LARGE)
