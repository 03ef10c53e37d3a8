"""Running Conch in subprocesses: its own CONCH_HOME, and the database and Redis it is given.

The test process stays on pytest-django's SQLite; what needs PostgreSQL or
Redis runs in a child ``manage.py`` with ``DATABASE_URL`` and ``REDIS_URL`` set.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
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
