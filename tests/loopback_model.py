"""A model server on a loopback port that answers the way Ollama's OpenAI-compatible API does.

For the Connect a model tests (discovery, the page, ``conch serve --model``, the
browser): a real HTTP server on an ephemeral port, in a thread of the test.

Its bytes follow Ollama's own, not ours:

- ``GET /v1/models``: Ollama's ``ListCompletion`` (ollama/ollama, ``openai/openai.go``):
  ``{"object": "list", "data": [{"id", "object": "model", "created", "owned_by": "library"}]}``.
- ``POST /v1/chat/completions`` with ``"stream": true``: ``text/event-stream``, each
  event one ``data: {chunk}`` line and a blank line, then ``data: [DONE]``. Every chunk
  is a ``chat.completion.chunk`` with ``"system_fingerprint": "fp_ollama"`` and a
  ``delta`` carrying ``"role": "assistant"`` with its piece of ``content``; the last
  has empty content and ``"finish_reason": "stop"``: as recorded from Ollama serving
  qwen2.5-coder in g0t4/ask-openai.nvim, ``lua/ask-openai/backends/ollama/notes/sses.md``,
  and as ``toChunk`` in Ollama's ``openai/openai.go`` writes them.
- Without ``stream``: one ``chat.completion`` (``toChatCompletion`` there), with usage.
- A wrong key gets a 401 with OpenAI's error body, as a hosted API sends it.
- ``pages``: the server's own info endpoints, path to JSON, for GET and POST alike
  (Ollama's ``POST /api/show`` and ``GET /api/ps``, as recorded in
  tests/engines/recordings/), where Conch reads the model's context size.

``hold()`` makes the next streamed answer stop after its first piece until
``release()``: a browser test sees the words arrive while the answer is still
being written, without timing anything.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CREATED = 1744445346  # the recording's own timestamp


class LoopbackModel:
    def __init__(
        self,
        models: Sequence[str] = ("qwen2.5-coder:7b",),
        *,
        answer: Sequence[str] = ("Hello", " from", " the", " loopback", " model."),
        key: str = "",
        pages: dict[str, Any] | None = None,
    ) -> None:
        self.models = tuple(models)
        self.pages = dict(pages or {})
        self.answer = tuple(answer)
        self.key = key
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._held = threading.Event()
        self._held.set()
        self.first_piece_sent = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server._record(self, None)
                if not server._authorized(self):
                    return
                if self.path in server.pages:
                    self._json(200, server.pages[self.path])
                    return
                if self.path.rstrip("/") != "/v1/models":
                    self._json(404, {"error": {"message": "404 page not found"}})
                    return
                data = [
                    {"id": m, "object": "model", "created": CREATED, "owned_by": "library"}
                    for m in server.models
                ]
                self._json(200, {"object": "list", "data": data})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                server._record(self, body)
                if not server._authorized(self):
                    return
                if self.path in server.pages:
                    self._json(200, server.pages[self.path])
                    return
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._json(404, {"error": {"message": "404 page not found"}})
                    return
                model = body.get("model")
                if model not in server.models:
                    self._json(
                        404,
                        {
                            "error": {
                                "message": f'model "{model}" not found, try pulling it first',
                                "type": "api_error",
                                "param": None,
                                "code": None,
                            }
                        },
                    )
                    return
                if body.get("stream"):
                    self._stream(model)
                else:
                    self._json(200, server._completion(model))

            def _stream(self, model: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for number, piece in enumerate(server.answer):
                    self._chunked(_event(_chunk(model, piece, None)))
                    if number == 0:
                        server.first_piece_sent.set()
                        server._held.wait(30)
                self._chunked(_event(_chunk(model, "", "stop")))
                self._chunked(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _chunked(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _json(self, code: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def completions(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    def hold(self) -> None:
        self.first_piece_sent.clear()
        self._held.clear()

    def release(self) -> None:
        self._held.set()

    def _record(self, handler: BaseHTTPRequestHandler, body: dict[str, Any] | None) -> None:
        with self._lock:
            self.requests.append(
                {
                    "method": handler.command,
                    "path": handler.path,
                    "authorization": handler.headers.get("Authorization", ""),
                    "body": body,
                }
            )

    def _authorized(self, handler) -> bool:
        if not self.key or handler.headers.get("Authorization") == f"Bearer {self.key}":
            return True
        error = {
            "message": "Incorrect API key provided.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
        handler._json(401, {"error": error})
        return False

    def _completion(self, model: str) -> dict[str, Any]:
        return {
            "id": "chatcmpl-768",
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "system_fingerprint": "fp_ollama",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "OK"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 31, "completion_tokens": 2, "total_tokens": 33},
        }

    def start(self) -> LoopbackModel:
        self._thread.start()
        return self

    def close(self) -> None:
        self._held.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> LoopbackModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _chunk(model: str, content: str, finish_reason: str | None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-768",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "system_fingerprint": "fp_ollama",
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
    }


def _event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
