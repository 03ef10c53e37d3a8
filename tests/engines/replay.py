"""A loopback server that replays recorded answers byte for byte (tests/engines/recordings/).

Each POST takes the next :class:`Played`: a status, headers and the recorded
body, sent as they are. Every request is kept (path, headers, JSON body). A GET
answers from ``pages`` (path to JSON), for the servers' own info endpoints. A played answer
may also break the connection: :func:`cut` ends its body early, :data:`HANG_UP` answers
nothing at all.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RECORDINGS = Path(__file__).parent / "recordings"


@dataclass(frozen=True)
class Played:
    body: bytes
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    pace: float = 0.0  # seconds before each event of a stream (a slow model)
    # The body breaks off after this many bytes: sent chunked, and the connection closed
    # before the last chunk, as a server that dies mid-answer leaves it.
    cut: int | None = None
    hang_up: bool = False  # the request is read, then the connection closed with no answer


def stream(name: str) -> Played:
    """A recorded stream of server-sent events."""
    return Played((RECORDINGS / name).read_bytes(), headers={"Content-Type": "text/event-stream"})


def cut(played: Played, after: int) -> Played:
    """``played`` whose body breaks off after ``after`` bytes."""
    return Played(played.body, played.status, played.headers, cut=after)


HANG_UP = Played(b"", hang_up=True)


def error(name: str, status: int, **headers: str) -> Played:
    """A recorded error body, with its status."""
    body = (RECORDINGS / name).read_bytes()
    return Played(body, status, {"Content-Type": "application/json", **headers})


class Replay:
    def __init__(
        self,
        *played: Played,
        pages: dict[str, Any] | None = None,
        judge: Callable[[dict[str, Any]], Played | None] | None = None,
    ) -> None:
        self.script: deque[Played] = deque(played)
        self.pages = pages or {}
        self.judge = judge  # may answer a request itself, as a server's own checks would
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.closed = threading.Event()
        # Set once a chat completion's answer has begun (its headers sent): the engine is
        # then waiting on it, so a test can press Stop at that moment without sleeping.
        self.answering = threading.Event()
        replay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                replay._keep("GET", self.path, {})
                page = replay.pages.get(self.path)
                self._send(Played(json.dumps(page).encode(), 200) if page else Played(b"", 404))

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                replay._keep("POST", self.path, body)
                page = replay.pages.get(self.path)
                if page is not None:
                    self._send(Played(json.dumps(page).encode(), 200))
                    return
                if not self.path.endswith("/chat/completions"):
                    self._send(Played(b"", 404))
                    return
                answer = replay.judge(body) if replay.judge else None
                with replay.lock:
                    if answer is None:
                        answer = replay.script.popleft() if replay.script else None
                self._send(
                    answer or Played(b'{"error": {"message": "replay: nothing left"}}', 500),
                    completion=True,
                )

            def _send(self, played: Played, *, completion: bool = False) -> None:
                if played.hang_up:
                    self.close_connection = True
                    return
                self.send_response(played.status)
                for name, value in played.headers.items():
                    self.send_header(name, value)
                if played.cut is not None:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    part = played.body[: played.cut]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))  # no last chunk
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if not played.pace:
                    self.send_header("Content-Length", str(len(played.body)))
                    self.end_headers()
                    self.wfile.write(played.body)
                    self.wfile.flush()
                    if completion:
                        replay.answering.set()
                    return
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.flush()
                if completion:
                    replay.answering.set()
                for event in played.body.split(b"\n\n"):
                    if replay.closed.wait(played.pace):
                        return
                    if event.strip():
                        self.wfile.write(event + b"\n\n")
                        self.wfile.flush()
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _keep(self, method: str, path: str, body: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append({"method": method, "path": path, "body": body})

    @property
    def root(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    @property
    def completions(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests if r["path"].endswith("/chat/completions")]

    def __enter__(self) -> Replay:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed.set()
        self.server.shutdown()
        self.server.server_close()
