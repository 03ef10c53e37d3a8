"""A loopback server that speaks OpenAI's Chat Completions protocol, for contract tests.

It records every request (path, headers, JSON body) and answers each with the
next scripted response, in order, then by what a judge of its body says, if the
test gave one. A streaming request (``"stream": true``) gets server-sent events:
``data: {chunk}`` lines with content or ``tool_calls`` deltas, then
``data: [DONE]``. A request with nothing left to play gets a 500 naming that, so
a test that under-scripts fails loudly.

Nothing here sleeps: a test that runs replies in another thread waits with
:meth:`FakeOpenAI.wait_for_requests`, on a condition.
"""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Text:
    """An answer in words, streamed in ``pieces`` chunks.

    With a ``gate``, the stream stops after ``gate_after`` pieces until the test
    sets it: what a page shows of a reply half written can be looked at.
    """

    text: str
    pieces: int = 3
    finish_reason: str = "stop"
    gate: threading.Event | None = field(default=None, compare=False)
    gate_after: int = 0


@dataclass(frozen=True)
class Call:
    """One tool call. ``args`` is a dict (sent as JSON) or a raw string sent as it is."""

    name: str
    args: dict[str, Any] | str = field(default_factory=dict)


@dataclass(frozen=True)
class Calls:
    """Tool calls, optionally after some words; each call's arguments arrive in two fragments."""

    calls: tuple[Call, ...]
    text: str = ""


@dataclass(frozen=True)
class Status:
    """An HTTP error with an OpenAI-shaped error body."""

    code: int
    message: str = "error"
    error_code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Drop:
    """Close the connection without answering."""


@dataclass(frozen=True)
class Cut:
    """Stream some words, then close the connection mid-answer."""

    text: str


Response = Text | Calls | Status | Drop | Cut


def calls(*pairs: tuple[str, dict[str, Any] | str], text: str = "") -> Calls:
    return Calls(tuple(Call(name, args) for name, args in pairs), text)


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages", [])

    @property
    def system(self) -> str:
        first = self.messages[0] if self.messages else {}
        return first.get("content", "") if first.get("role") == "system" else ""

    @property
    def authorization(self) -> str:
        return self.headers.get("authorization", "")


def _split(text: str, pieces: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, pieces)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def stream_chunks(response: Text | Calls) -> list[dict[str, Any]]:
    """The chunks a streaming answer is sent as."""
    chunks = [_chunk({"role": "assistant", "content": ""})]
    if isinstance(response, Text):
        chunks += [_chunk({"content": piece}) for piece in _split(response.text, response.pieces)]
        chunks.append(_chunk({}, response.finish_reason))
        return chunks
    chunks += [_chunk({"content": piece}) for piece in _split(response.text, 2)]
    for index, call in enumerate(response.calls):
        raw = call.args if isinstance(call.args, str) else json.dumps(call.args)
        half = len(raw) // 2
        chunks.append(
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": f"call_fake_{index}",
                            "type": "function",
                            "function": {"name": call.name, "arguments": raw[:half]},
                        }
                    ]
                }
            )
        )
        chunks.append(
            _chunk({"tool_calls": [{"index": index, "function": {"arguments": raw[half:]}}]})
        )
    chunks.append(_chunk({}, "tool_calls"))
    return chunks


def whole_completion(response: Text | Calls) -> dict[str, Any]:
    """The same answer, as one non-streaming completion."""
    message: dict[str, Any] = {"role": "assistant", "content": response.text or None}
    finish = response.finish_reason if isinstance(response, Text) else "tool_calls"
    if isinstance(response, Calls):
        message["tool_calls"] = [
            {
                "id": f"call_fake_{i}",
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": c.args if isinstance(c.args, str) else json.dumps(c.args),
                },
            }
            for i, c in enumerate(response.calls)
        ]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class FakeOpenAI:
    """``with FakeOpenAI() as fake: fake.play(Text("hi")); ... fake.requests``"""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._script: deque[Response] = deque()
        self._changed = threading.Condition()
        self._judge: Callable[[dict[str, Any]], Response] | None = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                fake._record(self, {}, take=False)
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": "fake-model"}]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"unparsed": raw.decode("utf-8", "replace")}
                if not self.path.endswith("/chat/completions"):
                    fake._record(self, body, take=False)
                    self._json(404, {"error": {"message": "not found"}})
                    return
                response = fake._record(self, body, take=True)
                if response is None:
                    self._json(500, {"error": {"message": "fake: no scripted response left"}})
                    return
                if isinstance(response, Drop):
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if isinstance(response, Status):
                    error = {"message": response.message, "type": "error"}
                    if response.error_code:
                        error["code"] = response.error_code
                    self._json(response.code, {"error": error}, response.headers)
                    return
                if isinstance(response, Cut):
                    self._start_stream()
                    self._event(_chunk({"role": "assistant", "content": response.text}))
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if body.get("stream"):
                    self._start_stream()
                    for index, chunk in enumerate(stream_chunks(response)):
                        self._event(chunk)
                        gate = getattr(response, "gate", None)
                        if gate is not None and index == response.gate_after:
                            self.wfile.flush()
                            gate.wait(30)
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                    self.close_connection = True
                else:
                    self._json(200, whole_completion(response))

            def _json(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _start_stream(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()

            def _event(self, payload: dict[str, Any]) -> None:
                self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- the test's side -----------------------------------------------------

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def answer_with(self, judge: Callable[[dict[str, Any]], Response]) -> FakeOpenAI:
        """Answer each request the script has nothing left for by what ``judge`` says of its
        body: a test that can't know in advance which request comes when (a recap's, say)."""
        with self._changed:
            self._judge = judge
        return self

    def play(self, *responses: Response) -> FakeOpenAI:
        with self._changed:
            self._script.extend(responses)
        return self

    @property
    def unplayed(self) -> int:
        with self._changed:
            return len(self._script)

    @property
    def completions(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: len(self.requests) >= count, timeout)

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the server's side ---------------------------------------------------

    def _record(
        self, handler: BaseHTTPRequestHandler, body: dict[str, Any], *, take: bool
    ) -> Response | None:
        recorded = Recorded(
            method=handler.command,
            path=handler.path,
            headers={k.lower(): v for k, v in handler.headers.items()},
            body=body,
        )
        with self._changed:
            self.requests.append(recorded)
            response = self._script.popleft() if take and self._script else None
            if take and response is None and self._judge is not None:
                response = self._judge(body)
            self._changed.notify_all()
        return response


def closed_port_url() -> str:
    """A loopback URL where nothing listens: the port was bound, then let go."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
