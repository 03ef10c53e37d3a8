"""Watching a test's own commands from outside: by a marker in their command line, in /proc.

A command inside the sandbox has its own process ids, so ``echo $$`` means
nothing out here; its command line is the same everywhere. Each test sleeps
for a length no other process on the machine uses, and finds it by that.
"""

from __future__ import annotations

import os
import secrets
import select
import shutil
import threading
import time
from pathlib import Path

# A Python for commands to run. Not sys.executable: the test's own venv may sit in
# a folder the sandbox hides (a clone in /tmp), where a command would find nothing.
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"


def command_fetching(url: str) -> dict:
    """A run_command call that reads ``url`` itself, as curl would, and prints the page."""
    code = (
        f"import urllib.request; print(urllib.request.urlopen('{url}', timeout=5).read().decode())"
    )
    return {"tool": "run_command", "args": {"command": f'{PYTHON} -c "{code}"'}}


def sleep_marker() -> str:
    """A sleep length that marks one test's command: ``sleep <it>`` lasts about 30 s."""
    return f"30.{secrets.randbelow(10**8):08d}1"


def processes_running(marker: str) -> list[int]:
    """Live processes whose command line has ``marker`` as a word (a zombie's line is empty)."""
    found = []
    wanted = marker.encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            words = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in words:
            found.append(int(name))
    return found


def wait_until_ended(pids: list[int], timeout: float) -> list[int]:
    """Wait for every process in ``pids`` to end; those still running when time runs out."""
    fds = {}
    for pid in pids:
        try:
            fds[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + timeout
    try:
        while fds:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            readable, _, _ = select.select(list(fds), [], [], left)
            for fd in readable:  # a pidfd turns readable when its process ends
                os.close(fd)
                del fds[fd]
        return sorted(fds.values())
    finally:
        for fd in fds:
            os.close(fd)


def wait_for_fifo(fifo: Path, timeout: float) -> str | None:
    """The first line a writer puts in ``fifo``, or None if none came in time."""
    got: list[str] = []

    def read() -> None:
        with open(fifo) as fh:  # blocks until the command opens it to write
            got.append(fh.read().strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():  # unblock the reader so the thread ends
        with open(fifo, "w"):
            pass
        reader.join(5)
        return None
    return got[0]


def kill_all(marker: str) -> None:
    """Clean-up after a test that failed half-way: nothing it started may outlive it."""
    import signal

    for pid in processes_running(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def drain_in_a_thread(worker: str) -> threading.Thread:
    """A runner on a thread of its own, running the chats' replies as ``worker``, so the
    test's thread is free to stop, delete or watch them meanwhile."""
    from django.db import connection

    from chats.runtime.runner import drain

    def drive() -> None:
        try:
            drain(worker=worker)
        finally:
            connection.close()

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    return driver
