"""/static/ as ``conch serve`` serves it: files from the static folders, and nothing above them."""

from __future__ import annotations

import pytest
from asgiref.testing import ApplicationCommunicator
from django.conf import settings

from conch.asgi import application
from conch.static import StaticFiles

# Each climbs to the project's own folder, where pyproject.toml really is.
CLIMBS = [
    "/static/%2e%2e/pyproject.toml",
    "/static/%2E%2E/pyproject.toml",
    "/static/..%2fpyproject.toml",
    "/static/.%2e/pyproject.toml",
    "/static/admin/%2e%2e/%2e%2e/pyproject.toml",
    "/static/admin/../../pyproject.toml",
    "/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/static/..%2f..%2f..%2f..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
    "/static/%2e%2e%5c%2e%2e%5cpyproject.toml",
    "/static/%2e%2e",
    "/static/%2e%2e/",
    "/static/a%00b",
]


async def fetch(path: str) -> tuple[int, bytes]:
    """GET ``path`` as Daphne would hand it over: the path decoded, the raw path kept."""
    from urllib.parse import unquote

    communicator = ApplicationCommunicator(
        StaticFiles(application),
        {
            "type": "http",
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": unquote(path),
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": [(b"host", b"127.0.0.1")],
            "server": ("127.0.0.1", 8000),
            "client": ("127.0.0.1", 50000),
        },
    )
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(timeout=5)
    assert start["type"] == "http.response.start", start
    body = b""
    while True:
        part = await communicator.receive_output(timeout=5)
        body += part.get("body", b"")
        if not part.get("more_body"):
            break
    await communicator.wait(timeout=5)
    return start["status"], body


@pytest.mark.parametrize("path", CLIMBS)
async def test_a_path_that_climbs_out_of_the_static_folders_is_a_404(path):
    assert (settings.BASE_DIR / "pyproject.toml").exists()  # there is something to reach
    status, body = await fetch(path)
    assert status == 404, path
    assert b"[project]" not in body and b"root:" not in body


async def test_a_static_file_is_still_served():
    status, body = await fetch("/static/admin/css/base.css")
    assert status == 200
    assert b"{" in body
