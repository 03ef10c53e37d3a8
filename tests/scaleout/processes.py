"""Running Conch in subprocesses: its own CONCH_HOME, and the database and Redis it is given.

The test process stays on pytest-django's SQLite; what needs PostgreSQL or
Redis runs in a child ``manage.py`` with ``DATABASE_URL`` and ``REDIS_URL`` set.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
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


def wait_until(condition: Callable[[], T], *, timeout: float, what: str) -> T:
    """Poll ``condition`` until it is truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(0.05)
