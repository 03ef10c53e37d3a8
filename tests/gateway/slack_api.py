"""A fake Slack Web API on loopback: records each call and answers as the real one does.

``slack_sdk``'s own ``WebClient`` talks to it, so what is tested is the sender
as it runs. A test may script answers (``answers``, taken in order); past those
the fake behaves: ``auth.test`` names the bot, ``chat.postMessage`` checks the
token, the channel and the text's length, and answers with a ``ts``. Refusals
are Slack's: ``{"ok": false, "error": "<code>"}`` with HTTP 200, and a rate limit
is HTTP 429 with ``Retry-After`` (slack_payloads/SOURCES.md says where from).
"""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TEXT_LIMIT = 40_000
TOKEN = "xoxb-1234-5678-fakefakefake"
BOT_USER = "U0LAN0Z89"
TEAM = "T123ABC456"


def refusal(error: str) -> tuple[int, dict, dict]:
    return 200, {"ok": False, "error": error}, {}


def slow_down(retry_after: int) -> tuple[int, dict, dict]:
    return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(retry_after)}


class FakeSlackApi:
    def __init__(self, *, token: str = TOKEN, channels: tuple[str, ...] = ()) -> None:
        self.token = token
        self.channels = set(channels)  # empty: every channel exists
        self.calls: list[tuple[str, dict, dict]] = []  # (method, body, headers)
        self.answers: list[tuple[int, dict, dict]] = []
        self.text_limit = TEXT_LIMIT
        self._ts = itertools.count(1)
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/"

    def start(self) -> FakeSlackApi:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def posted(self) -> list[dict]:
        return [body for method, body, _ in self.calls if method == "chat.postMessage"]

    def _answer(self, method: str, body: dict, headers: dict) -> tuple[int, dict, dict]:
        with self._lock:
            self.calls.append((method, body, headers))
            if self.answers:
                return self.answers.pop(0)
        if headers.get("authorization") != f"Bearer {self.token}":
            return refusal("invalid_auth")
        if method == "auth.test":
            return (
                200,
                {"ok": True, "url": "https://acme.slack.com/", "team": "Acme", "user": "conch",
                 "team_id": TEAM, "user_id": BOT_USER, "bot_id": "B0LAN0Z89"},
                {},
            )  # fmt: skip
        if method == "chat.postMessage":
            channel, text = body.get("channel"), body.get("text")
            if not channel:
                return refusal("channel_not_found")
            if self.channels and channel not in self.channels:
                return refusal("channel_not_found")
            if not text:
                return refusal("no_text")
            if len(text) > self.text_limit:
                return refusal("msg_too_long")
            ts = f"1700000000.{next(self._ts):06d}"
            message = {"type": "message", "text": text, "user": BOT_USER, "ts": ts}
            if body.get("thread_ts"):
                message["thread_ts"] = body["thread_ts"]
            return 200, {"ok": True, "channel": channel, "ts": ts, "message": message}, {}
        return refusal("unknown_method")

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                method = self.path.rsplit("/", 1)[-1]
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {}
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, answer, extra = fake._answer(method, body, headers)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
