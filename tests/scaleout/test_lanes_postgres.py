"""The lanes' room on the real PostgreSQL: two processes making room at the same moment
fill it once, not twice (chats/runtime/lanes.py).

Each race is two threads with connections of their own. Each thread stops at a barrier
just as it would take what it found room for, before it commits (the second finds
something the first did not lock: a task queued meanwhile, scheduled replies past the
first runner's). Counted at once (the
room not yet serialised), both reach the barrier and both take the one place. Counted
in turn, the second waits for the first's commit to count, never reaches the barrier
while the first waits there, and finds no room.
"""

from __future__ import annotations

import json

import pytest

from tests.scaleout.processes import manage_ok

pytestmark = pytest.mark.scaleout

# Long enough for a thread that counts at once to arrive; the serialised one never does.
RACE = """
import json, threading
from django.contrib.auth import get_user_model
from django.db import connection
from chats.models import Agent, Lane, Origin, Task, TaskState, Turn
from chats.runtime import claims, turns
from chats.runtime.chats import conversation_create

owner = get_user_model().objects.create(username="scaleout", is_superuser=True, is_staff=True)
agent = Agent.objects.create(slug="main", name="Conch", workspace="/tmp", is_default=True)
parent = conversation_create(owner=owner, agent=agent, title="Parent", folder="/tmp")
arrived = threading.Barrier(2)

def at_the_barrier(real):
    def held(*args, **kwargs):
        try:
            arrived.wait(timeout=3)
        except threading.BrokenBarrierError:
            pass  # the other one is waiting to count: on with it
        return real(*args, **kwargs)
    return held

def race(work):
    out = [None, None]
    def run(n):
        try:
            out[n] = work(n)
        finally:
            connection.close()
    threads = [threading.Thread(target=run, args=(n,)) for n in range(2)]
    for t in threads: t.start()
    for t in threads: t.join(timeout=60)
    return out

def queue_task(n):
    chat = conversation_create(owner=owner, agent=agent, title=f"T{n}", folder="/tmp",
        origin=Origin.TASK, parent=parent)
    Task.objects.create(parent=parent, chat=chat, title=f"T{n}")

if LANE == "subagent":
    # One task queued, one place in the lane. The first thread makes room for it; as it
    # starts it, a second task is queued and the second thread makes room for that one.
    queue_task(0)
    first_there = threading.Event()
    held = at_the_barrier(turns._turn_start_locked)
    def starting(*args, **kwargs):
        first_there.set()
        return held(*args, **kwargs)
    turns._turn_start_locked = starting
    def make_room(n):
        if n == 1:
            assert first_there.wait(timeout=30)
            queue_task(1)
        return len(turns.tasks_make_room())
    started = race(make_room)
    running = Task.objects.filter(state=TaskState.RUNNING).count()
else:
    # Four scheduled replies waiting for a runner, one place in the cron lane. Each
    # runner claims one: it locks two candidates, and the other passes those by.
    for n in range(4):
        chat = conversation_create(owner=owner, agent=agent, title=f"R{n}", folder="/tmp",
            origin=Origin.ROUTINE)
        turns.turn_start(conversation=chat, started_by="routine", text="go")
    assert set(Turn.objects.values_list("lane", flat=True)) == {Lane.CRON}
    real_filter = claims.Turn.objects.filter
    held_filter = at_the_barrier(real_filter)
    def claim_filter(*args, **kwargs):  # the claim's conditional update, once room was counted
        return held_filter(*args, **kwargs) if "pk" in kwargs else real_filter(*args, **kwargs)
    claims.Turn.objects.filter = claim_filter
    started = race(lambda n: len(claims.turn_claim(worker=f"w{n}", limit=1)))
    running = Turn.objects.exclude(claimed_by="").count()
print(json.dumps({"started": started, "running": running}))
"""


@pytest.mark.parametrize(
    ("lane", "setting"),
    [("subagent", "CONCH_SUBAGENT_LANE"), ("cron", "CONCH_CRON_LANE")],
)
def test_two_processes_making_room_in_a_lane_of_one_at_once_fill_it_once(scaleout, lane, setting):
    env = {**scaleout.env, setting: "1"}
    script = f"LANE = {lane!r}\n" + RACE
    out = manage_ok("shell", "-c", script, env=env, timeout=120).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert sorted(report["started"]) == [0, 1], report
    assert report["running"] == 1, report
