"""bench/bench_streaming.py runs end to end, so it cannot rot unseen.

Two replies of ten words each, streamed by the bench's model server to two tabs of
a real ``conch serve``: the bench must print its goal lines and details, see every
word at its chat's tab, and leave nothing behind. No speed is judged here: speed is
measured only in bench/.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_streaming.py"
_OURS = ("CONCH_", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")

GOAL_LINE = re.compile(
    r"^p(50|99) word latency, 2 replies streaming at once to 2 tabs: (>= )?\d+ ms "
    r"\(goal <= (20|50) ms, [\d.]+x goal\) (PASS|FAIL)$",
    re.M,
)
# One measured round of two replies of ten words, each word seen at its chat's tab.
DETAILS = "20 words written, 20 measured at the tabs, 0 not arrived when the wait ended"


def bench_checked(tmp_path: Path, *args: str) -> str:
    """Run the bench small, its temporary files under ``tmp_path``; check what every run
    prints; returns it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OURS)}
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, str(BENCH), "--replies", "2", "--tokens", "10", "--rounds", "1", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    out = done.stdout
    assert done.returncode == 0, f"bench_streaming exited {done.returncode}\n{out}\n{done.stderr}"
    assert sorted(match.group(1) for match in GOAL_LINE.finditer(out)) == ["50", "99"], out
    assert DETAILS in out, out
    assert re.search(r"to the event: p50 \d+ ms, p99 \d+ ms", out), out
    assert re.search(r"the servers used \d+% of a core, [\d.]+ ms a word", out), out
    assert re.search(r"^cleaned up: servers stopped; homes in \S+ removed; ", out, re.M), out
    assert list(tmp_path.iterdir()) == [], "the bench left files behind"
    return out


def test_bench_streaming_runs_on_sqlite_and_reports_its_goal_lines(tmp_path):
    out = bench_checked(tmp_path, "--prose", "500")
    assert "SQLite, 1 server" in out and "500 characters of Markdown, then 10 words" in out


def test_bench_streaming_answers_help():
    done = subprocess.run(
        [sys.executable, str(BENCH), "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "--redis" in done.stdout and "--replies" in done.stdout
