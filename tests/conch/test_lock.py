"""The lock files the README's commands install from: requirements/run.txt and
requirements/test.txt (written by scripts/lock).

The commands install the project itself with ``--no-deps``, so nothing else would
notice a dependency added to pyproject.toml and not to the lock: these tests do.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.M)


def pins(name: str) -> dict[str, str]:
    text = (REPO / "requirements" / name).read_text()
    return {canonicalize_name(m[1]): m[2] for m in PIN.finditer(text)}


def declared(*, test: bool) -> list[Requirement]:
    found = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    if test:
        found += [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["test"]]
    found += [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]
    return found


@pytest.mark.parametrize(("lock", "test"), [("run.txt", False), ("test.txt", True)])
def test_the_lock_pins_every_declared_dependency_within_its_range(lock, test):
    locked = pins(lock)
    environment = {**default_environment(), "extra": ""}
    wrong = []
    for requirement in declared(test=test):
        if requirement.marker and not requirement.marker.evaluate(environment):
            continue
        version = locked.get(canonicalize_name(requirement.name))
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            wrong.append(f"{requirement} (locked: {version})")
    assert wrong == [], f"requirements/{lock} is stale; run scripts/lock: {wrong}"


def test_run_and_test_locks_agree_on_every_package_they_share():
    run, test = pins("run.txt"), pins("test.txt")
    assert set(run) <= set(test)
    assert {name: (v, test[name]) for name, v in run.items() if test[name] != v} == {}


def test_every_pin_has_hashes():
    for lock in ("run.txt", "test.txt"):
        entries = re.split(r"\n(?=[A-Za-z0-9])", (REPO / "requirements" / lock).read_text())
        unhashed = [e.split()[0] for e in entries if "==" in e and "--hash=sha256:" not in e]
        assert unhashed == [], f"{lock}: {unhashed}"


def test_the_readme_installs_from_the_lock_and_ci_runs_its_first_command():
    readme = (REPO / "README.md").read_text().splitlines()
    first = [line for line in readme if line.endswith(".venv/bin/conch serve --demo")]
    assert len(first) == 1
    assert first[0].startswith("python3 -m venv .venv && ")
    assert "--require-hashes -r requirements/run.txt" in first[0]
    assert "--no-deps --no-build-isolation -e ." in first[0]
    assert "python3 .ci/first_command.py" in (REPO / ".ci" / "run").read_text().splitlines()


def test_this_venv_has_what_the_project_declares():
    """pip's own check: every installed package's requirements are met, Conch's own too."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
