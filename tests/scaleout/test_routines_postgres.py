"""Two runners race for one routine's due time on the real PostgreSQL: exactly one run.

Each runner is a child ``manage.py shell`` of its own, with its own connection,
as two ``conch serve`` processes would be. Both read the due routine before
either claims it (each says so down a FIFO, then waits on one the test holds until
both have), which is the moment
the claim exists for: from there, each tries to insert the (routine, due time)
row. PostgreSQL's unique index makes the second insert wait for the first
commit and then fail, so one runner starts the run and the other leaves it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.commands import wait_for_fifo
from tests.scaleout.processes import MANAGE, REPO, manage_ok

pytestmark = pytest.mark.scaleout

SETUP = r"""
import datetime as dt
from django.contrib.auth import get_user_model
from chats.gateway.routines import routine_create
from chats.models import Agent

owner = get_user_model().objects.create(username="owner", is_superuser=True)
agent = Agent.objects.create(slug="main", name="Conch", workspace="/tmp", is_default=True)
routine_create(
    owner=owner, agent=agent, name="Alerts", schedule="0 * * * *", time_zone="Europe/Berlin",
    text="Summarise the overnight alerts.", now=dt.datetime(2025, 5, 1, 10, 30, tzinfo=dt.UTC),
)
"""

RACE = r"""
import datetime as dt, json, os
from django.db import connection
from chats.gateway.models import Routine
from chats.gateway.routines import FireReport, routine_fire_due

now = dt.datetime(2025, 5, 1, 11, 0, 5, tzinfo=dt.UTC)
routine = Routine.objects.select_related("agent", "owner").get(next_due_at__lte=now)
with open(os.environ["READ_FIFO"], "w") as said:  # it has read the due routine
    said.write("read\n")
with open(os.environ["GO_FIFO"]) as go:  # until the other runner has too
    go.read()
report = FireReport()
routine_fire_due(routine=routine, now=now, report=report)
print("RESULT " + json.dumps({
    "vendor": connection.vendor, "started": len(report.started),
    "taken_elsewhere": report.taken_elsewhere,
}))
"""

COUNT = r"""
import json
from chats.gateway.models import Routine, RoutineRun
from chats.models import Conversation, Turn
routine = Routine.objects.get()
print("RESULT " + json.dumps({
    "runs": [r.due_at.isoformat() for r in RoutineRun.objects.all()],
    "chats": Conversation.objects.filter(origin="routine").count(),
    "turns": Turn.objects.count(),
    "next_due_at": routine.next_due_at.isoformat(),
}))
"""


def _result(stdout: str) -> dict:
    line = next(line for line in stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def test_two_runners_racing_for_one_due_time_start_exactly_one_run(scaleout, tmp_path):
    manage_ok("shell", "-c", SETUP, env=scaleout.env, timeout=60)
    fifos = {}
    for name in ("runner-a", "runner-b"):
        fifos[name] = (tmp_path / f"{name}-read.fifo", tmp_path / f"{name}-go.fifo")
        for fifo in fifos[name]:
            os.mkfifo(fifo)

    racers = [
        subprocess.Popen(
            [sys.executable, str(MANAGE), "shell", "-c", RACE],
            cwd=REPO,
            env=scaleout.env | {"READ_FIFO": str(read), "GO_FIFO": str(go)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        for read, go in fifos.values()
    ]
    try:
        for name, (read, _) in fifos.items():  # both have read the due routine
            assert wait_for_fifo(read, timeout=120) == "read", f"{name} never read it"
        for _, go in fifos.values():
            with open(go, "w") as fifo:
                fifo.write("go\n")
        said = []
        for racer in racers:
            out, err = racer.communicate(timeout=120)
            assert racer.returncode == 0, f"{out}\n{err}"
            said.append(_result(out))
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.communicate(timeout=30)

    assert {found["vendor"] for found in said} == {"postgresql"}
    assert sorted((found["started"], found["taken_elsewhere"]) for found in said) == [
        (0, 1),
        (1, 0),
    ]
    after = _result(manage_ok("shell", "-c", COUNT, env=scaleout.env).stdout)
    assert after == {
        "runs": ["2025-05-01T11:00:00+00:00"],
        "chats": 1,
        "turns": 1,
        "next_due_at": "2025-05-01T12:00:00+00:00",
    }
