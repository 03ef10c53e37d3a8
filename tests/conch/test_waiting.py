"""The tests' own wait on other processes (``tests.scaleout.processes.wait_until``): a
condition met is returned, and a process the condition needs that ends first fails the
wait at once, not after its whole timeout."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.scaleout.processes import wait_until


def test_it_returns_what_the_condition_found_once_it_holds():
    ready = time.monotonic() + 0.2
    assert (
        wait_until(lambda: time.monotonic() > ready and "found", timeout=10, what="it") == "found"
    )


def test_a_watched_process_that_ends_fails_the_wait_with_its_status():
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    try:
        with pytest.raises(AssertionError, match=r"exited with status 3 while waiting for a row"):
            wait_until(lambda: False, timeout=60, what="a row", watch=[process])
    finally:
        process.wait(timeout=10)


def test_a_watched_process_that_ended_already_fails_it_too():
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait(timeout=10)  # reaped: no pidfd to open for it
    with pytest.raises(AssertionError, match=r"exited with status 0 while waiting for a line"):
        wait_until(lambda: None, timeout=60, what="a line", watch=[done])


def test_it_gives_up_after_its_timeout_naming_what_it_waited_for():
    with pytest.raises(AssertionError, match=r"gave up after 0.2 s waiting for the reply"):
        wait_until(lambda: False, timeout=0.2, what="the reply")


def test_a_condition_met_as_the_watched_process_ends_is_still_found():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=10)
    assert wait_until(lambda: "done", timeout=10, what="it", watch=[process]) == "done"
