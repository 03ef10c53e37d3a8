"""A fake Telegram Bot API on loopback: records each call and answers as the real one does.

A test may script answers (``answers``, taken in order); past those, the fake
behaves: ``getMe`` names the bot, and ``sendMessage`` refuses what the real
API refuses, with its status, ``description`` and ``parameters``, in the order
the real server checks them (the chat, then the thread, then the text). The
words and shapes are the real server's; telegram_updates/SOURCES.md says where
each comes from (tdlib/telegram-bot-api's Client.cpp and Query.cpp, and
recorded answers in nutgram's test fixtures).
"""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TEXT_LIMIT = 4096  # UTF-16 units: the conservative reading of Telegram's count

# The real descriptions, word for word.
TOO_LONG = "Bad Request: message is too long"
TEXT_EMPTY = "Bad Request: message text is empty"
UPGRADED = "Bad Request: group chat was upgraded to a supergroup chat"
BLOCKED = "Forbidden: bot was blocked by the user"
THREAD_NOT_FOUND = "Bad Request: message thread not found"
CHAT_NOT_FOUND = "Bad Request: chat not found"


def refusal(status: int, description: str, **parameters) -> tuple[int, dict]:
    """An error as the Bot API writes it (Query.h's JsonQueryError)."""
    answer: dict = {"ok": False, "error_code": status, "description": description}
    if parameters:
        answer["parameters"] = parameters
    return status, answer


def slow_down(retry_after: int) -> tuple[int, dict]:
    """A flood wait, as Query::set_retry_after_error writes it."""
    return refusal(429, f"Too Many Requests: retry after {retry_after}", retry_after=retry_after)


def utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _chat(value) -> int | str:
    try:
        return int(value)
    except (TypeError, ValueError):
        return str(value)


class FakeBotApi:
    def __init__(self, *, username: str = "conch_test_bot") -> None:
        self.username = username
        self.calls: list[tuple[str, dict]] = []
        self.answers: list[tuple[int, dict]] = []  # scripted, taken in order; then the fake behaves
        self.refused: list[tuple[dict, int, dict]] = []  # (body, status, answer) of each refusal
        self.text_limit = TEXT_LIMIT
        self.migrated: dict[int, int] = {}  # a group's old id → its supergroup's
        self.blocked: set[int] = set()  # users who blocked the bot
        self.unknown: set[int] = set()  # chats the bot can't see
        self.forums: dict[int, set[int]] = {}  # a forum supergroup → its live topics
        self.called = threading.Event()
        self._lock = threading.Lock()
        self._ids = itertools.count(1000)
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                method = self.path.rsplit("/", 1)[-1]
                with api._lock:
                    api.calls.append((self.path, body))
                    if api.answers:
                        status, answer = api.answers.pop(0)
                    else:
                        status, answer = api.answer(method, body)
                    if status != 200:
                        api.refused.append((body, status, answer))
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                api.called.set()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, method: str, body: dict) -> tuple[int, dict]:
        if method == "getMe":
            me = {
                "id": 7000000001,
                "is_bot": True,
                "first_name": "Conch",
                "username": self.username,
                "can_join_groups": True,
                "can_read_all_group_messages": False,
                "supports_inline_queries": False,
            }
            return 200, {"ok": True, "result": me}
        if method != "sendMessage":
            return 200, {"ok": True, "result": True}
        chat = _chat(body.get("chat_id"))
        if chat in self.unknown:
            return refusal(400, CHAT_NOT_FOUND)
        if chat in self.migrated:
            return refusal(400, UPGRADED, migrate_to_chat_id=self.migrated[chat])
        if chat in self.blocked:
            return refusal(403, BLOCKED)
        thread = body.get("message_thread_id")
        if thread is not None and chat in self.forums and _chat(thread) not in self.forums[chat]:
            return refusal(400, THREAD_NOT_FOUND)
        text = body.get("text") or ""
        if not text.strip():
            return refusal(400, TEXT_EMPTY)
        if utf16_units(text) > self.text_limit:
            return refusal(400, TOO_LONG)
        sent = {
            "message_id": next(self._ids),
            "from": {"id": 7000000001, "is_bot": True, "first_name": "Conch"},
            "chat": {
                "id": chat,
                "type": "private" if isinstance(chat, int) and chat > 0 else "supergroup",
            },
            "date": 1704564400,
            "text": text,
        }
        return 200, {"ok": True, "result": sent}

    def sent(self) -> list[dict]:
        """The bodies of the sendMessage calls that went through."""
        refused = [id(body) for body, _, _ in self.refused]
        return [
            body
            for path, body in self.calls
            if path.endswith("/sendMessage") and id(body) not in refused
        ]

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeBotApi:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
