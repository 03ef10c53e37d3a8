"""Shared set-up for the benchmarks: a throwaway CONCH_HOME with a fresh SQLite database.

A throwaway home is removed however the bench ends: when it returns, when it
fails, on Ctrl-C and on ``kill`` (SIGTERM). Bench stores are big (a
100,000-chat one is over 100 MB), and 67 left behind once filled /tmp with
932 MB.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

PREFIX = "conch-bench-"


def _remove(home: Path) -> None:
    shutil.rmtree(home, ignore_errors=True)


def _exit_on_sigterm() -> None:
    """``kill`` ends the bench as Ctrl-C does, by unwinding (finally blocks, then atexit),
    rather than by dying on the spot and leaving its home behind."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def throwaway_home(prefix: str = PREFIX) -> Path:
    """A fresh directory for a CONCH_HOME, removed when this process ends, however it ends
    (but for SIGKILL). A bench that is done with it earlier removes it in a ``finally``."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(_remove, home)
    _exit_on_sigterm()
    return home


def django_on_fresh_sqlite() -> Path:
    home = throwaway_home()
    os.environ["CONCH_HOME"] = str(home)
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conch.settings")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return home


def median_ms(fn: Callable[[], object], *, runs: int = 200, warmup: int = 20) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)
