"""Conch's folder and files at rest: the owner's alone.

Each test runs the real ``conch`` command in a child process with a CONCH_HOME
of its own, as a person would on their machine.
"""

from __future__ import annotations

import json
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scaleout.processes import REPO, process_env

API_KEY = "hunter2-correct-horse-battery"
BOT_TOKEN = "123456:very-secret-bot-token-abcdefghijklmnop"

# Run in a child `conch shell`: migrate, save an auth profile and a bot token, and say
# what modes the database's files have while the connection holds them open.
SAVE_SECRETS = f"""
import json, os, stat
from django.conf import settings
from django.core.management import call_command
from django.contrib.auth import get_user_model
from django.db import connection
from chats.models import Agent, AuthProfile
from chats.gateway.models import ChannelAccount

call_command("migrate", interactive=False, verbosity=0)
owner = get_user_model().objects.create(username="owner")
agent = Agent.objects.create(slug="main-persona", name="Main", workspace="/tmp")
AuthProfile.objects.create(agent=agent, name="deploy-profile", secret={API_KEY!r})
ChannelAccount.objects.create(owner=owner, channel="telegram", account_id="mybot",
                              secret={BOT_TOKEN!r})
database = str(settings.DATABASES["default"]["NAME"])
modes = {{}}
for suffix in ("", "-wal", "-shm"):
    path = database + suffix
    modes[suffix or "db"] = oct(stat.S_IMODE(os.stat(path).st_mode)) if os.path.exists(path) else None
print(json.dumps(modes))
"""

READ_SECRETS = """
import json
from chats.models import AuthProfile
from chats.gateway.models import ChannelAccount
profile, account = AuthProfile.objects.get(), ChannelAccount.objects.get()
print(json.dumps({"profile": profile.secret, "account": account.secret,
                  "error": getattr(profile.secret, "error", ""), "masked": profile.masked}))
"""


def conch(*args: str, env: dict[str, str], umask: int = -1) -> subprocess.CompletedProcess:
    done = subprocess.run(  # noqa: S603 - our own interpreter and command
        [sys.executable, "-m", "conch.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        umask=umask,
    )
    assert done.returncode == 0, f"conch {args[0]} exited {done.returncode}\n{done.stderr}"
    return done


def mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """A child's environment with no CONCH_SECRET_KEY: it makes its own secret_key file."""
    environ = process_env(tmp_path / "home")
    del environ["CONCH_SECRET_KEY"]
    return environ


# ---------------------------------------------------------------------------
# Permissions


def test_a_fresh_home_and_everything_in_it_are_the_owners_alone_whatever_the_umask(tmp_path, env):
    home = tmp_path / "home"

    saved = conch("shell", "-c", SAVE_SECRETS, env=env, umask=0)

    # While the connection is open SQLite has its -wal and -shm files: made with the db's mode.
    assert json.loads(saved.stdout.strip().splitlines()[-1]) == {
        "db": "0o600",
        "-wal": "0o600",
        "-shm": "0o600",
    }
    assert {name: mode(home / name) for name in ("", "logs", "workspaces")} == dict.fromkeys(
        ("", "logs", "workspaces"), "0o700"
    )
    for name in ("conch.sqlite3", "secret_key"):
        assert mode(home / name) == "0o600", name


def test_an_old_install_readable_by_everyone_is_made_private_when_conch_starts(tmp_path, env):
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    (home / "workspaces" / "default").mkdir(parents=True)
    (home / "logs" / "conch.log").write_text("an old log line\n")
    (home / "secret_key").write_text("an-old-django-secret-key")
    # An old database in WAL mode, held open so its -wal and -shm are there too.
    held = sqlite3.connect(home / "conch.sqlite3")
    try:
        held.execute("PRAGMA journal_mode=WAL")
        held.execute("CREATE TABLE t (x)")
        held.execute("INSERT INTO t VALUES (1)")
        held.commit()
        files = [home / f"conch.sqlite3{suffix}" for suffix in ("", "-wal", "-shm")]
        files += [home / "logs" / "conch.log", home / "secret_key"]
        folders = [home, home / "logs", home / "workspaces"]
        for path in files:
            path.chmod(0o644)
        for path in folders:
            path.chmod(0o755)

        conch("check", env=env)

        assert {str(p): mode(p) for p in files} == {str(p): "0o600" for p in files}
        assert {str(p): mode(p) for p in folders} == {str(p): "0o700" for p in folders}
        assert held.execute("SELECT x FROM t").fetchall() == [(1,)]
    finally:
        held.close()
