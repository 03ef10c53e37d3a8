"""Loaded with ``-p tests.envplugin`` before Django's settings: the tests get their own CONCH_HOME."""

import os
import tempfile

if not os.environ.get("CONCH_HOME"):
    os.environ["CONCH_HOME"] = tempfile.mkdtemp(prefix="conch-test-home-")
