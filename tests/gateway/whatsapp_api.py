"""A fake WhatsApp Cloud API (the Graph API) on loopback: records each call and answers
as the real one does.

A test may script answers (``answers``, taken in order); past those, the fake
behaves, checking what the real API checks in its order: the bearer token (a refused
one is a 401, OAuthException 190), the phone number id in the path (Graph's
"Unsupported post request"), throughput (130429) and the pair's rate limit (131056),
the text's length (100, "Param text['body'] must be at most 4096 characters long."),
then the 24-hour window (131047). A message it takes is answered with its wamid,
as ``POST /{phone-number-id}/messages`` is. Every error body is Graph's
``{"error": {"message", "type", "code", "error_subcode", "error_data": {"details"},
"fbtrace_id"}}``; whatsapp_payloads/SOURCES.md says where each one's words come from.

The window is closed for the wa_ids in ``closed``. WhatsApp reports that refusal
either at once or later, as a failed status to the webhook: ``window_later`` makes
the fake take the message and keep that status (``notifications``), for the test
to post, signed, as WhatsApp would.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

PAYLOADS = Path(__file__).parent / "whatsapp_payloads"

TOKEN = "EAAG-test-access-token-SECRET-123"
PHONE_NUMBER_ID = "1122334455667"  # the business number id in pywa's recorded webhooks
DISPLAY_NUMBER = "+972 12-345-6789"
VERIFIED_NAME = "Conch Test"
TEXT_LIMIT = 4096
FBTRACE_ID = "Az8or2yhqkZfEZ-_4Qn_Bam"

# The real words, as recorded or documented (SOURCES.md).
TOKEN_EXPIRED = (
    "Error validating access token: Session has expired on Friday, 26-Apr-24 06:00:00 PDT. "
    "The current time is Sunday, 28-Apr-24 03:40:10 PDT."
)
RATE_LIMIT = "(#130429) Rate limit hit"
RATE_LIMIT_DETAILS = (
    "Message failed to send because there were too many messages sent from this phone "
    "number in a short period of time"
)
PAIR_LIMIT = "(#131056) (Business Account, Consumer Account) pair rate limit hit"
PAIR_LIMIT_DETAILS = (
    "Too many messages sent from the sender phone number to the same recipient phone "
    "number in a short period of time."
)
TOO_LONG = "(#100) Param text['body'] must be at most 4096 characters long."
WINDOW = "(#131047) Re-engagement message"
WINDOW_TITLE = "Re-engagement message"
WINDOW_DETAILS = (
    "Message failed to send because more than 24 hours have passed since the customer "
    "last replied to this number."
)
ERROR_CODES_HREF = "https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes/"


def graph_error(
    status: int,
    message: str,
    code: int,
    *,
    kind: str = "OAuthException",
    subcode: int | None = None,
    details: str | None = None,
) -> tuple[int, dict]:
    """An error as the Graph API writes it."""
    error: dict = {"message": message, "type": kind, "code": code}
    if details is not None:
        error["error_data"] = {"messaging_product": "whatsapp", "details": details}
    if subcode is not None:
        error["error_subcode"] = subcode
    error["fbtrace_id"] = FBTRACE_ID
    return status, {"error": error}


def token_refused() -> tuple[int, dict]:
    return graph_error(401, TOKEN_EXPIRED, 190, subcode=463)


def rate_limited() -> tuple[int, dict]:
    return graph_error(400, RATE_LIMIT, 130429, subcode=2494055, details=RATE_LIMIT_DETAILS)


def pair_limited() -> tuple[int, dict]:
    return graph_error(400, PAIR_LIMIT, 131056, details=PAIR_LIMIT_DETAILS)


def too_long() -> tuple[int, dict]:
    return graph_error(400, TOO_LONG, 100)


def window_closed() -> tuple[int, dict]:
    return graph_error(400, WINDOW, 131047, details=WINDOW_DETAILS)


def unknown_object(object_id: str) -> tuple[int, dict]:
    return graph_error(
        400,
        f"Unsupported post request. Object with ID '{object_id}' does not exist, cannot be "
        "loaded due to missing permissions, or does not support this operation. Please read "
        "the Graph API documentation at https://developers.facebook.com/docs/graph-api",
        100,
        kind="GraphMethodException",
        subcode=33,
    )


def status_notification(wamid: str, status: str, *, recipient: str, errors=None) -> dict:
    """A statuses webhook as WhatsApp sends it, from the recorded one of that status."""
    name = "status_failed" if status == "failed" else f"status_{status}"
    notification = json.loads((PAYLOADS / f"{name}.json").read_text())
    value = notification["entry"][0]["changes"][0]["value"]
    value["contacts"][0]["wa_id"] = recipient
    found = value["statuses"][0]
    found.update(id=wamid, recipient_id=recipient)
    if errors is not None:
        found["errors"] = copy.deepcopy(errors)
    return notification


WINDOW_STATUS_ERRORS = [
    {
        "code": 131047,
        "title": WINDOW_TITLE,
        "message": WINDOW_TITLE,
        "error_data": {"details": WINDOW_DETAILS},
        "href": ERROR_CODES_HREF,
    }
]


class FakeGraphApi:
    def __init__(self, *, token: str = TOKEN, phone_number_id: str = PHONE_NUMBER_ID) -> None:
        self.token = token
        self.phone_number_id = phone_number_id
        # (method, path, Authorization header, body) of each call
        self.calls: list[tuple[str, str, str, dict | None]] = []
        # scripted (status, body) or (status, body, headers), taken in order
        self.answers: list[tuple] = []
        self.refused: list[tuple[dict | None, int, dict]] = []
        self.text_limit = TEXT_LIMIT
        self.throttled = 0  # the next N sends hit the throughput limit
        self.pair_limited: set[str] = set()  # wa_ids sent to too often just now
        self.closed: set[str] = set()  # wa_ids whose 24-hour window is closed
        self.window_later = False  # report a closed window later, as a failed status
        self.notifications: list[dict] = []  # webhooks WhatsApp would send us
        self.called = threading.Event()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                auth = self.headers.get("Authorization", "")
                headers: dict = {}
                with api._lock:
                    api.calls.append((method, self.path, auth, body))
                    if api.answers:
                        status, answer, *rest = api.answers.pop(0)
                        headers = rest[0] if rest else {}
                    else:
                        status, answer = api.answer(method, self.path, auth, body)
                    if status != 200:
                        api.refused.append((body, status, answer))
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
                api.called.set()

            def do_POST(self) -> None:  # noqa: N802
                self._answer("POST")

            def do_GET(self) -> None:  # noqa: N802
                self._answer("GET")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, method: str, path: str, auth: str, body: dict | None) -> tuple[int, dict]:
        if auth != f"Bearer {self.token}":
            return token_refused()
        parts = urlsplit(path).path.strip("/").split("/")
        object_id = parts[0] if parts else ""
        if object_id != self.phone_number_id:
            return unknown_object(object_id)
        if method == "GET":
            return 200, {
                "verified_name": VERIFIED_NAME,
                "display_phone_number": DISPLAY_NUMBER,
                "id": self.phone_number_id,
            }
        body = body or {}
        to = str(body.get("to") or "")
        if self.throttled:
            self.throttled -= 1
            return rate_limited()
        if to in self.pair_limited:
            self.pair_limited.discard(to)
            return pair_limited()
        text = (body.get("text") or {}).get("body") or ""
        if len(text) > self.text_limit:
            return too_long()
        wamid = f"wamid.HBgM{next(self._ids):08d}"
        if to in self.closed:
            if not self.window_later:
                return window_closed()
            self.notifications.append(
                status_notification(wamid, "failed", recipient=to, errors=WINDOW_STATUS_ERRORS)
            )
        return 200, {
            "messaging_product": "whatsapp",
            "contacts": [{"input": to, "wa_id": to}],
            "messages": [{"id": wamid}],
        }

    def sent(self) -> list[dict]:
        """The bodies of the messages WhatsApp took."""
        refused = [id(body) for body, _, _ in self.refused]
        return [
            body
            for method, path, _, body in self.calls
            if method == "POST" and path.endswith("/messages") and id(body) not in refused
        ]

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeGraphApi:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
