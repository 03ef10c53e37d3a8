"""Loaded with ``-p tests.envplugin`` before Django's settings: the tests get their own
CONCH_HOME, removed when the run ends (one was left in /tmp by every run, keys and all)."""

import atexit
import os
import shutil
import tempfile

if not os.environ.get("CONCH_HOME"):
    home = tempfile.mkdtemp(prefix="conch-test-home-")
    os.environ["CONCH_HOME"] = home
    atexit.register(shutil.rmtree, home, ignore_errors=True)
