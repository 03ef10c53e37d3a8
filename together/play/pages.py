"""A scenario's web pages, served on a loopback port while it plays, for ``fetch_page``.

A scenario may carry ``"pages": {"/notes.html": "<html>…</html>"}`` (checked
with the rest in scenario.py). In a chat's script an address is written
``"{pages}/notes.html"``; for the run it becomes
``http://127.0.0.1:<port>/notes.html``, and the report writes the port back
as ``{pages}``, so a play prints the same bytes every time.

Only the play's own child process serves them, and only there, while they
are served, is ``fetch_page`` let reach loopback
(``CONCH_FETCH_ALLOW_PRIVATE``): everywhere else it stays refused.
A page's type follows its name: ``.txt`` is plain text, ``.json`` JSON,
anything else HTML.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from django.conf import settings

from together.play.scenario import Scenario

PAGES_TOKEN = "{pages}"
TYPES = {".txt": "text/plain; charset=utf-8", ".json": "application/json"}
HTML = "text/html; charset=utf-8"


def _content_type(path: str) -> str:
    for suffix, kind in TYPES.items():
        if path.endswith(suffix):
            return kind
    return HTML


def _with_base(value: Any, base: str) -> Any:
    if isinstance(value, str):
        return value.replace(PAGES_TOKEN, base)
    if isinstance(value, list):
        return [_with_base(v, base) for v in value]
    if isinstance(value, dict):
        return {k: _with_base(v, base) for k, v in value.items()}
    return value


@dataclasses.dataclass(frozen=True)
class Served:
    """The scenario with its addresses pointing at the pages, and the way back for the report."""

    scenario: Scenario
    base: str | None

    def unport(self, report: Any) -> Any:
        if self.base is None:
            return report
        if isinstance(report, str):
            return report.replace(self.base, PAGES_TOKEN)
        if isinstance(report, list):
            return [self.unport(v) for v in report]
        if isinstance(report, dict):
            return {k: self.unport(v) for k, v in report.items()}
        return report


@contextlib.contextmanager
def pages_served(scenario: Scenario) -> Iterator[Served]:
    """Serve the scenario's pages on 127.0.0.1 for the length of the play."""
    pages = scenario.pages
    if not pages:
        yield Served(scenario, None)
        return

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            text = pages.get(self.path)
            body = (text if text is not None else "No such page.").encode("utf-8")
            self.send_response(200 if text is not None else 404)
            self.send_header(
                "Content-Type", _content_type(self.path) if text is not None else TYPES[".txt"]
            )
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    allowed = settings.CONCH_FETCH_ALLOW_PRIVATE
    settings.CONCH_FETCH_ALLOW_PRIVATE = True
    try:
        chats = [
            spec.model_copy(update={"script": _with_base(spec.script, base)})
            for spec in scenario.chats
        ]
        yield Served(scenario.model_copy(update={"chats": chats}), base)
    finally:
        settings.CONCH_FETCH_ALLOW_PRIVATE = allowed
        server.shutdown()
        server.server_close()
