"""Loaded with ``-p tests.envplugin`` before Django's settings: the tests get their own
CONCH_HOME, removed when the run ends (one was left in /tmp by every run, keys and all)."""

import atexit
import os
import shutil
import tempfile

import pytest

if not os.environ.get("CONCH_HOME"):
    home = tempfile.mkdtemp(prefix="conch-test-home-")
    os.environ["CONCH_HOME"] = home
    atexit.register(shutil.rmtree, home, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config) -> int | None:
    """``-n auto``: two workers a core. Much of the suite waits rather than computes (a
    server or worker process starting, a socket, the browser, PostgreSQL and Redis), so a
    core has a second worker's work to do while one waits: on two cores, 4 workers ran
    the suite in 347 s where 2 took 380 and 6 took 395. Under load a worker's share of
    the machine is its share of the runnable processes, so more workers also keep the
    suite from being starved. ``-n 0`` still runs it in one process, and
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still says how many ``auto`` is."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own reading of it
    return 2 * (os.cpu_count() or 1)
