"""Docs that can't go stale: what they name is in the code, and what the code has is in them.

- the docs build with Sphinx, warnings as errors, so a broken link, reference or anchor fails;
- every repository path the README, CONTRIBUTING.md, CHANGELOG.md and docs/ write exists;
- every ``conch`` command and option, and every environment variable, is in the reference,
  and everything the reference names is in the code; each bad value it shows gets the
  message it shows;
- every bench command the docs give answers ``--help``, and every bench is in the docs;
- a newcomer gets from the README to a connected model, a Telegram bot and a routine
  by following links alone.
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import get_commands, load_command_class
from django.core.management.base import BaseCommand

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
READ = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "CHANGELOG.md", *PAGES]
COMMANDS_PAGE = DOCS / "reference" / "commands.md"
ENVIRONMENT_PAGE = DOCS / "reference" / "environment.md"
APPS = ("conch", "chats", "together")

# What a path written in the docs starts with, when it is one of the repository's.
ROOTS = (
    ".ci/",
    "bench/",
    "chats/",
    "conch/",
    "docs/",
    "requirements/",
    "scenarios/",
    "scripts/",
    "static/",
    "templates/",
    "tests/",
    "together/",
)
BUILT = "docs/_build"  # where the docs are built to: made by the build, not kept
ROOT_FILES = ("pyproject.toml", "manage.py", "README.md", "CONTRIBUTING.md", "CHANGELOG.md")


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# The docs build -----------------------------------------------------------------------


def sphinx_build(source: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - this venv's Sphinx, on this repository's docs
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html"]
        + ["-d", str(out / "doctrees"), str(source), str(out / "html")],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_docs_build_with_warnings_as_errors(tmp_path):
    done = sphinx_build(DOCS, tmp_path)
    assert done.returncode == 0, done.stderr[-5000:]
    assert (tmp_path / "html" / "reference" / "environment.html").exists()


# Paths ---------------------------------------------------------------------------------


def paths_written(path: Path) -> set[str]:
    """Repository paths in a page: in `code`, in fenced blocks, and as relative links."""
    found: set[str] = set()
    body = text(path)
    words = re.findall(r"`([^`\n]+)`", body) + re.findall(r"```[^\n]*\n(.*?)```", body, re.S)
    for chunk in words:
        for word in re.split(r"[\s,;()'\"=]+", chunk):
            word = word.rstrip(".:")
            if (word.startswith(ROOTS) or word in ROOT_FILES) and not word.startswith(BUILT):
                found.add(word)
    for target in re.findall(r"\]\(([^)\s]+)\)", body):
        target = target.split("#", 1)[0]
        if target and not re.match(r"[a-z]+:", target):
            resolved = (path.parent / target).resolve()
            found.add(str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else target)
    return found


def missing_paths(pages: list[Path]) -> list[str]:
    missing = []
    for page in pages:
        for written in sorted(paths_written(page)):
            if not any(REPO.glob(written)) and not (REPO / written).exists():
                missing.append(f"{page.name}: {written}")
    return missing


def test_every_repository_path_the_docs_write_exists():
    assert missing_paths(READ) == []
    written = set().union(*(paths_written(page) for page in READ))
    assert {"chats/runtime/claims.py", "docs/screenshots/chat-page-light.png"} <= written


def test_a_path_that_no_longer_exists_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("It lives in `chats/runtime/claimz.py`, as [this](../nowhere.md) says.\n")
    assert {line.split(": ", 1)[1] for line in missing_paths([page])} == {
        "chats/runtime/claimz.py",
        "../nowhere.md",
    }


# Commands ------------------------------------------------------------------------------


def conch_commands() -> dict[str, BaseCommand]:
    """Every management command Conch's own apps bring (Django's are Django's to document)."""
    return {
        name: load_command_class(app, name)
        for name, app in get_commands().items()
        if app.split(".")[0] in APPS
    }


# Django's options on every command, documented once rather than in each table.
COMMON = {
    "--help",
    "--version",
    "--verbosity",
    "--settings",
    "--pythonpath",
    "--traceback",
    "--no-color",
    "--force-color",
    "--skip-checks",
}


def options_in_code(command: BaseCommand, name: str) -> set[str]:
    parser = command.create_parser("conch", name)
    found = set()
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:  # the command's own plumbing, not for people
            continue
        if action.option_strings:
            found |= {o for o in action.option_strings if o.startswith("--")} - COMMON
        else:
            found.add((action.metavar or action.dest).upper())
    return found


def sections(page: str) -> dict[str, str]:
    """Each ``### `conch NAME` `` section of the commands page, by NAME."""
    parts = re.split(r"^### `conch (\S+)`\n", page, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def options_in_docs(section: str) -> set[str]:
    found = set()
    for row in re.findall(r"^\| (.+?) \| .+ \|$", section, re.M):
        for cell in re.findall(r"`([^`]+)`", row):
            flag = cell.split()[0]
            if flag.startswith("--") or flag.isupper():
                found.add(flag)
    return found - {"option"}


def test_every_conch_command_and_option_is_in_the_reference_and_no_other():
    commands = conch_commands()
    documented = sections(text(COMMANDS_PAGE))
    assert {"serve", "worker", "discord", "conch_play", "conch_gateway_token"} <= set(commands)
    assert sorted(documented) == sorted(commands)
    differ = {
        name: (options_in_code(command, name), options_in_docs(documented[name]))
        for name, command in commands.items()
        if options_in_code(command, name) != options_in_docs(documented[name])
    }
    assert differ == {}


def test_an_option_the_reference_leaves_out_is_found():
    section = sections(text(COMMANDS_PAGE))["serve"]
    without = "\n".join(line for line in section.splitlines() if "`--demo`" not in line)
    serve = conch_commands()["serve"]
    assert options_in_code(serve, "serve") - options_in_docs(without) == {"--demo"}


# Environment variables -----------------------------------------------------------------


def variables_in_code() -> set[str]:
    """What the apps read (settings' helpers, and CONCH_* named anywhere in them), and the
    knobs the suite reads with a default (``os.environ.get("CONCH_…"``)."""
    names = set(re.findall(r'(?:_env|env\w+)\(\s*"([A-Z_]+)"', text(REPO / "conch/settings.py")))
    for app in APPS:
        for source in (REPO / app).rglob("*.py"):
            names |= set(re.findall(r"[\"'](CONCH_[A-Z_]+)[\"']", text(source)))
    for source in (REPO / "tests").rglob("*.py"):
        names |= set(re.findall(r"environ\.get\(\s*\"(CONCH_[A-Z_]+)\"", text(source)))
    return names


def variable_rows(page: str) -> dict[str, str]:
    return dict(re.findall(r"^\| `([A-Z][A-Z_]+)` \|(.*)$", page, re.M))


def test_every_environment_variable_is_in_the_reference_and_no_other():
    in_code = variables_in_code()
    assert {"DATABASE_URL", "CONCH_MODEL_TIMEOUT", "CONCH_SCALEOUT_TESTS"} <= in_code
    assert sorted(variable_rows(text(ENVIRONMENT_PAGE))) == sorted(in_code)


def test_a_variable_the_reference_leaves_out_is_found():
    page = "\n".join(
        line for line in text(ENVIRONMENT_PAGE).splitlines() if "`CONCH_CRON_LANE`" not in line
    )
    assert variables_in_code() - set(variable_rows(page)) == {"CONCH_CRON_LANE"}


def bad_values() -> list[tuple[str, str, str]]:
    """Each documented bad value: (variable, value, the message the reference shows)."""
    return [
        (name, value, message)
        for name, row in variable_rows(text(ENVIRONMENT_PAGE)).items()
        for value, message in re.findall(r"`([^`]+)`: “([^”]+)”", row.rsplit(" | ", 1)[-1])
    ]


def test_most_variables_show_a_bad_value():
    assert len(bad_values()) >= 30


@pytest.mark.parametrize(("name", "value", "message"), bad_values())
def test_a_bad_value_gets_the_message_the_reference_shows(tmp_path, name, value, message):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCH_")}
    env |= {"CONCH_HOME": str(tmp_path), "DATABASE_URL": "", "REDIS_URL": "", name: value}
    with pytest.MonkeyPatch.context() as patch:
        for key in list(os.environ):
            patch.delenv(key)
        for key, val in env.items():
            patch.setenv(key, val)
        with pytest.raises(ImproperlyConfigured) as refused:
            runpy.run_path(str(REPO / "conch" / "settings.py"))
    assert str(refused.value) in (message, f"{name} {message}")


# Benches -------------------------------------------------------------------------------


def benches_in_docs() -> set[str]:
    return {
        bench for page in READ for bench in re.findall(r"\b(bench/bench_\w+\.py)\b", text(page))
    }


def test_every_bench_is_in_the_docs_and_every_bench_command_answers_help():
    in_docs = benches_in_docs()
    assert in_docs == {str(p.relative_to(REPO)) for p in (REPO / "bench").glob("bench_*.py")}
    failed = {}
    for bench in sorted(in_docs):
        done = subprocess.run(  # noqa: S603 - this repository's bench, asked for its help
            [sys.executable, bench, "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0 or not done.stdout.startswith("usage: "):
            failed[bench] = done.stdout[-300:] + done.stderr[-300:]
    assert failed == {}


# From the README, by links alone -------------------------------------------------------


def links_from(page: Path) -> set[Path]:
    found = set()
    for target in re.findall(r"\]\(([^)\s]+)\)", text(page)):
        target = target.split("#", 1)[0]
        if target.endswith(".md") and not re.match(r"[a-z]+:", target):
            found.add((page.parent / target).resolve())
    # A toctree's entries are links too.
    for block in re.findall(r"```\{toctree\}\n(.*?)```", text(page), re.S):
        for entry in re.findall(r"^([\w/-]+)$", block, re.M):
            found.add((page.parent / f"{entry}.md").resolve())
    return found


def reachable(start: Path) -> set[Path]:
    seen, todo = {start}, [start]
    while todo:
        for linked in links_from(todo.pop()):
            if linked.exists() and linked not in seen:
                seen.add(linked)
                todo.append(linked)
    return seen


def test_a_newcomer_reaches_a_model_a_telegram_bot_and_a_routine_from_the_readme():
    seen = {p.relative_to(REPO) for p in reachable(REPO / "README.md")}
    goals = {
        Path("docs/guides/connect-a-model.md"),
        Path("docs/guides/chat-apps/telegram.md"),
        Path("docs/guides/routines.md"),
    }
    assert goals <= seen
    assert Path("docs/reference/environment.md") in seen
