"""mypy, with django-stubs, passes over conch/, chats/ and together/ (pyproject's [tool.mypy])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_passes_over_the_apps():
    found = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-error-summary",
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert found.returncode == 0, found.stdout + found.stderr


def test_mypy_would_say_so_if_a_type_were_wrong(tmp_path):
    # The same configuration on a module with a wrong type fails: the check above can fail.
    broken = tmp_path / "broken.py"
    broken.write_text("from chats.models import Conversation\n\nn: int = Conversation().title\n")
    found = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-error-summary",
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            str(broken),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert found.returncode == 1
    assert (
        'Incompatible types in assignment (expression has type "str", variable has type "int")'
        in found.stdout
    )
