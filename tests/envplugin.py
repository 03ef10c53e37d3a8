"""Loaded with ``-p tests.envplugin`` before Django's settings: the tests get their own
CONCH_HOME, removed when the run ends (one was left in /tmp by every run, keys and all),
and Python keeps its compiled bytecode."""

import atexit
import os
import shutil
import sys
import tempfile
import uuid

import pytest

# A machine may set PYTHONDONTWRITEBYTECODE (this one does). Then every one of the
# suite's processes compiles every module it imports, and pytest rewrites every test
# module's asserts, afresh: the controller and each worker collecting (11.5 s each
# instead of 5.9), and each of the ~170 child processes that start Django (a server, a
# worker, a play, a shell). Here they keep Python's usual __pycache__ (ignored by git)
# instead. A child that must write none, such as a play in its chats' folders, still
# sets the variable for itself.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False

# The run's token, which its pytest-xdist workers inherit: what they share outside the
# run's temporary folder is named by it (tests/scaleout/conftest.py's PostgreSQL template).
os.environ.setdefault("CONCH_TEST_RUN", uuid.uuid4().hex[:10])

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


def pytest_sessionfinish(session) -> None:
    """The controller, once every worker is done, drops the PostgreSQL template they
    shared, if one of them made it."""
    controller = session.config.pluginmanager.getplugin("dsession") is not None
    if not controller or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from tests.scaleout.postgres import database_drop_if_reachable

    database_drop_if_reachable(f"conch_template_{os.environ['CONCH_TEST_RUN']}")
