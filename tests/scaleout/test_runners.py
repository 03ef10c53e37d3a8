"""Several runners on one PostgreSQL database: each reply runs exactly once."""

from __future__ import annotations

import collections
import re
import signal
import subprocess
import sys

import pytest

from tests.scaleout.processes import MANAGE, REPO, manage_ok, wait_until

pytestmark = pytest.mark.scaleout

CHATS = 40
CLAIM = re.compile(r"worker (\S+) claimed turn (\d+)")
STARTED = re.compile(r"worker (\S+) started with (\d+) threads")
STOPPED = re.compile(r"worker (\S+) stopped after (\d+) replies")

# Run in a child manage.py: chats whose one reply appends a line to a ledger
# shared by every chat's folder, then edits a file of its own.
SEED = """
import os, pathlib
from django.contrib.auth import get_user_model
from chats.models import Agent
from chats.runtime.chats import conversation_create
from chats.runtime.turns import message_send

shared = pathlib.Path(os.environ["SEED_FOLDER"])
owner = get_user_model().objects.create(username="scaleout", is_superuser=True, is_staff=True)
agent = Agent.objects.create(slug="main", name="Conch", workspace=str(shared), is_default=True)
for n in range(int(os.environ["SEED_CHATS"])):
    name = f"chat-{n:02d}"
    folder = shared / name
    folder.mkdir()
    (folder / "note.txt").write_text("edits: 0\\n")
    chat = conversation_create(
        owner=owner, agent=agent, title=name, folder=str(folder),
        script=[[
            {"tool": "run_command", "args": {"command": f"echo {name} >> ../ledger.txt"}},
            {"tool": "edit_file", "args": {"path": "note.txt", "old": "edits: 0", "new": "edits: 1"}},
            {"say": "Done.", "delay": 0.2},
        ]],
    )
    message_send(conversation=chat, text="go")
"""


def _start_worker(env: dict[str, str], log_path) -> subprocess.Popen:
    log = open(log_path, "w")  # noqa: SIM115 - closed by the test's cleanup below
    process = subprocess.Popen(
        [sys.executable, str(MANAGE), "worker"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    log.close()  # the child has its own descriptor
    return process


def _turns(scaleout) -> list[tuple]:
    with scaleout.connect() as conn:
        return conn.execute(
            "SELECT t.id, c.title, t.state, t.ended_at IS NOT NULL"
            " FROM chats_turn t JOIN chats_conversation c ON c.id = t.conversation_id"
            " ORDER BY t.id"
        ).fetchall()


# The ledger lies beside the chats' folders, where a sandboxed command can't write:
# these tests are about claims, so their commands run plainly.
NO_SANDBOX = {"CONCH_SANDBOX": "off"}


def test_two_workers_never_run_one_reply_twice(scaleout, tmp_path):
    env = {**scaleout.env, "CONCH_RUNNER_THREADS": "4", **NO_SANDBOX}
    shared = tmp_path / "shared"
    shared.mkdir()

    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    workers = [_start_worker(env, path) for path in logs]
    try:
        # Both are up before there is work, so neither can finish it all alone.
        for path in logs:
            wait_until(
                lambda path=path: STARTED.search(path.read_text()),
                timeout=30,
                what=f"{path.name}",
                watch=workers,
            )
        manage_ok(
            "shell",
            "-c",
            SEED,
            env={**env, "SEED_FOLDER": str(shared), "SEED_CHATS": str(CHATS)},
        )

        def all_ended():
            turns = _turns(scaleout)
            return len(turns) == CHATS and all(ended for *_, ended in turns) and turns

        turns = wait_until(all_ended, timeout=45, what=f"{CHATS} replies to end", watch=workers)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        codes = [worker.wait(timeout=20) for worker in workers]
    texts = [path.read_text() for path in logs]

    assert codes == [0, 0], f"workers exited {codes}:\n" + "\n---\n".join(texts)
    assert {state for _, _, state, _ in turns} == {"completed"}

    ledger = collections.Counter((shared / "ledger.txt").read_text().split())
    assert ledger == {f"chat-{n:02d}": 1 for n in range(CHATS)}
    for n in range(CHATS):
        assert (shared / f"chat-{n:02d}" / "note.txt").read_text() == "edits: 1\n"

    with scaleout.connect() as conn:
        steps = conn.execute(
            "SELECT turn_id, array_agg(tool ORDER BY number), bool_and(ended_at IS NOT NULL),"
            " string_agg(error, '')"
            " FROM chats_step GROUP BY turn_id"
        ).fetchall()
        replies = conn.execute(
            "SELECT turn_id, count(*) FROM chats_entry"
            " WHERE role = 'assistant' AND text = 'Done.' GROUP BY turn_id"
        ).fetchall()
    assert len(steps) == CHATS
    for turn_id, tools, all_ended_, errors in steps:
        assert tools == ["run_command", "edit_file"], turn_id
        assert all_ended_ and errors == "", turn_id
    assert sorted(count for _, count in replies) == [1] * CHATS

    # Each worker logs the turns it claims: between them every turn, none twice.
    claims = [[int(turn) for _, turn in CLAIM.findall(text)] for text in texts]
    assert all(claims), "both workers should have claimed replies:\n" + "\n---\n".join(texts)
    assert sorted(claims[0] + claims[1]) == sorted(turn_id for turn_id, *_ in turns)
    driven = [int(count) for _, count in (STOPPED.search(text).groups() for text in texts)]
    assert driven == [len(claims[0]), len(claims[1])]


# One chat whose command blocks until the test lets it go (bounded: 30 s at most).
SEED_BLOCKED = """
import os, pathlib
from django.contrib.auth import get_user_model
from chats.models import Agent
from chats.runtime.chats import conversation_create
from chats.runtime.turns import message_send

shared = pathlib.Path(os.environ["SEED_FOLDER"])
owner = get_user_model().objects.create(username="scaleout", is_superuser=True, is_staff=True)
agent = Agent.objects.create(slug="main", name="Conch", workspace=str(shared), is_default=True)
folder = shared / "chat"
folder.mkdir()
chat = conversation_create(owner=owner, agent=agent, title="blocked", folder=str(folder),
    script=[[
        {"tool": "run_command", "args": {"command":
            "for i in $(seq 600); do [ -f ../go ] && break; sleep 0.05; done; echo ran >> ../ledger.txt"}},
        {"say": "Done."},
    ]])
message_send(conversation=chat, text="go")
"""
LINK = re.compile(r"http://127\.0\.0\.1:(\d+)/signin/")


def test_a_server_that_joins_leaves_a_workers_running_reply_alone(scaleout, tmp_path):
    env = {**scaleout.env, **NO_SANDBOX}
    shared = tmp_path / "shared"
    shared.mkdir()
    manage_ok("shell", "-c", SEED_BLOCKED, env={**env, "SEED_FOLDER": str(shared)})

    def step_family():
        with scaleout.connect() as conn:
            return conn.execute("SELECT step_family FROM chats_turn").fetchone()[0]

    worker_log, serve_log = tmp_path / "worker.log", tmp_path / "serve.log"
    worker = _start_worker(env, worker_log)
    server = None
    try:
        wait_until(
            lambda: step_family() == "running a command",
            timeout=30,
            what="the command",
            watch=[worker],
        )
        with open(serve_log, "w") as out:
            server = subprocess.Popen(
                [sys.executable, str(MANAGE), "serve", "--port", "0"],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        # The server's runner has started (and looked for orphans) before it listens.
        wait_until(
            lambda: LINK.search(serve_log.read_text()),
            timeout=30,
            what="the server",
            watch=[worker, server],
        )
        (shared / "go").touch()
        turns = wait_until(
            lambda: all(ended for *_, ended in _turns(scaleout)) and _turns(scaleout),
            timeout=30,
            what="the reply to end",
            watch=[worker, server],
        )
    finally:
        (shared / "go").touch()
        for process in (worker, server):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=20) for p in (worker, server) if p is not None]
    assert codes == [0, 0], worker_log.read_text() + serve_log.read_text()

    assert [state for _, _, state, _ in turns] == ["completed"]
    assert (shared / "ledger.txt").read_text() == "ran\n"
    with scaleout.connect() as conn:
        notes = conn.execute("SELECT text FROM chats_entry WHERE kind = 'note'").fetchall()
    assert notes == [], "nothing was recovered: the reply was never orphaned"
    assert re.search(r"claimed turn \d+", worker_log.read_text())
