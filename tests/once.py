"""What a test run makes once and its pytest-xdist workers share.

A migrated database costs a child process that starts Django and runs every migration:
several seconds of a core. Made once per worker, four workers paid it four times over
for each of the suite's templates. ``made_once`` is pytest-xdist's own recipe for a
session fixture that runs once: the first worker to ask makes it under a lock in the
run's shared temporary folder, and the others wait for it and read it. Whoever uses it
copies it; nobody changes it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def shared_folder(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The folder every worker of this run shares, or None outside pytest-xdist.

    Under pytest-xdist each worker's base temp is ``pytest-N/popen-gwK``, so its parent
    is this run's alone. Without it the parent holds every run's folders: nothing is
    shared there.
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return tmp_path_factory.getbasetemp().parent


def made_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Path]
) -> Path:
    """What ``make(folder)`` returns, made once for the whole run in a folder of its own.

    The first process to ask makes it while holding the lock; a process that asks
    meanwhile waits, then reads what was made. If ``make`` fails, its error is that
    process's, and the next to ask tries again: only a finished make is recorded.
    """
    shared = shared_folder(tmp_path_factory)
    if shared is None:
        return make(tmp_path_factory.mktemp(name))
    folder = shared / f"made-once-{name}"
    done = shared / f"made-once-{name}.done"
    with open(shared / f"made-once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.is_file():
            return Path(done.read_text())
        shutil.rmtree(folder, ignore_errors=True)  # what a failed make left
        folder.mkdir(mode=0o700)
        made = make(folder)
        done.write_text(str(made))
        return made
