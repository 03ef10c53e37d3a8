"""bench/bench_events.py runs end to end, so it cannot rot unseen.

Two tabs and two changes against a real ``conch serve``: the bench must print
its goal lines, its details and its curve, lose no push, and leave nothing
behind. No speed is judged here: speed is measured only in bench/.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_events.py"
_OURS = ("CONCH_", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")

GOAL_LINE = re.compile(
    r"^p(50|99) event latency at 2 tabs, 1 change/s: (>= )?\d+ ms "
    r"\(goal <= (50|200) ms, [\d.]+x goal\) (PASS|FAIL)$",
    re.M,
)
# Two changes, each a reply: status working, then idle, each pushed to both tabs.
DETAILS = "2 changes (0 refused), 4 status events x 2 tabs = 8 pushes, 0 not arrived"


def bench_run(tmp_path: Path, *args: str) -> str:
    """Run the bench with its temporary files under ``tmp_path``; returns what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OURS)}
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, str(BENCH), "--tabs", "2", "--seconds", "2", "--drain", "60", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, (
        f"bench_events exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


def bench_checked(tmp_path: Path, *args: str) -> str:
    out = bench_run(tmp_path, *args)
    assert sorted(match.group(1) for match in GOAL_LINE.finditer(out)) == ["50", "99"], out
    assert DETAILS in out, out
    assert re.search(
        r"^curve, status event latency p50 / p99 by tabs at 1 change/s .*: 2: ", out, re.M
    ), out
    assert re.search(r"^cleaned up: servers stopped; homes in \S+ removed; ", out, re.M), out
    assert list(tmp_path.iterdir()) == [], "the bench left files behind"
    return out


def test_bench_events_runs_on_sqlite_and_reports_its_goal_lines(tmp_path):
    out = bench_checked(tmp_path)
    assert "50 chats, SQLite, 1 server" in out
