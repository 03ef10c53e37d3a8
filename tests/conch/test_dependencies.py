"""Every import is a declared dependency: deptry reads the code's own imports against
pyproject.toml, so a package that only arrives through another one's requirements
(``httpx`` came only through ``openai``, until ``openai`` moved to ``httpx2``) fails
here rather than on a user's fresh machine.

Two readings, as the two README commands install two sets:

- the apps (``conch``, ``chats``, ``together``) against ``[project.dependencies]``,
  what ``conch serve`` has; the ``test`` extra may not be imported there;
- ``tests/`` and ``bench/`` against the dependencies and the ``test`` extra together.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPTRY = Path(sys.executable).with_name("deptry")

APPS: tuple[str, ...] = (".",)  # [tool.deptry] in pyproject.toml leaves out all but the apps
TESTS_AND_BENCHES = (
    "tests",
    "bench",
    # deptry leaves tests/ out by default, and pyproject leaves out bench/: both in here.
    "--exclude",
    r"(^|/)\.venv/",
    "--extend-exclude",
    r"(^|/)__pycache__/",
    # Here the test extra is what is meant (DEP004), and the apps' packages go unused (DEP002).
    "--ignore",
    "DEP002,DEP004",
)


def deptry(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - the venv's own deptry, on this repository
        [str(DEPTRY), "--no-ansi", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("args", [APPS, TESTS_AND_BENCHES], ids=["apps", "tests-and-benches"])
def test_every_import_is_a_declared_dependency(args):
    done = deptry(*args)
    assert done.returncode == 0, f"deptry found undeclared imports:\n{done.stdout}{done.stderr}"
    assert "No dependency issues found" in done.stdout + done.stderr


def test_deptry_fails_on_an_import_pyproject_does_not_declare(tmp_path):
    """The same reading of a copy whose pyproject no longer declares httpx fails: the
    check above can fail."""
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"httpx>=' in pyproject
    (tmp_path / "pyproject.toml").write_text(
        "\n".join(line for line in pyproject.splitlines() if '"httpx>=' not in line)
    )
    engines = tmp_path / "chats" / "engines"
    engines.mkdir(parents=True)
    (tmp_path / "chats" / "__init__.py").write_text("")
    (engines / "__init__.py").write_text("")
    (engines / "http.py").write_text((REPO / "chats" / "engines" / "http.py").read_text())
    done = deptry(".", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "'httpx' imported but" in done.stdout + done.stderr
