"""Running Conch in subprocesses: its own CONCH_HOME, and the database and Redis it is given.

The test process stays on pytest-django's SQLite; what needs PostgreSQL or
Redis runs in a child ``manage.py`` with ``DATABASE_URL`` and ``REDIS_URL`` set.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[2]
MANAGE = REPO / "manage.py"
_OURS = ("CONCH_", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")

T = TypeVar("T")


def process_env(home: Path, **overrides: str) -> dict[str, str]:
    """The environment for a child Conch: nothing of this process's Conch settings leaks in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OURS)}
    env.update(
        CONCH_HOME=str(home),
        CONCH_SECRET_KEY="scaleout-tests-are-not-secret",
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


def manage(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(MANAGE), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def manage_ok(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    done = manage(*args, env=env, timeout=timeout)
    assert done.returncode == 0, (
        f"manage.py {' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    return done


# How often a condition on another process's doing is checked again: nothing tells us.
RECHECK = 0.05


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float,
    what: str,
    watch: Sequence[subprocess.Popen] = (),
) -> T:
    """Check ``condition`` until it is truthy; fail naming ``what`` after ``timeout`` seconds.

    What it waits for is another process's doing (a row it writes, a line in its log),
    which sends no word here, so it is checked again every :data:`RECHECK` seconds. In
    between, this waits on what does send word: the ending of the processes in ``watch``,
    the ones the condition needs. One that ends before the condition holds fails the wait
    at once, with its exit status, rather than after the whole timeout.
    """
    deadline = time.monotonic() + timeout
    # A pidfd turns readable when its process ends (one already reaped has none to open).
    ends = [os.pidfd_open(process.pid) for process in watch if process.returncode is None]
    try:
        while True:
            result = condition()
            if result:
                return result
            for process in watch:
                if process.poll() is not None:
                    raise AssertionError(
                        f"process {process.pid} {process.args} exited with status "
                        f"{process.returncode} while waiting for {what}"
                    )
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")
            select.select(ends, [], [], min(RECHECK, left))
    finally:
        for fd in ends:
            os.close(fd)


class InboundLoad:
    """Messages sent to a server's ``POST /gateway/inbound`` on a few kept-alive connections
    at once, each answered before the next, until the ``with`` block ends or the server goes
    away. ``statuses``: every answer's status, in the order they came."""

    def __init__(self, port: int, token: str, *, senders: int = 4) -> None:
        self.port, self.token = port, token
        self.statuses: list[int] = []
        self._stopping = threading.Event()
        self._senders = [
            threading.Thread(target=self._send, args=(n,), daemon=True) for n in range(senders)
        ]

    def __enter__(self) -> InboundLoad:
        for sender in self._senders:
            sender.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopping.set()
        for sender in self._senders:
            sender.join(15)

    def _send(self, sender: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        n = 0
        try:
            while not self._stopping.is_set():
                n += 1
                body = {"channel": "webhook", "account_id": "default", "peer": f"p{n % 5}",
                        "chat_type": "dm", "message_id": f"{sender}-{n}", "text": "hi"}  # fmt: skip
                connection.request("POST", "/gateway/inbound", json.dumps(body), headers)
                response = connection.getresponse()
                response.read()
                self.statuses.append(response.status)
        except (OSError, http.client.HTTPException):
            pass  # the server went away mid-request
        finally:
            connection.close()


# A load of hundreds of messages a second from a few senders: the gateway's rate limits
# (chats/gateway/floods.py) would turn most away, and these tests are about stopping
# while each is being taken, so a server under load has them lifted.
UNLIMITED = {f"CONCH_INBOUND_PER_{scope}": "1000000" for scope in ("SENDER", "ACCOUNT", "INSTALL")}


def stopped_under_load(server: subprocess.Popen, log: Path, token_command: Sequence[str], *,
                       env: dict[str, str]) -> tuple[int | None, list[int]]:  # fmt: skip
    """SIGTERM ``server`` (started with ``--port 0``; its link in ``log``) while messages
    are coming in: its exit status (None past 20 s, when it is killed) and the answers."""
    try:
        found = wait_until(
            lambda: re.search(r"http://127\.0\.0\.1:(\d+)/", log.read_text()),
            timeout=60,
            what="the server's address",
            watch=[server],
        )
        made = subprocess.run(
            token_command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        )
        assert made.returncode == 0, made.stderr
        assert found is not None
        with InboundLoad(int(found.group(1)), made.stdout.strip()) as load:
            wait_until(
                lambda: len(load.statuses) >= 200, timeout=60, what="messages", watch=[server]
            )
            server.send_signal(signal.SIGTERM)
            try:
                return server.wait(timeout=20), load.statuses
            except subprocess.TimeoutExpired:
                return None, load.statuses
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
