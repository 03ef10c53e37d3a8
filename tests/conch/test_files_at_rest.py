"""Conch's folder and files at rest: the owner's alone, with secrets a copied database can't open.

Each test runs the real ``conch`` command in a child process with a CONCH_HOME
of its own, as a person would on their machine.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

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
owner = get_user_model().objects.create(username="owner", is_superuser=True, is_staff=True)
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
    for name in ("conch.sqlite3", "secret_key", "secrets.key"):
        assert mode(home / name) == "0o600", name


def test_an_old_install_readable_by_everyone_is_made_private_when_conch_starts(tmp_path, env):
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    (home / "workspaces" / "default").mkdir(parents=True)
    (home / "logs" / "conch.log").write_text("an old log line\n")
    (home / "secret_key").write_text("an-old-django-secret-key")
    (home / "secrets.key").write_bytes(Fernet.generate_key() + b"\n")
    # An old database in WAL mode, held open so its -wal and -shm are there too.
    held = sqlite3.connect(home / "conch.sqlite3")
    try:
        held.execute("PRAGMA journal_mode=WAL")
        held.execute("CREATE TABLE t (x)")
        held.execute("INSERT INTO t VALUES (1)")
        held.commit()
        files = [home / f"conch.sqlite3{suffix}" for suffix in ("", "-wal", "-shm")]
        files += [home / "logs" / "conch.log", home / "secret_key", home / "secrets.key"]
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


# ---------------------------------------------------------------------------
# Secrets in the database file


def test_a_copy_of_the_database_file_alone_reveals_no_key_or_token(tmp_path, env):
    home = tmp_path / "home"
    conch("shell", "-c", SAVE_SECRETS, env=env)
    stolen = b"".join(p.read_bytes() for p in home.glob("conch.sqlite3*"))

    assert b"deploy-profile" in stolen  # the rows are there, in the clear
    assert API_KEY.encode() not in stolen
    assert BOT_TOKEN.encode() not in stolen
    assert b"very-secret-bot-token" not in stolen

    # The same file in another home, without the key file: nothing opens, and it says why.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for path in home.glob("conch.sqlite3*"):
        shutil.copy(path, elsewhere / path.name)
    read = conch("shell", "-c", READ_SECRETS, env=process_env(elsewhere))
    found = json.loads(read.stdout.strip().splitlines()[-1])
    assert (found["profile"], found["account"]) == ("", "")
    assert f"there is no key file at {elsewhere / 'secrets.key'}" in found["error"]
    assert str(elsewhere / "secrets.key") in found["masked"]

    # With its key file beside it, the same copy opens.
    shutil.copy(home / "secrets.key", elsewhere / "secrets.key")
    read = conch("shell", "-c", READ_SECRETS, env=process_env(elsewhere))
    found = json.loads(read.stdout.strip().splitlines()[-1])
    assert (found["profile"], found["account"]) == (API_KEY, BOT_TOKEN)


def raw_secrets(home: Path) -> list[str]:
    with sqlite3.connect(home / "conch.sqlite3") as db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
        # Bot accounts are the gateway app's own table from gateway.0001 on; the chats app's before.
        accounts = "gateway_channelaccount"
        if accounts not in tables:
            accounts = "chats_channelaccount"
        return [
            row[0]
            for table in ("chats_authprofile", accounts)
            for row in db.execute(f"SELECT secret FROM {table}")  # noqa: S608 - our table names
        ]


def test_migrating_an_existing_install_seals_its_plain_secrets_and_migrating_back_opens_them(
    tmp_path, env
):
    home = tmp_path / "home"
    conch("shell", "-c", SAVE_SECRETS, env=env)
    conch("migrate", "chats", "0003", "--noinput", "-v0", env=env)
    assert raw_secrets(home) == [API_KEY, BOT_TOKEN]  # as an install before sealing had them

    conch("migrate", "--noinput", "-v0", env=env)

    sealed = raw_secrets(home)
    assert all(raw.startswith("fernet:") for raw in sealed)
    assert not {API_KEY, BOT_TOKEN} & {*sealed}
    read = conch("shell", "-c", READ_SECRETS, env=env)
    found = json.loads(read.stdout.strip().splitlines()[-1])
    assert (found["profile"], found["account"]) == (API_KEY, BOT_TOKEN)


def test_a_malformed_conch_secrets_key_stops_start_up_naming_it_and_not_echoing_it(tmp_path):
    done = subprocess.run(  # noqa: S603 - our own interpreter and command
        [sys.executable, "-m", "conch.cli", "check"],
        cwd=REPO,
        env=process_env(tmp_path, CONCH_SECRETS_KEY="not-a-fernet-key-at-all"),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 1
    assert "CONCH_SECRETS_KEY must be Fernet keys" in done.stderr
    assert "not-a-fernet-key-at-all" not in done.stderr


def test_a_test_runs_own_home_is_removed_when_the_run_ends():
    """tests/envplugin.py gives a run with no CONCH_HOME one of its own in the temporary
    folder; it goes when the run does, keys and all: they used to pile up, one a run."""
    env = {k: v for k, v in process_env(Path("unused")).items() if k != "CONCH_HOME"}
    made = subprocess.run(
        [sys.executable, "-c", "import os, tests.envplugin; print(os.environ['CONCH_HOME'])"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    home = Path(made.stdout.strip())
    assert home.name.startswith("conch-test-home-")
    assert not home.exists()
