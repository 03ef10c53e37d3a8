"""What a Conch process that doesn't serve pays to start: every worker, ``migrate``,
``shell``, play and test child starts Django, so its imports are paid hundreds of
times a day (and a dozen times a minute by the test suite).

Two imports are kept out of start-up: Twisted (Daphne's reactor), which only a
serving command runs, and the openai SDK, which only asking a model needs. Each
was about a fifth of a start.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.scaleout.processes import process_env

REPO = Path(__file__).resolve().parents[2]

LOADED = """
import sys, django
django.setup()
import conch.urls  # every view, as a check or a request would load them
print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('twisted', 'openai')}))
"""


def test_a_process_that_does_not_serve_imports_neither_twisted_nor_the_openai_sdk(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", LOADED],
        cwd=REPO,
        env=process_env(tmp_path, DJANGO_SETTINGS_MODULE="conch.settings"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_runserver_is_still_daphnes_asgi_one():
    from django.core.management import get_commands

    assert get_commands()["runserver"] == "daphne"
