"""Maintenance never takes what is in use, played: ``scenarios/maintenance_keeps_a_waiting_session.json``.

A Telegram session waits for another chat whose runner died; the clock moves 31 days and
maintenance runs twice (its hourly sweep, then the restart's). The waiting session is in
use, not idle: it is kept and wakes with the other chat's reply. An idle session as old is
pruned, so maintenance did run.
"""

from __future__ import annotations

import json

import pytest

from tests.together.plays import reports_played

SCENARIO = "maintenance_keeps_a_waiting_session"


@pytest.fixture(scope="module")
def report(play_template) -> dict:
    return reports_played((SCENARIO,), play_template)[SCENARIO]


def test_maintenance_ran_a_month_later_and_pruned_the_idle_session(report):
    runner = report["runner"]
    assert runner["clock_moved_seconds"] == 31 * 24 * 3600
    assert [s["tick"] for s in runner["sweeps"] if s["sweep"] == "gateway.maintenance"] == [2, 3]
    assert report["deleted"] == ["c_idle"]


def test_a_session_with_a_live_wait_is_kept_and_wakes_with_what_it_waited_for(report):
    assert "c_waiter" not in report["deleted"]  # its live wait keeps it from being idle
    chats = {chat["name"]: chat for chat in report["chats"]}
    waiter = chats["waiter"]
    assert waiter["session_key"] == "agent:main:dm:telegram:waiter"
    assert [w["state"] for w in waiter["waits"]] == ["woken"]
    woken = waiter["replies"][1]
    assert woken["started_by"] != "person" and woken["state"] == "completed"
    # What the woken reply's engine was given: the other chat's last reply, fenced.
    saw = json.dumps(woken["inputs"][0]["messages"])
    assert "The deploy is done." in saw and "finished its reply" in saw
