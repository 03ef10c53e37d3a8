"""With DEBUG off, every 500 leaves its traceback in CONCH_HOME/logs/errors.log, a 0600 file."""

from __future__ import annotations

import logging
import os
import stat
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from conch.logs import PrivateRotatingFileHandler
from tests.conch.boom_urls import MARKER


def error_log() -> Path:
    return Path(settings.CONCH_HOME) / "logs" / "errors.log"


def written_since(offset: int) -> str:
    for handler in logging.getLogger("django.request").handlers:
        handler.flush()
    path = error_log()
    if not path.exists():
        return ""
    with open(path, encoding="utf-8") as log:
        log.seek(offset)
        return log.read()


def log_size() -> int:
    path = error_log()
    return path.stat().st_size if path.exists() else 0


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_error_log_is_in_conch_homes_logs_folder():
    assert Path(settings.ERROR_LOG) == error_log()
    files = [
        Path(handler.baseFilename)
        for handler in logging.getLogger("django.request").handlers
        if isinstance(handler, PrivateRotatingFileHandler)
    ]
    assert files == [error_log()]


def test_a_500_is_written_to_the_error_log_with_its_traceback(db, settings):
    settings.ROOT_URLCONF = "tests.conch.boom_urls"
    assert not settings.DEBUG
    offset = log_size()

    response = Client(raise_request_exception=False).get("/boom/")

    assert response.status_code == 500
    written = written_since(offset)
    assert "ERROR django.request: Internal Server Error: /boom/" in written
    assert "Traceback (most recent call last):" in written
    assert "in boom" in written  # the frame that failed
    assert f"RuntimeError: {MARKER}" in written
    assert mode(error_log()) == 0o600


def test_a_refusal_is_not_an_error_and_is_not_written(db, settings):
    settings.ROOT_URLCONF = "tests.conch.boom_urls"
    offset = log_size()
    assert Client().get("/static/no-such-file.css").status_code == 404
    assert (
        Client().post("/gateway/inbound", "{}", content_type="application/json").status_code == 401
    )
    assert written_since(offset) == ""


@pytest.mark.parametrize(
    "logger",
    [
        "daphne.server",  # an exception escaping the app, a socket consumer's included
        "chats.runtime.runner",
        "together.waits",
        "conch",
    ],
)
def test_an_error_daphne_or_conch_logs_is_written_with_its_traceback(logger):
    offset = log_size()
    marker = uuid.uuid4().hex
    try:
        raise ValueError(marker)
    except ValueError as exc:
        # As Daphne says it when an application instance ends in an exception.
        logging.getLogger(logger).error("Exception inside application: %s", exc, exc_info=exc)
    for handler in logging.getLogger(logger.split(".")[0]).handlers:
        handler.flush()
    written = written_since(offset)
    assert f"ERROR {logger}: Exception inside application: {marker}" in written
    assert f"ValueError: {marker}" in written and "Traceback" in written


# ---------------------------------------------------------------------------
# The file's mode


@pytest.fixture
def open_umask():
    """The widest umask there is: whatever 0600 the file gets, it gets by itself."""
    old = os.umask(0)
    yield
    os.umask(old)


def emit(handler: logging.Handler, text: str) -> None:
    handler.emit(logging.LogRecord("t", logging.ERROR, __file__, 1, text, None, None))


def test_the_error_log_is_made_readable_by_its_owner_only(tmp_path, open_umask):
    path = tmp_path / "errors.log"
    handler = PrivateRotatingFileHandler(path, delay=True)
    try:
        emit(handler, "one")
    finally:
        handler.close()
    assert mode(path) == 0o600


def test_an_older_error_log_is_narrowed_when_opened(tmp_path, open_umask):
    path = tmp_path / "errors.log"
    path.write_text("from before\n")
    path.chmod(0o644)
    handler = PrivateRotatingFileHandler(path)
    handler.close()
    assert mode(path) == 0o600
    assert path.read_text() == "from before\n"  # appended to, never truncated


def test_a_rolled_over_error_log_is_still_its_owners_only(tmp_path, open_umask):
    path = tmp_path / "errors.log"
    handler = PrivateRotatingFileHandler(path, maxBytes=64, backupCount=2)
    try:
        for n in range(6):
            emit(handler, f"error number {n} " * 4)
    finally:
        handler.close()
    rolled = sorted(tmp_path.glob("errors.log*"))
    assert len(rolled) == 3
    assert {mode(p) for p in rolled} == {0o600}
