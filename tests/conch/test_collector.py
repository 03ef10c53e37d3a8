"""The collector settled once start-up is done (conch/collector.py).

A full collection walked every object start-up made, 100-190 ms with the GIL held,
every few seconds under load: bench_inbound's p99 at the door.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref
from types import SimpleNamespace

import pytest
from django.core.management import call_command

from chats.management.commands import worker
from conch import collector


@pytest.fixture
def thawed():
    """This test process's objects go back to the collector afterwards."""
    yield
    gc.unfreeze()


class Made:
    """Something to track: instances of a class of one's own are tracked by gc."""


def test_settle_takes_what_start_up_made_out_of_full_collections(thawed):
    before = Made()
    frozen = collector.settle()

    assert frozen == gc.get_freeze_count() > 0
    # A full collection walks gc.get_objects(); what was there at settle() is not in it.
    assert not any(obj is before for obj in gc.get_objects())
    after = Made()
    assert any(obj is after for obj in gc.get_objects())


def test_a_cycle_made_after_settle_is_still_collected(thawed):
    collector.settle()
    cycle = Made()
    cycle.me = cycle
    gone = weakref.ref(cycle)
    del cycle

    gc.collect()

    assert gone() is None


def test_a_worker_settles_the_collector_once_its_runner_has_started(monkeypatch):
    calls: list[str] = []

    class Runner:
        name, threads, turns_driven = "test-worker", 2, 0

        def __init__(self, **kwargs) -> None:
            pass

        def start(self):
            calls.append("runner started")
            return self

        def stop(self) -> None:
            calls.append("runner stopped")

    class Stop:
        def set(self) -> None:
            pass

        def wait(self, timeout: float) -> bool:
            calls.append("running")
            return True  # a signal came at once

    monkeypatch.setattr(worker, "LoggingRunner", Runner)
    monkeypatch.setattr(worker, "unapplied_migrations", lambda: 0)

    class Connections(dict):
        def close_all(self) -> None:
            pass

    monkeypatch.setattr(worker, "connections", Connections(default=SimpleNamespace(vendor="")))
    monkeypatch.setattr(worker, "threading", SimpleNamespace(Event=Stop))
    monkeypatch.setattr(collector, "settle", lambda: calls.append("collector settled"))
    monkeypatch.setattr(worker.engines, "preload", lambda: calls.append("model SDK imported"))

    call_command("worker")

    assert calls == [
        "runner started",
        "model SDK imported",  # before the collector settles, so that it is frozen too
        "collector settled",
        "running",
        "runner stopped",
    ]


def test_preloading_imports_the_model_sdk_a_reply_would_import_later():
    """What the engine imports at a reply's first call to a model, preload() has imported:
    the server freezes it at start-up, and no full collection walks it afterwards."""
    script = (
        "import sys; from chats import engines; "
        "assert 'openai' not in sys.modules, 'imported before it is asked for'; "
        "engines.preload(); "
        "assert {'openai', 'openai.types.chat'} <= set(sys.modules)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "conch.settings"}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); " + script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
