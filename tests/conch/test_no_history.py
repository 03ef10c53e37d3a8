"""Nothing a reader sees names an issue by its number: not the README, the docs, templates,
help texts, error messages, nor code comments, docstrings, test names or scenario texts.

A comment names the rule it keeps, in the ADR's words; the history of who asked for it is in
git and the changelog. Every tracked file of a kind a person reads is walked, and its path
too (a test file's name is a test id). Nothing is excluded: another project's tracker is cited
as ``owner/name#N`` or by its address (``.../issues/N``), neither of which names an issue by a
number in prose, so a citation a source needs stays possible.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The kinds of file a person reads: code, markup, styles, docs, data with prose in it, config.
READ = {
    ".py",
    ".html",
    ".js",
    ".css",
    ".md",
    ".json",
    ".toml",
    ".txt",
    ".cfg",
    ".ini",
    ".in",
    ".yml",
    ".yaml",
    ".sh",
    ".sse",
}
# Folders whose every file is read, whatever its name: the CI's and the maintainers' scripts.
READ_WHOLE = ("/.ci/", "/scripts/", "/bench/", "/scenarios/", "/docs/", "/templates/")

# The word, then an optional number sign, dash, underscore, colon or space, then a number; also
# the plural followed by a list of numbers, and the word run into a name with its number. Not a word that
# merely ends in it ("tissue 3"), nor one it begins ("Issuer1", in a token sample).
NUMBERED_ISSUE = re.compile(r"(?<![a-z])issues?(?:[\s_#:-]|no\.)*\d", re.IGNORECASE)


def read_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30
    ).stdout.decode()
    return [
        path
        for path in listed.split("\0")
        if path
        and (Path(path).suffix in READ or any(part in f"/{path}" for part in READ_WHOLE))
        and (ROOT / path).is_file()
    ]


def numbered_issues(path: str, text: str) -> list[str]:
    found = [f"{path} (its name)"] if NUMBERED_ISSUE.search(path) else []
    if not NUMBERED_ISSUE.search(text):
        return found
    for number, line in enumerate(text.splitlines(), start=1):
        if NUMBERED_ISSUE.search(line):
            found.append(f"{path}:{number}: {line.strip()[:120]}")
    return found


def test_no_file_a_reader_sees_names_an_issue_by_its_number():
    found = []
    for path in read_files():
        text = (ROOT / path).read_bytes().decode("utf-8", errors="replace")
        found += numbered_issues(path, text)
    assert not found, "name the rule instead:\n" + "\n".join(found)


def test_the_walk_reaches_every_kind_a_reader_sees():
    files = read_files()
    for expected in (
        "README.md",
        "templates/base.html",
        "static/conch.css",
        "static/conch.js",
        "scripts/lock",
        ".ci/run",
        "pyproject.toml",
        "docs/scenarios.md",
        "tests/conch/test_no_history.py",
    ):
        assert expected in files
    assert any(path.startswith("scenarios/") and path.endswith(".json") for path in files)


# The samples are put together so this file doesn't name one itself.
WORD = "iss" + "ue"


@pytest.mark.parametrize(
    "line",
    [
        f"{WORD.title()} 12, item 3: a rule",
        f"a rule ({WORD} 12)",
        f"{WORD}s 12 and 13 found",
        f"{WORD} #12",
        f"{WORD}-12",
        f"def test_{WORD}12_scenarios():",
        f"{WORD.upper()} NO. 12",
    ],
)
def test_a_numbered_issue_is_found(line):
    assert numbered_issues("a.py", f"first\n{line}\n") == [f"a.py:2: {line}"]


@pytest.mark.parametrize(
    "line",
    [
        "TokenIssuer1WithAzp",
        "a tissue 3 cells thick",
        "channels_redis#422",
        f"https://github.com/owner/name/{WORD}s/35",
        f"an {WORD} with a number in it",
    ],
)
def test_what_names_no_issue_of_ours_is_left(line):
    assert numbered_issues("a.py", line) == []


def test_a_file_named_for_an_issue_is_found():
    assert numbered_issues(f"tests/test_{WORD}13.py", "") == [f"tests/test_{WORD}13.py (its name)"]
