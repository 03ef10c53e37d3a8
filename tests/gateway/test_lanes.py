"""Lanes: a slow task on the subagent lane never blocks a quick message on the foreground lane.

Proved with a real Runner and its threads, in a child process with a file
SQLite database (threads can't share the tests' in-memory one).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.scaleout.processes import REPO, process_env

SCRIPT = Path(__file__).with_name("live_runner.py")


def test_a_slow_task_never_blocks_a_quick_message_and_the_runner_delivers_the_outbox(tmp_path):
    env = process_env(
        tmp_path,
        CONCH_RUNNER_THREADS="4",
        CONCH_SUBAGENT_LANE="2",
        CONCH_REPO=str(REPO),
        DJANGO_SETTINGS_MODULE="conch.settings",
    )
    done = subprocess.run(
        [sys.executable, str(SCRIPT)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # The quick message started at once and its reply ended while both crawls still ran.
    assert seen["quick_outcome"] == "started"
    assert seen["tasks_while_quick_reply_ended"] == ["running", "running"]
    assert seen["quick_answer"] == "Yes, here. The crawl is still going."
    assert seen["lanes"] == ["foreground", "subagent"]
    assert seen["tasks_after"] == ["done", "done"]
    # The runner's sweep sent the Telegram reply to the fake Bot API.
    [(path, body)] = seen["telegram"]
    assert path == "/bot42:token/sendMessage"
    assert body == {"chat_id": 7, "text": "echo: ping"}
