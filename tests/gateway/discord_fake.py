"""A fake Discord on loopback: its REST API and its Gateway, answering as the real ones do.

The REST API (``http.server``) checks the bot token (``Authorization: Bot …``) and
answers its errors in Discord's words and shapes: 401 ``401: Unauthorized``, 403
Missing Access, 404 Unknown Channel, 400 "Invalid Form Body" (50035,
BASE_TYPE_MAX_LENGTH) past :data:`TEXT_LIMIT`, an interaction's follow-up refused
once its token is gone. Each route is a rate-limit bucket of :attr:`bucket_limit`
requests per :attr:`bucket_reset` seconds, told in every answer's ``X-RateLimit-*``
headers; a request on an empty bucket is answered 429 with ``retry_after`` and
counted in :attr:`FakeDiscord.hammered`. A test may script answers (``answers``,
taken in order) before the fake behaves.

The Gateway (``websockets``) speaks the real frames: HELLO (op 10, a short heartbeat
interval), then it expects IDENTIFY (op 2: the token, and the intents, refused 4004 and
4014 as Discord closes), answers READY (with ``session_id`` and a ``resume_gateway_url``
of its own), answers each heartbeat (op 1) with an ACK (op 11), and sends dispatches
(:meth:`FakeDiscord.dispatch`) numbered by ``s``. :meth:`FakeDiscord.drop` cuts the
connection as a network would; what is dispatched meanwhile is kept, and a RESUME (op
6, the session and the last ``s`` seen) gets it replayed, then RESUMED. When asked for
``compress=zlib-stream`` it sends binary frames of one zlib stream, as Discord does.

discord_payloads/SOURCES.md says where each shape and word comes from.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection, serve

PAYLOADS = Path(__file__).parent / "discord_payloads"
TEXT_LIMIT = 2000

# Intents (docs gateway.mdx): what IDENTIFY must ask for, and the privileged one.
GUILDS, GUILD_MESSAGES, DIRECT_MESSAGES, MESSAGE_CONTENT = 1 << 0, 1 << 9, 1 << 12, 1 << 15


def payload(name: str) -> dict:
    """A recorded payload from discord_payloads/, a fresh copy."""
    return json.loads((PAYLOADS / f"{name}.json").read_text())


# The real answers, word for word.
def refusal(status: int, message: str, code: int, **extra: Any) -> tuple[int, dict]:
    return status, {"message": message, "code": code, **extra}


UNAUTHORIZED = refusal(401, "401: Unauthorized", 0)
MISSING_ACCESS = refusal(403, "Missing Access", 50001)
UNKNOWN_CHANNEL = refusal(404, "Unknown Channel", 10003)
UNKNOWN_WEBHOOK = refusal(404, "Unknown Webhook", 10015)
INVALID_WEBHOOK_TOKEN = refusal(401, "Invalid Webhook Token", 50027)
EMPTY_MESSAGE = refusal(400, "Cannot send an empty message", 50006)
TOO_LONG = refusal(
    400,
    "Invalid Form Body",
    50035,
    errors={
        "content": {
            "_errors": [
                {"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}
            ]
        }
    },
)


def rate_limited(retry_after: float, *, scope: str = "user") -> tuple[int, dict, dict]:
    """A 429 as Discord writes it: the body, and the headers (``Retry-After`` whole seconds)."""
    body = {"message": "You are being rate limited.", "retry_after": retry_after, "global": False}
    headers = {
        "Retry-After": str(max(int(retry_after + 0.999), 1)),
        "X-RateLimit-Limit": "5",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": f"{time.time() + retry_after:.3f}",
        "X-RateLimit-Reset-After": f"{retry_after:.3f}",
        "X-RateLimit-Bucket": "abcd1234",
        "X-RateLimit-Scope": scope,
    }
    return 429, body, headers


@dataclass
class Call:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float  # time.monotonic()
    status: int = 0
    answer: Any = None


@dataclass
class _Bucket:
    remaining: int
    resets_at: float


@dataclass
class Connection:
    """One Gateway connection as the fake saw it."""

    path: str
    query: dict[str, str]
    zlib: Any = None  # the connection's zlib stream, when asked for zlib-stream
    received: list[dict] = field(default_factory=list)


class FakeDiscord:
    def __init__(
        self,
        *,
        token: str,
        bot: dict | None = None,
        heartbeat_ms: int = 200,
        message_content_allowed: bool = True,
    ) -> None:
        self.token = token
        self.bot = bot or payload("users_me")
        self.heartbeat_ms = heartbeat_ms
        self.message_content_allowed = message_content_allowed
        # REST
        self.calls: list[Call] = []
        self.answers: list[tuple] = []  # scripted (status, body[, headers]), taken in order
        self.channels: dict[str, dict] = {}  # what GET /channels/{id} finds
        self.unknown: set[str] = set()  # channels that don't exist (or the bot can't see)
        self.forbidden: set[str] = set()  # channels the bot may not send to
        self.interactions: dict[str, str] = {}  # interaction token → "live" or "gone"
        self.text_limit = TEXT_LIMIT
        self.bucket_limit = 5
        self.bucket_reset = 1.0
        self.hammered = 0  # requests that came on an empty bucket
        self._buckets: dict[str, _Bucket] = {}
        self._ids = itertools.count(1252000000000000000)
        self._lock = threading.Lock()
        self.called = threading.Event()
        # Gateway
        self.session_id = uuid.uuid4().hex
        self.seq = 0
        self.events: list[dict] = []  # the session's dispatches, each with its "s"
        self.identifies: list[dict] = []
        self.resumes: list[dict] = []
        self.heartbeats: list[Any] = []
        # Notified at each heartbeat heard and each RESUME answered, for a test to wait on.
        self.changed = threading.Condition()
        self.connections: list[Connection] = []
        self.closed_with: list[int] = []  # close codes the fake sent
        self.ready = threading.Event()
        self.resumed = threading.Event()
        self._live: tuple[ServerConnection, Connection] | None = None
        self._send_lock: asyncio.Lock | None = None
        self._loop = asyncio.new_event_loop()
        self._ws_thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._ws_server: Any = None
        self.ws_port = 0

        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                call = Call(method, self.path, dict(self.headers), body, time.monotonic())
                with fake._lock:
                    fake.calls.append(call)
                    if fake.answers:
                        scripted = fake.answers.pop(0)
                        status, answer = scripted[0], scripted[1]
                        headers = dict(scripted[2]) if len(scripted) > 2 else {}
                    else:
                        status, answer, headers = fake.answer(method, self.path, self.headers, body)
                    call.status, call.answer = status, answer
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
                fake.called.set()

            def do_GET(self) -> None:  # noqa: N802
                self._answer("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._answer("POST")

            def do_PUT(self) -> None:  # noqa: N802
                self._answer("PUT")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # ------------------------------------------------------------------ REST

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/api/v10"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.ws_port}"

    def _bucket(self, route: str) -> tuple[bool, dict[str, str]]:
        """Take one request from ``route``'s bucket: whether it may go, and the headers."""
        now = time.monotonic()
        bucket = self._buckets.get(route)
        if bucket is None or bucket.resets_at <= now:
            bucket = self._buckets[route] = _Bucket(self.bucket_limit, now + self.bucket_reset)
        allowed = bucket.remaining > 0
        if allowed:
            bucket.remaining -= 1
        after = max(bucket.resets_at - now, 0.0)
        return allowed, {
            "X-RateLimit-Limit": str(self.bucket_limit),
            "X-RateLimit-Remaining": str(bucket.remaining),
            "X-RateLimit-Reset": f"{time.time() + after:.3f}",
            "X-RateLimit-Reset-After": f"{after:.3f}",
            "X-RateLimit-Bucket": uuid.uuid5(uuid.NAMESPACE_URL, route.split("/")[0]).hex[:16],
        }

    def _sent(self, channel_id: str, content: str, **extra: Any) -> dict:
        message = payload("message_sent")
        message.update(
            id=str(next(self._ids)),
            channel_id=channel_id,
            content=content,
            author={**self.bot, "bot": True},
            **extra,
        )
        return message

    def answer(self, method: str, path: str, headers: Any, body: Any) -> tuple[int, dict, dict]:
        parts = urlsplit(path).path.removeprefix("/api/v10").strip("/").split("/")
        if parts[0] == "webhooks" and method == "POST" and len(parts) == 3:
            return self._follow_up(parts[1], parts[2], body)
        if headers.get("Authorization") != f"Bot {self.token}":
            status, answer = UNAUTHORIZED
            return status, answer, {}
        if parts == ["users", "@me"]:
            return 200, self.bot, {}
        if parts == ["oauth2", "applications", "@me"]:
            return 200, {**payload("application"), "id": self.bot["id"]}, {}
        if parts == ["gateway", "bot"]:
            return 200, {**payload("gateway_bot"), "url": self.ws_url}, {}
        if parts[0] == "channels" and len(parts) == 2 and method == "GET":
            if parts[1] in self.channels:
                return 200, self.channels[parts[1]], {}
            status, answer = UNKNOWN_CHANNEL
            return status, answer, {}
        if parts[0] == "channels" and parts[2:] == ["messages"] and method == "POST":
            return self._message(parts[1], body)
        if parts[0] == "applications" and parts[2:] == ["commands"] and method == "PUT":
            made = [
                {**c, "id": str(next(self._ids)), "application_id": parts[1], "version": "1"}
                for c in body
            ]
            return 200, made, {}
        return 404, {"message": "404: Not Found", "code": 0}, {}

    def _checked(self, route: str, body: Any) -> tuple[tuple[int, dict, dict] | None, dict]:
        """The bucket and the content, checked as Discord checks them: the refusal (None if
        the message may go), and the rate-limit headers every answer carries."""
        allowed, limits = self._bucket(route)
        if not allowed:
            self.hammered += 1
            status, answer, headers = rate_limited(float(limits["X-RateLimit-Reset-After"]))
            return (status, answer, {**headers, **limits}), limits
        content = (body or {}).get("content") or ""
        if not content.strip():
            status, answer = EMPTY_MESSAGE
            return (status, answer, limits), limits
        if len(content) > self.text_limit:
            status, answer = TOO_LONG
            return (status, answer, limits), limits
        return None, limits

    def _message(self, channel_id: str, body: Any) -> tuple[int, dict, dict]:
        if channel_id in self.unknown:
            status, answer = UNKNOWN_CHANNEL
            return status, answer, {}
        if channel_id in self.forbidden:
            status, answer = MISSING_ACCESS
            return status, answer, {}
        refused, limits = self._checked(f"channels/{channel_id}/messages", body)
        if refused is not None:
            return refused
        return 200, self._sent(channel_id, body["content"]), limits

    def _follow_up(self, application: str, token: str, body: Any) -> tuple[int, dict, dict]:
        state = self.interactions.get(token)
        if state is None or application != self.bot["id"]:
            status, answer = UNKNOWN_WEBHOOK
            return status, answer, {}
        if state != "live":
            status, answer = INVALID_WEBHOOK_TOKEN
            return status, answer, {}
        refused, limits = self._checked(f"webhooks/{application}/{token}", body)
        if refused is not None:
            return refused
        sent = self._sent("", body["content"], webhook_id=application, application_id=application)
        return 200, sent, limits

    def posted(self, prefix: str = "/api/v10/channels/") -> list[Call]:
        """The POSTs under ``prefix`` that Discord took (200)."""
        return [
            c
            for c in self.calls
            if c.method == "POST" and c.path.startswith(prefix) and c.status == 200
        ]

    # ------------------------------------------------------------------ Gateway

    async def _send(self, conn: ServerConnection, state: Connection, frame: dict) -> None:
        data = json.dumps(frame)
        assert self._send_lock is not None
        async with self._send_lock:
            if state.zlib is not None:
                await conn.send(
                    state.zlib.compress(data.encode()) + state.zlib.flush(zlib.Z_SYNC_FLUSH)
                )
            else:
                await conn.send(data)

    async def _handle(self, conn: ServerConnection) -> None:
        path = conn.request.path if conn.request is not None else "/"
        query = {k: v[0] for k, v in parse_qs(urlsplit(path).query).items()}
        state = Connection(path=path, query=query)
        if query.get("compress") == "zlib-stream":
            state.zlib = zlib.compressobj()
        self.connections.append(state)
        hello = payload("hello")
        hello["d"]["heartbeat_interval"] = self.heartbeat_ms
        await self._send(conn, state, hello)
        try:
            async for raw in conn:
                frame = json.loads(raw)
                state.received.append(frame)
                op, data = frame.get("op"), frame.get("d")
                if op == 1:
                    with self.changed:
                        self.heartbeats.append(data)
                        self.changed.notify_all()
                    await self._send(conn, state, {"op": 11, "d": None, "s": None, "t": None})
                elif op == 2:
                    await self._identify(conn, state, data)
                elif op == 6:
                    await self._resume(conn, state, data)
        except Exception:  # the connection was cut: a dropped network, as tests make it
            pass
        finally:
            if self._live is not None and self._live[0] is conn:
                self._live = None

    async def _identify(self, conn: ServerConnection, state: Connection, data: dict) -> None:
        self.identifies.append(data)
        if data.get("token") != self.token:
            self.closed_with.append(4004)
            await conn.close(4004, "Authentication failed.")
            return
        intents = int(data.get("intents") or 0)
        if intents & MESSAGE_CONTENT and not self.message_content_allowed:
            self.closed_with.append(4014)
            await conn.close(4014, "Disallowed intent(s).")
            return
        self.session_id = uuid.uuid4().hex
        self.seq = 0
        self.events = []
        ready = payload("ready")
        ready.update(
            session_id=self.session_id,
            resume_gateway_url=f"{self.ws_url}/resume",
            user={**ready["user"], "id": self.bot["id"], "username": self.bot["username"]},
        )
        self.seq += 1
        frame = {"op": 0, "t": "READY", "s": self.seq, "d": ready}
        self.events.append(frame)
        self._live = (conn, state)
        await self._send(conn, state, frame)
        self.ready.set()

    async def _resume(self, conn: ServerConnection, state: Connection, data: dict) -> None:
        self.resumes.append(data)
        if data.get("token") != self.token:
            self.closed_with.append(4004)
            await conn.close(4004, "Authentication failed.")
            return
        if data.get("session_id") != self.session_id:
            await self._send(conn, state, {"op": 9, "d": False, "s": None, "t": None})
            return
        seen = int(data.get("seq") or 0)
        for frame in list(self.events):
            if frame["s"] > seen:
                await self._send(conn, state, frame)
        self.seq += 1
        resumed = {"op": 0, "t": "RESUMED", "s": self.seq, "d": {}}
        self.events.append(resumed)
        self._live = (conn, state)
        await self._send(conn, state, resumed)
        with self.changed:
            self.resumed.set()
            self.changed.notify_all()

    def _run(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def dispatch(self, kind: str, data: dict) -> int:
        """Send a dispatch in the session (kept for a RESUME if the connection is down);
        its sequence number."""

        async def go() -> int:
            self.seq += 1
            frame = {"op": 0, "t": kind, "s": self.seq, "d": copy.deepcopy(data)}
            self.events.append(frame)
            if self._live is not None:
                conn, state = self._live
                await self._send(conn, state, frame)
            return frame["s"]

        return self._run(go())

    def drop(self) -> None:
        """Cut the live connection as a failing network does: no close frame."""

        async def go() -> None:
            if self._live is not None:
                conn, _ = self._live
                self._live = None
                self.resumed.clear()
                conn.transport.abort()

        self._run(go())

    def reconnect(self) -> None:
        """Ask the client to reconnect and resume (op 7), as Discord does before a restart."""

        async def go() -> None:
            if self._live is not None:
                conn, state = self._live
                self._live = None
                self.resumed.clear()
                await self._send(conn, state, {"op": 7, "d": None, "s": None, "t": None})

        self._run(go())

    # ------------------------------------------------------------------ lifetime

    def __enter__(self) -> FakeDiscord:
        self.thread.start()
        self._ws_thread.start()

        async def start() -> None:
            self._send_lock = asyncio.Lock()
            self._ws_server = await serve(self._handle, "127.0.0.1", 0, ping_interval=None)
            self.ws_port = next(iter(self._ws_server.sockets)).getsockname()[1]

        self._run(start())
        return self

    def __exit__(self, *exc) -> None:
        async def stop() -> None:
            if self._ws_server is not None:
                self._ws_server.close()
                await self._ws_server.wait_closed()

        try:
            self._run(stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._ws_thread.join(5)
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(5)
