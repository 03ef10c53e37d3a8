"""The limits of the wait: a timeout is time without progress, and Stop ends any wait."""

from __future__ import annotations

import threading
import time

import pytest

from chats import processes
from chats.engines import openai_compat as oc
from chats.engines.base import EngineError
from chats.engines.openai_compat import retries
from tests.engines.replay import RECORDINGS, Played, Replay, error

STREAM = (RECORDINGS / "llamacpp-inline-think.sse").read_bytes()  # 8 events, then [DONE]


def ask(replay, halt=None, **config):
    settings = {"base_url": replay.base_url, "model": "m", **config}
    return oc.complete(
        oc.ModelConfig(**settings), "", [{"role": "user", "content": "hi"}], agent="a", halt=halt
    )


def halt_once_asked(replay):
    """A Stop pressed once the server has the request: the engine is then waiting on it."""
    halt = threading.Event()

    def press():
        replay.answering.wait(timeout=30)  # the answer has begun: the engine waits on it
        halt.set()

    threading.Thread(target=press, daemon=True).start()
    return halt


@pytest.fixture
def really_waits(monkeypatch):
    """The engine's own pause between tries, not the recorder the other tests use."""
    monkeypatch.setattr(
        retries, "_pause", lambda halt, seconds: (halt or threading.Event()).wait(seconds)
    )


def test_a_slow_answer_that_keeps_coming_is_not_timed_out():
    # 9 events 0.4 s apart: 3.6 s in all, against a 2 s timeout (the margin a loaded
    # machine needs between two events: 1.6 s).
    slow = Played(STREAM, headers={"Content-Type": "text/event-stream"}, pace=0.4)
    with Replay(slow) as replay:
        answer = ask(replay, timeout=2, retries=0)
    assert answer.text == "Hello there!"


def test_an_answer_that_stops_coming_is_timed_out(slept):
    stalled = Played(STREAM, headers={"Content-Type": "text/event-stream"}, pace=3)
    with Replay(stalled) as replay, pytest.raises(EngineError) as failed:
        ask(replay, timeout=1, retries=0)
    assert str(failed.value) == oc.ERR_TIMEOUT.format(url=replay.base_url, seconds=1, tries="1 try")


def test_stop_ends_the_wait_for_an_answer_at_once():
    held = Played(STREAM, headers={"Content-Type": "text/event-stream"}, pace=20)
    with Replay(held) as replay:
        halt = halt_once_asked(replay)
        started = time.monotonic()
        answer = ask(replay, halt=halt, timeout=120, retries=0)
        took = time.monotonic() - started
    assert answer.stopped
    assert len(replay.completions) == 1
    assert took < 10  # not the 20 s a chunk the server holds it, nor the 120 s timeout


def test_stop_ends_the_pause_between_tries(really_waits):
    busy = error("openai-429-rate-limit.json", 429, **{"retry-after": "60"})
    with Replay(busy, busy) as replay:
        halt = halt_once_asked(replay)
        started = time.monotonic()
        answer = ask(replay, halt=halt, retries=3)
        took = time.monotonic() - started
    assert answer.stopped
    assert len(replay.completions) == 1  # never tried again after the Stop
    assert took < 10


def test_a_stop_of_the_turn_sets_the_wait_of_that_turn_only():
    with (
        processes.wait_watched(turn_id=101, worker="w") as mine,
        processes.wait_watched(turn_id=102, worker="w") as other,
    ):
        processes.commands_stop(turn_id=101, reason="You stopped it.")
        assert mine.is_set() and not other.is_set()
        processes.commands_stop(worker="w", reason="shutting down")
        assert other.is_set()
