"""Real Daphne, real Chromium: the fixtures the browser tests share.

pytest-django's ``live_server`` is WSGI and has no WebSockets, so the server
here is ``tests/browser/server.py`` in a subprocess: Daphne with the embedded
runner, on a free loopback port, against the same test database as this
process. With SQLite that database must be a file both processes open, so
this module points the test database at one (before it is created).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
START_TIMEOUT = 30

BROWSER_HOME = Path(tempfile.mkdtemp(prefix="conch-browser-home-"))
atexit.register(shutil.rmtree, BROWSER_HOME, ignore_errors=True)  # after the test database goes
_database = settings.DATABASES["default"]
if _database["ENGINE"].endswith("sqlite3"):
    # The server's settings put the database at CONCH_HOME/conch.sqlite3.
    _database.setdefault("TEST", {})["NAME"] = str(BROWSER_HOME / "conch.sqlite3")


def _database_env() -> dict[str, str]:
    """What the server process needs to open the very database the tests use."""
    conn = connections["default"].settings_dict
    if conn["ENGINE"].endswith("sqlite3"):
        assert Path(conn["NAME"]) == BROWSER_HOME / "conch.sqlite3", conn["NAME"]
        return {"CONCH_HOME": str(BROWSER_HOME), "DATABASE_URL": ""}
    if "postgresql" in conn["ENGINE"]:
        from urllib.parse import quote

        auth = quote(conn["USER"] or "")
        if conn["PASSWORD"]:
            auth += ":" + quote(conn["PASSWORD"])
        host = conn["HOST"] or "localhost"
        port = f":{conn['PORT']}" if conn["PORT"] else ""
        url = f"postgres://{auth}@{host}{port}/{conn['NAME']}"
        return {"CONCH_HOME": str(BROWSER_HOME), "DATABASE_URL": url}
    raise AssertionError(f"the browser tests can't share a {conn['ENGINE']} database")


@dataclass
class ConchServer:
    """A ``tests.browser.server`` subprocess; ``restart()`` brings it back on the same port."""

    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    process: subprocess.Popen | None = None
    output: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ConchServer:
        env = {
            **os.environ,
            **_database_env(),
            "CONCH_SECRET_KEY": settings.SECRET_KEY,
            "CONCH_LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
            **self.env,
        }
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        command = [
            sys.executable,
            "-m",
            "tests.browser.server",
            "--port",
            str(self.port),
            *self.args,
        ]
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        listening = threading.Event()

        def read() -> None:
            assert self.process is not None and self.process.stdout is not None
            for line in self.process.stdout:
                self.output.append(line)
                match = re.match(r"listening (\d+)", line)
                if match:
                    self.port = int(match.group(1))
                    listening.set()

        threading.Thread(target=read, daemon=True).start()
        if not listening.wait(START_TIMEOUT):
            self.stop()
            raise RuntimeError("the test server did not start:\n" + "".join(self.output))
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


def _start(
    django_db_setup, django_db_blocker, *args: str, env: dict[str, str] | None = None
) -> Iterator[ConchServer]:
    with django_db_blocker.unblock():
        server = ConchServer(list(args), dict(env or {})).start()
    try:
        yield server
    finally:
        server.stop()
        with django_db_blocker.unblock():
            _wait_for_its_sessions_to_end()


def _wait_for_its_sessions_to_end(timeout: float = 10.0) -> None:
    """PostgreSQL ends a dead process's sessions a moment after it exits; the test
    database can only be dropped once they are gone. PostgreSQL waits for each to end
    itself (``pg_terminate_backend`` with a timeout, in milliseconds): the process that
    held them is gone, so ending them takes nothing from anyone."""
    connection = connections["default"]
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, pg_terminate_backend(pid, %s) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()",
            [int(timeout * 1000)],
        )
        left = [pid for pid, ended in cursor.fetchall() if not ended]
    assert not left, f"sessions {left} of the stopped server did not end in {timeout:g} s"


@pytest.fixture(scope="package")
def conch_server(django_db_setup, django_db_blocker) -> Iterator[ConchServer]:
    """The server most tests use: settings' websocket_timeout, with the runner.

    Package-scoped: it stops after the last browser test, before its runner
    could claim the replies of the tests that run after these on the same database.
    """
    yield from _start(django_db_setup, django_db_blocker)


@pytest.fixture
def short_lived_server(django_db_setup, django_db_blocker) -> Iterator[ConchServer]:
    """A second server whose sockets Daphne closes after 2 seconds; no runner of its own."""
    yield from _start(django_db_setup, django_db_blocker, "--websocket-timeout", "2", "--no-runner")


@pytest.fixture(scope="package")
def chromium():
    """One Chromium for all the browser tests this process runs (each pytest-xdist
    worker has its own); each test gets a fresh context of it (``browser_context``),
    with its own cookies, storage and pages, as pytest-playwright does.

    Playwright's sync API keeps an event loop running in this thread while it is up,
    and Django refuses ORM calls from a thread with a running loop. The browser
    tests' own ORM calls, and the flush after each of them, are plain sync code all
    the same: ``DJANGO_ALLOW_ASYNC_UNSAFE`` says so for as long as the browser is up,
    and the package scope stops it after this process's last browser test, before
    any other test runs here.
    """
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"The browser tests drive Chromium at {CHROMIUM}; install it.")
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                headless=True,
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            yield browser
            browser.close()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture(autouse=True)
def _no_sockets_in_this_process(settings):
    """The pages listen to the server process. What the test itself changes reaches
    them only by the page fetching again, as after a lost event."""
    settings.CHANNEL_LAYERS = {}


@dataclass
class Tab:
    """A page, and what it asked for and complained about."""

    page: object
    requests: list[str] = field(default_factory=list)
    csp_violations: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


def watch(page) -> Tab:
    tab = Tab(page)
    page.on("request", lambda request: tab.requests.append(request.url))
    page.on(
        "console",
        lambda message: (
            tab.csp_violations.append(message.text)
            if "Content Security Policy" in message.text
            else None
        ),
    )

    def on_dialog(dialog) -> None:
        tab.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    return tab


@dataclass
class Console:
    """Every console error and uncaught exception of every page a test opens.

    A test that means to cause one (a page that is offline on purpose) says
    which with :meth:`allow`; anything else fails the test at its teardown.
    """

    errors: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    def watch(self, page) -> None:
        page.on(
            "console",
            lambda message: (
                self.errors.append(f"console.error: {message.text} ({_where(message)})")
                if message.type == "error"
                else None
            ),
        )
        page.on("pageerror", lambda error: self.errors.append(f"pageerror: {error}"))

    def allow(self, pattern: str) -> None:
        self.allowed.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.allowed)]


def _where(message) -> str:
    location = message.location or {}
    return f"{location.get('url', '')}:{location.get('lineNumber', '')}"


@pytest.fixture
def console() -> Console:
    """The console of the test's browser context; ``browser_context`` fills it."""
    return Console()


@pytest.fixture
def browser_context_args() -> dict:
    """More of the context's settings, as pytest-playwright's fixture of this name: a test
    module overrides it (a time zone of the browser's own)."""
    return {}


@pytest.fixture
def browser_context(chromium, console, browser_context_args):
    from playwright.sync_api import expect

    expect.set_options(timeout=10_000)
    context = chromium.new_context(
        color_scheme="light", viewport={"width": 1280, "height": 800}, **browser_context_args
    )
    context.set_default_timeout(10_000)
    context.on("page", console.watch)  # every page of the context, however it was opened
    yield context
    context.close()
    # While Playwright's loop runs, the test's ORM calls get connections of their
    # own (Django keeps them per context); close them here, where they were made.
    connections.close_all()
    unexpected = console.unexpected()
    assert not unexpected, "the page logged errors:\n" + "\n".join(unexpected)


@pytest.fixture
def sign_in(owner, conch_server):
    """Open a sign-in link, as the one ``conch serve`` prints, in ``tab``."""
    from chats.signin import signin_link_create

    def sign_in_tab(tab: Tab, server: ConchServer | None = None) -> None:
        token = signin_link_create(user=owner)
        tab.page.goto(f"{(server or conch_server).url}/signin/{token}/")

    return sign_in_tab


@pytest.fixture
def tab(browser_context) -> Iterator[Tab]:
    watched = watch(browser_context.new_page())
    yield watched
    assert watched.csp_violations == []


@pytest.fixture
def fake_model(agent, settings):
    """A loopback OpenAI-compatible server (tests/engines/fake_openai.py) that the persona
    ``agent`` answers with; ``fake_model.play(...)`` says what it sends."""
    from tests.engines.conftest import use_model
    from tests.engines.fake_openai import FakeOpenAI

    settings.CONCH_HOME = str(BROWSER_HOME)  # the key sealing the model's key is the server's too
    with FakeOpenAI() as fake:
        use_model(agent, fake.base_url)
        yield fake
