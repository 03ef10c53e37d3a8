"""ADR 0134 on the real PostgreSQL: chain limits under concurrency, and a wait that outlives its server."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import pytest

from tests.scaleout.processes import MANAGE, REPO, manage_ok, wait_until

pytestmark = pytest.mark.scaleout

# 30 threads, each with its own connection, send one message each to its own chat,
# all in the sending reply's one chain, released together by a barrier.
CONCURRENT_SENDS = """
import json, threading
from django.contrib.auth import get_user_model
from django.db import connection
from chats.models import Agent
from chats.runtime.chats import ConchError, conversation_create
from chats.runtime.turns import message_send
from together.messages import message_chat

owner = get_user_model().objects.create(username="scaleout", is_superuser=True, is_staff=True)
agent = Agent.objects.create(slug="main", name="Conch", workspace="/tmp", is_default=True)
sender = conversation_create(owner=owner, agent=agent, title="Sender", folder="/tmp")
receivers = [conversation_create(owner=owner, agent=agent, title=f"R{n}", folder="/tmp") for n in range(30)]
turn = message_send(conversation=sender, text="tell everyone")
barrier = threading.Barrier(30)
results = [None] * 30

def send(n):
    try:
        barrier.wait(timeout=30)
        sent = message_chat(sender=sender, turn=turn, chat_id=receivers[n].public_id, text=f"hello {n}")
        results[n] = ["sent", sent.message.state]
    except ConchError as exc:
        results[n] = ["refused", str(exc)]
    finally:
        connection.close()

threads = [threading.Thread(target=send, args=(n,)) for n in range(30)]
for t in threads: t.start()
for t in threads: t.join(timeout=60)
print(json.dumps({"results": results, "chain": turn.chain_id}))
"""


def test_thirty_concurrent_messages_in_one_chain_deliver_exactly_eight(scaleout):
    env = scaleout.env
    out = manage_ok("shell", "-c", CONCURRENT_SENDS, env=env, timeout=120).stdout
    report = json.loads(out.strip().splitlines()[-1])
    results = report["results"]
    assert all(results), results
    sent = [r for r in results if r[0] == "sent"]
    refused = [r for r in results if r[0] == "refused"]
    assert len(sent) == 8 and {state for _, state in sent} == {"waiting"}
    assert len(refused) == 22
    assert all("messages between chats, the most one chain may" in why for _, why in refused)
    with scaleout.connect() as conn:
        (messages,) = conn.execute(
            "SELECT messages FROM together_chain WHERE id = %s", [report["chain"]]
        ).fetchone()
        (rows,) = conn.execute("SELECT count(*) FROM together_chatmessage").fetchone()
    assert messages == 8 and rows == 8


# The same race, each message asking to start a reply in its own idle chat.
CONCURRENT_STARTS = (
    CONCURRENT_SENDS.replace('text=f"hello {n}")', 'text=f"hello {n}", start_reply=True)')
    .replace(
        'results[n] = ["sent", sent.message.state]',
        'results[n] = ["sent", receivers[n].public_id, sent.answer]',
    )
    .replace(
        'print(json.dumps({"results": results, "chain": turn.chain_id}))',
        """from chats.models import Turn
from together.models import Chain
started = sorted(Turn.objects.filter(started_by="message").values_list("conversation__public_id", flat=True))
chain = Chain.objects.get(pk=turn.chain_id)
print(json.dumps({"results": results, "started": started, "replies_started": chain.replies_started}))""",
    )
)


def test_thirty_concurrent_start_replies_start_four_and_each_sender_is_told_what_happened(scaleout):
    from together.messages import ANSWER_NOW, ANSWER_SPENT, MESSAGE_LIMITS

    assert "start_reply=True" in CONCURRENT_STARTS and "sent.answer" in CONCURRENT_STARTS
    out = manage_ok("shell", "-c", CONCURRENT_STARTS, env=scaleout.env, timeout=120).stdout
    report = json.loads(out.strip().splitlines()[-1])
    results, started = report["results"], report["started"]
    assert all(results), results
    sent = {chat: answer for kind, *rest in results if kind == "sent" for chat, answer in [rest]}
    refused = [rest[0] for kind, *rest in results if kind == "refused"]
    limits = (
        "messages between chats, the most one chain may",
        "replies in other chats, the most one chain may",
    )
    assert all(any(limit in why for limit in limits) for why in refused), refused
    assert len(sent) + len(refused) == 30 and 4 <= len(sent) <= MESSAGE_LIMITS.messages_per_chain
    # Four replies start, and the chain counted exactly those.
    assert len(started) == report["replies_started"] == MESSAGE_LIMITS.replies_started_per_chain
    spent = ANSWER_SPENT.format(n=MESSAGE_LIMITS.replies_started_per_chain)
    for chat, answer in sent.items():
        if chat in started:
            assert ANSWER_NOW in answer, answer
        else:  # told the truth: the chain had started its four, so none starts with it
            assert spent in answer and ANSWER_NOW not in answer, answer


SEED_WAIT = """
import os, pathlib
from django.contrib.auth import get_user_model
from chats.models import Agent
from chats.runtime.chats import conversation_create
from chats.runtime.turns import message_send

folder = pathlib.Path(os.environ["SEED_FOLDER"])
owner = get_user_model().objects.create(username="scaleout", is_superuser=True, is_staff=True)
agent = Agent.objects.create(slug="main", name="Conch", workspace=str(folder), is_default=True)
target = conversation_create(owner=owner, agent=agent, title="Slow target", folder=str(folder),
    public_id="c_target",
    script=[[
        {"tool": "run_command", "args": {"command":
            "for i in $(seq 600); do [ -f go ] && break; sleep 0.05; done; echo checked"}},
        {"tool": "list_files", "args": {}},
        {"say": "Target finished."},
    ]])
waiter = conversation_create(owner=owner, agent=agent, title="Waiter", folder=str(folder),
    public_id="c_waiter",
    script=[[{"tool": "wait_for", "args": {"kind": "chat", "id": "c_target"}}], [{"say": "Woken."}]])
message_send(conversation=target, text="work")
message_send(conversation=waiter, text="wait for it")
"""
LINK = re.compile(r"http://127\.0\.0\.1:(\d+)/signin/")


def _serve(env, log_path) -> subprocess.Popen:
    with open(log_path, "w") as out:
        return subprocess.Popen(
            [sys.executable, str(MANAGE), "serve", "--port", "0"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def test_a_wait_survives_its_server_being_killed_and_still_wakes_its_chat(scaleout, tmp_path):
    env = {**scaleout.env, "CONCH_TURN_LEASE_SECONDS": "2"}
    folder = tmp_path / "work"
    folder.mkdir()
    manage_ok("shell", "-c", SEED_WAIT, env={**env, "SEED_FOLDER": str(folder)})

    def query(sql):
        with scaleout.connect() as conn:
            return conn.execute(sql).fetchall()

    first = _serve(env, tmp_path / "serve-1.log")
    second = None
    try:
        wait_until(
            lambda: (
                query("SELECT state FROM together_wait") == [("waiting",)]
                and query(
                    "SELECT step_family FROM chats_turn t JOIN chats_conversation c ON c.id = t.conversation_id"
                    " WHERE c.public_id = 'c_target'"
                )
                == [("running a command",)]
            ),
            timeout=120,
            what="the waiter to let go and the target to be mid-command",
            watch=[first],
        )
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=20)
        assert query("SELECT state FROM together_wait") == [("waiting",)]  # stored, not in memory

        (folder / "go").touch()  # the target's command, if it ran again, would finish at once
        second = _serve(env, tmp_path / "serve-2.log")
        woken = wait_until(
            lambda: (
                query(
                    "SELECT t.state FROM chats_turn t JOIN chats_conversation c ON c.id = t.conversation_id"
                    " WHERE c.public_id = 'c_waiter' AND t.started_by = 'wait'"
                )
                == [("completed",)]
            ),
            timeout=180,
            what="the waiting chat to wake and finish its reply",
            watch=[second],
        )
        assert woken
    finally:
        (folder / "go").touch()
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=20)
    assert query("SELECT state FROM together_wait") == [("woken",)]
    words = query(
        "SELECT e.text FROM chats_entry e JOIN chats_conversation c ON c.id = e.conversation_id"
        " WHERE c.public_id = 'c_waiter' AND e.role = 'assistant'"
    )
    assert words == [("Woken.",)]
    (headline,) = query("SELECT outcome FROM together_wait")[0]
    assert headline["headline"].startswith("“Slow target” ")


# A already waits for B. B (waiting for C) and C (waiting for A) close
# the cycle A → B → C → A at the same moment, each in its own thread and connection.
# Each thread, once it has looked for a cycle and found none, waits (up to 5 s) for the
# other to have looked too: without the lock that orders one person's waits, both find
# none and both wait; with it, the second looks only after the first committed.
CONCURRENT_CYCLE = """
import json, threading
from django.contrib.auth import get_user_model
from django.db import connection
from chats.models import Agent, StartedBy, TurnState
from chats.runtime.chats import ConchError, conversation_create
from chats.runtime.turns import turn_end, turn_start
from together import waits

owner = get_user_model().objects.create(username="scaleout", is_superuser=True, is_staff=True)
agent = Agent.objects.create(slug="main", name="Conch", workspace="/tmp", is_default=True)
a, b, c = (conversation_create(owner=owner, agent=agent, title=t, folder="/tmp") for t in "ABC")
turns = {chat.pk: turn_start(conversation=chat, started_by=StartedBy.PERSON, text="work")
         for chat in (a, b, c)}
waits.wait_for(waiter=a, turn=turns[a.pk], kind="chat", target_id=b.public_id)
turn_end(turn=turns[a.pk], state=TurnState.COMPLETED)

looked = threading.Barrier(2)
original = waits.cycle_through

def cycle_through(**kwargs):
    found = original(**kwargs)
    try:
        looked.wait(timeout=5)
    except threading.BrokenBarrierError:
        pass
    return found

waits.cycle_through = cycle_through
start = threading.Barrier(2)
results = {}

def wait(name, waiter, target):
    try:
        start.wait(timeout=30)
        answer = waits.wait_for(waiter=waiter, turn=turns[waiter.pk], kind="chat",
                                target_id=target.public_id)
        results[name] = ["waiting", answer.let_go]
    except ConchError as exc:
        results[name] = ["refused", str(exc)]
    except Exception as exc:
        results[name] = ["error", repr(exc)]
    finally:
        connection.close()

threads = [threading.Thread(target=wait, args=("b", b, c)),
           threading.Thread(target=wait, args=("c", c, a))]
for t in threads: t.start()
for t in threads: t.join(timeout=60)
print(json.dumps(results))
"""


def test_two_chats_closing_a_wait_cycle_at_the_same_moment_one_is_refused(scaleout):
    env = scaleout.env
    out = manage_ok("shell", "-c", CONCURRENT_CYCLE, env=env, timeout=120).stdout
    results = json.loads(out.strip().splitlines()[-1])
    assert sorted(results) == ["b", "c"], results
    outcomes = sorted(state for state, _ in results.values())
    assert outcomes == ["refused", "waiting"], results
    (why,) = [text for state, text in results.values() if state == "refused"]
    assert "would close a circle of 3 chats" in why
    with scaleout.connect() as conn:
        rows = conn.execute(
            "SELECT w.public_id, t.public_id FROM together_wait x"
            " JOIN chats_conversation w ON w.id = x.waiter_id"
            " JOIN chats_conversation t ON t.id = x.target_chat_id WHERE x.state = 'waiting'"
        ).fetchall()
    assert len(rows) == 2  # A → B and exactly one of the two: no cycle was stored


# Background tasks on PostgreSQL. The parent starts a task with a
# script of its own and waits for it; the runner's loop (drain) plays everything.
TASK_AND_WAIT = """
import json
from django.contrib.auth import get_user_model
from chats.models import Agent, StartedBy, Task, Turn, counted_ids
from chats.runtime.chats import conversation_create
from chats.runtime.runner import drain
from chats.runtime.turns import message_send, task_start, tasks_make_room

owner = get_user_model().objects.create(username="scaleout", is_superuser=True, is_staff=True)
agent = Agent.objects.create(slug="main", name="Conch", workspace="/tmp", is_default=True)
with counted_ids():
    parent = conversation_create(owner=owner, agent=agent, title="Parent", folder="/tmp",
        script=[[
            {"tool": "start_background_task", "args": {"title": "Count files",
                "script": [[{"tool": "list_files", "args": {}}, {"say": "There are 3 files."}]]}},
            {"tool": "wait_for", "args": {"kind": "task", "id": "t_1"}},
        ], [{"say": "The task says 3."}]])
    message_send(conversation=parent, text="count them in the background")
    drain()
    # A second parent's task, started directly, with the lane full of none: room is made.
    other = conversation_create(owner=owner, agent=agent, title="Other", folder="/tmp")
    queued = task_start(parent=other, title="Queued", script=[[{"say": "done"}]])
    made = tasks_make_room()
    drain()
task = Task.objects.get(public_id="t_1")
woken = Turn.objects.filter(conversation=parent, started_by=StartedBy.WAIT).first()
print(json.dumps({
    "task": [task.state, task.result],
    "queued": [queued.state, Task.objects.get(pk=queued.pk).state, len(made)],
    "woken": woken and [woken.state, [e.text for e in woken.entries.order_by("seq")]],
}))
"""


def test_a_background_task_starts_and_a_wait_for_it_wakes_on_postgresql(scaleout):
    env = scaleout.env
    out = manage_ok("shell", "-c", TASK_AND_WAIT, env=env, timeout=120).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert report["task"] == ["done", "There are 3 files."]
    assert report["queued"] == ["running", "done", 0]  # started at once by task_start's own room
    state, words = report["woken"]
    assert state == "completed"
    assert words[0].startswith("[Conch: the task “Count files” (t_1) is done.]")
    assert "There are 3 files." in words[0] and words[-1] == "The task says 3."
