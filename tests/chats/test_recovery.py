"""Replies that were running when their runner died: resumed, or ended without doing a write twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.utils import timezone

from chats import events
from chats.models import Effect, EntryKind, EntryRole, Status, Step, Turn, TurnState
from chats.runtime import claims
from chats.runtime.claims import (
    ERR_COMMAND_ENDED_AFTER_RESTART,
    ERR_COMMAND_GONE_AT_RESTART,
    turn_claim,
    turns_recover,
)
from chats.runtime.runner import drain
from chats.runtime.stepping import turn_advance
from chats.runtime.turns import message_send
from chats.tools.registry import EDITING_FILES, READING_FILES
from tests.commands import (
    kill_all,
    processes_running,
    sleep_marker,
    wait_for_fifo,
    wait_until_ended,
)
from tests.factories import ChatFactory, StepFactory
from tests.scaleout.processes import wait_until

REPO = Path(__file__).resolve().parents[2]
DEAD = "dead-host:4242:abcdef"


def claimed_by_a_dead_worker(chat, actions_played: int) -> Turn:
    """The person's message, claimed by a worker that played some actions and then died."""
    turn = message_send(conversation=chat, text="go")
    assert turn_claim(worker=DEAD, limit=1) == [turn.pk]
    for _ in range(actions_played):
        assert turn_advance(turn_id=turn.pk, worker=DEAD).more
    turn.refresh_from_db()
    assert (turn.state, turn.claimed_by) == (TurnState.RUNNING, DEAD)
    return turn


def cut_off_step(turn: Turn, *, tool: str, family: str, effect: str, args: dict) -> Step:
    """The step the dead worker had begun: recorded at its start, never ended."""
    now = timezone.now()
    step = StepFactory(
        turn=turn,
        number=turn.steps.count() + 1,
        tool=tool,
        family=family,
        effect=effect,
        args=args,
        started_at=now,
        ended_at=None,
    )
    Turn.objects.filter(pk=turn.pk).update(step_family=family, step_started_at=now)
    return step


@pytest.fixture
def states_at_recovery(monkeypatch):
    """What the turn and its chat read as at the moment each is recovered."""
    seen: list[tuple[str, str]] = []
    recover = claims._recover_one

    def watching(turn):
        fresh = Turn.objects.select_related("conversation").get(pk=turn.pk)
        seen.append((fresh.state, fresh.conversation.status))
        return recover(turn)

    monkeypatch.setattr(claims, "_recover_one", watching)
    return seen


def test_a_reply_whose_worker_died_after_a_read_is_recovery_pending_first_then_resumed(
    agent,
    workspace,
    states_at_recovery,
    published,
    django_capture_on_commit_callbacks,
):
    (workspace / "a.txt").write_text("a\n")
    chat = ChatFactory(
        reply=[{"tool": "read_file", "args": {"path": "a.txt"}}, {"say": "Read it."}]
    )
    turn = claimed_by_a_dead_worker(chat, actions_played=1)
    published.clear()

    with django_capture_on_commit_callbacks(execute=True):
        [recovered] = turns_recover()

    assert states_at_recovery == [(TurnState.RECOVERY_PENDING, Status.WORKING)]
    assert recovered.pk == turn.pk
    assert (recovered.state, recovered.claimed_by, recovered.ended_at) == (
        TurnState.RUNNING,
        "",
        None,
    )
    # Never reported finished: no event says it ended, and the chat still reads as working.
    assert not any("ended" in e.data for e in published)
    assert [e.data["status"] for e in published if e.type == events.STATUS] == [Status.WORKING]
    note = chat.entries.get(role=EntryRole.CONCH)
    assert (note.kind, note.data) == (EntryKind.NOTE, {"recovery": "resumed"})

    drain()

    turn.refresh_from_db()
    chat.refresh_from_db()
    assert turn.state == TurnState.COMPLETED
    assert chat.status == Status.IDLE
    assert turn.steps.count() == 1  # the finished read is not played again
    assert chat.entries.last().text == "Read it."


def test_a_read_step_that_was_cut_off_is_played_again(agent, workspace):
    (workspace / "a.txt").write_text("a\n")
    chat = ChatFactory(
        reply=[{"tool": "read_file", "args": {"path": "a.txt"}}, {"say": "Read it."}]
    )
    turn = claimed_by_a_dead_worker(chat, actions_played=0)
    cut = cut_off_step(
        turn, tool="read_file", family=READING_FILES, effect=Effect.READ, args={"path": "a.txt"}
    )

    turns_recover()
    drain()

    turn.refresh_from_db()
    cut.refresh_from_db()
    assert cut.ended_at is not None
    assert "read again" in cut.error
    again = turn.steps.get(number=2)
    assert (again.tool, again.result, again.error) == ("read_file", "a\n", "")
    assert turn.state == TurnState.COMPLETED


def test_a_write_step_that_was_cut_off_is_not_run_again_and_the_reply_is_interrupted(
    agent, workspace, states_at_recovery
):
    (workspace / "a.txt").write_text("before\n")
    chat = ChatFactory(
        reply=[
            {"tool": "write_file", "args": {"path": "a.txt", "content": "after\n"}},
            {"say": "Wrote."},
        ]
    )
    turn = claimed_by_a_dead_worker(chat, actions_played=0)
    cut = cut_off_step(
        turn,
        tool="write_file",
        family=EDITING_FILES,
        effect=Effect.WRITE,
        args={"path": "a.txt", "content": "after\n"},
    )

    [recovered] = turns_recover()
    drain()

    assert states_at_recovery == [(TurnState.RECOVERY_PENDING, Status.WORKING)]
    turn.refresh_from_db()
    chat.refresh_from_db()
    cut.refresh_from_db()
    assert recovered.state == turn.state == TurnState.INTERRUPTED
    assert turn.ended_at is not None
    assert chat.status == Status.STOPPED
    assert (workspace / "a.txt").read_text() == "before\n"
    assert turn.steps.count() == 1
    assert cut.ended_at is not None
    assert "not run again" in cut.error
    note = chat.entries.get(role=EntryRole.CONCH)
    assert note.data == {"recovery": "interrupted"}
    assert "“write_file”" in note.text and "not run again" in note.text
    assert not chat.entries.filter(role=EntryRole.ASSISTANT).exists()


def test_a_worker_among_others_recovers_only_replies_whose_lease_ran_out(agent):
    live = claimed_by_a_dead_worker(ChatFactory(reply=[{"say": "a"}], title="Live"), 0)
    dead = claimed_by_a_dead_worker(ChatFactory(reply=[{"say": "b"}], title="Dead"), 0)
    Turn.objects.filter(pk=dead.pk).update(lease_until=timezone.now() - timezone.timedelta(1))

    recovered = turns_recover(orphaned_only=True)

    assert [t.pk for t in recovered] == [dead.pk]
    live.refresh_from_db()
    assert (live.state, live.claimed_by) == (TurnState.RUNNING, DEAD)


def test_recovery_leaves_a_reply_waiting_for_the_persons_ok_alone(agent, workspace):
    chat = ChatFactory(
        reply=[{"tool": "write_file", "args": {"path": "a.txt", "content": "x"}}], mode="ask"
    )
    message_send(conversation=chat, text="go")
    drain()

    assert turns_recover() == []
    turn = chat.turns.get()
    assert turn.state == TurnState.NEEDS_YOU
    assert turn.pending_action["tool"] == "write_file"


# ---------------------------------------------------------------------------
# A worker process that really dies


_DOOMED_WORKER = textwrap.dedent(
    """
    import os
    import django
    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from chats.models import Agent
    from chats.runtime.chats import conversation_create
    from chats.runtime.runner import drain
    from chats.runtime.turns import message_send

    call_command("migrate", verbosity=0)
    folder = os.environ["CRASH_FOLDER"]
    owner = get_user_model().objects.create(username="owner", is_superuser=True, is_staff=True)
    Agent.objects.create(slug="main", name="Conch", workspace=folder, is_default=True)
    command = (
        "echo run >> runs.log; echo ready > ready.fifo; "
        f"sleep {os.environ['CRASH_MARKER']}; echo late > proof.txt"
    )
    chat = conversation_create(
        owner=owner,
        title="Crash",
        folder=folder,
        script=[[{"tool": "run_command", "args": {"command": command}}, {"say": "After."}]],
    )
    message_send(conversation=chat, text="go")
    drain(worker="doomed-worker")
    """
)

_RESTARTED_SERVER = textwrap.dedent(
    """
    import json
    import django
    django.setup()
    from chats.models import Conversation, Step, Turn
    from chats.runtime.claims import turns_recover
    from chats.runtime.runner import drain

    turn = Turn.objects.get()
    before = {
        "state": turn.state,
        "claimed_by": turn.claimed_by,
        "cut_off": [
            [s.tool, s.effect, bool(s.process_group), bool(s.process_mark)]
            for s in Step.objects.filter(turn=turn, ended_at__isnull=True)
        ],
    }
    recovered = [t.state for t in turns_recover()]
    drain(worker="fresh-worker")
    turn.refresh_from_db()
    chat = Conversation.objects.get()
    print(json.dumps({
        "before": before,
        "recovered": recovered,
        "state": turn.state,
        "status": chat.status,
        "steps": [[s.tool, s.error, s.ended_at is not None] for s in turn.steps.all()],
        "entries": [[e.role, e.text, e.data] for e in chat.entries.all()],
    }))
    """
)


def _own_database_env(home: Path, folder: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(
        CONCH_HOME=str(home),
        CRASH_FOLDER=str(folder),
        DJANGO_SETTINGS_MODULE="conch.settings",
        PYTHONPATH=str(REPO),
        **more,
    )
    env.pop("CONCH_TEST_SQLITE", None)
    return env


def _command_recorded(home: Path) -> bool:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(home / "conch.sqlite3", timeout=5)) as db:
        row = db.execute(
            "SELECT process_group, process_mark FROM chats_step WHERE ended_at IS NULL"
        ).fetchone()
    return bool(row and row[0] and row[1])


@pytest.fixture
def marker():
    mark = sleep_marker()
    yield mark
    kill_all(mark)


@pytest.mark.parametrize("mode", ["off", "required"], ids=["plain", "sandboxed"])
def test_a_worker_killed_during_a_command_leaves_a_reply_that_is_interrupted_not_run_again(
    tmp_path, mode, marker
):
    """A real process claims the reply and is SIGKILLed while its command runs.

    It has its own SQLite file (its own CONCH_HOME), so the crash and the
    restart share a database on disk, as a server and its restart do. A plain
    command outlives the worker, in a session of its own, and the restart ends
    it; a sandboxed one dies with the worker (bwrap's --die-with-parent).
    """
    home, folder = tmp_path / "home", tmp_path / "folder"
    home.mkdir()
    folder.mkdir()
    fifo = folder / "ready.fifo"
    os.mkfifo(fifo)
    env = _own_database_env(home, folder, CONCH_SANDBOX=mode, CRASH_MARKER=marker)
    worker = subprocess.Popen(
        [sys.executable, "-c", _DOOMED_WORKER],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if wait_for_fifo(fifo, timeout=120) is None:
            worker.kill()
            _, err = worker.communicate(timeout=30)
            pytest.fail(f"the worker never reached its command:\n{err}")
        left = wait_until(lambda: processes_running(marker), timeout=30, what="the command's sleep")
        # The command can be running before its step records its group: killed between
        # the two, the restart would know of no command (this test's premise is one it does).
        wait_until(
            lambda: _command_recorded(home), timeout=30, what="the step to record its command"
        )
        worker.send_signal(signal.SIGKILL)
        worker.communicate(timeout=30)
        assert worker.returncode == -signal.SIGKILL
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate(timeout=30)

    if mode == "off":
        assert processes_running(marker) == left, "a plain command outlives a killed worker"
    else:
        assert wait_until_ended(left, timeout=10) == [], "the sandbox outlived its worker"
    restart = subprocess.run(
        [sys.executable, "-c", _RESTARTED_SERVER],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert restart.returncode == 0, restart.stderr
    seen = json.loads(restart.stdout.strip().splitlines()[-1])

    assert wait_until_ended(left, timeout=10) == [], "the restart left the command running"
    assert not (folder / "proof.txt").exists()  # nothing is left that could write it
    assert seen["before"] == {
        "state": TurnState.RUNNING,
        "claimed_by": "doomed-worker",
        "cut_off": [["run_command", Effect.WRITE, True, True]],
    }
    assert seen["recovered"] == [TurnState.INTERRUPTED]
    assert seen["state"] == TurnState.INTERRUPTED
    assert seen["status"] == Status.STOPPED
    [(tool, error, ended)] = seen["steps"]
    assert (tool, ended) == ("run_command", True)
    assert error == (
        ERR_COMMAND_ENDED_AFTER_RESTART if mode == "off" else ERR_COMMAND_GONE_AT_RESTART
    )
    assert "not run again" in error
    assert (folder / "runs.log").read_text() == "run\n"  # it ran once, and only once
    notes = [(text, data) for role, text, data in seen["entries"] if role == EntryRole.CONCH]
    assert [data for _, data in notes] == [{"recovery": "interrupted"}]
    assert "It was not run again" in notes[0][0]
    assert not any(role == EntryRole.ASSISTANT for role, _, _ in seen["entries"])
