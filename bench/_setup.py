"""Shared set-up for the benchmarks: a throwaway CONCH_HOME with a fresh SQLite database."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def django_on_fresh_sqlite() -> Path:
    home = Path(tempfile.mkdtemp(prefix="conch-bench-"))
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
