"""Conch's shape, held by tests: the import contracts in pyproject.toml, and whose words are whose.

``lint-imports`` checks the contracts (``[tool.importlinter]``): ``chats`` never
imports ``together``, the gateway app uses the runtime only through its public
modules, no package's modules import each other in a circle, and the layers of
``chats``. It runs here so the README's one test command covers it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from together.listing import CHATS_LISTED, LOOKING_AT_CHATS
from together.messages import CHAT_MESSAGE, MESSAGING_A_CHAT

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_the_import_contracts_hold():
    done = subprocess.run(  # noqa: S603 - the venv's own lint-imports, on this repository
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"lint-imports failed:\n{done.stdout}\n{done.stderr}"
    assert "0 broken" in done.stdout


def test_chats_spells_none_of_togethers_words():
    """together adds its families and event types when it is ready; chats never writes them."""
    words = [CHATS_LISTED, CHAT_MESSAGE, LOOKING_AT_CHATS, MESSAGING_A_CHAT]
    found = [
        f"{path.relative_to(REPO)}: {word!r}"
        for path in sorted((REPO / "chats").rglob("*.py"))
        for word in words
        if f'"{word}"' in path.read_text(encoding="utf-8")
    ]
    assert found == []
