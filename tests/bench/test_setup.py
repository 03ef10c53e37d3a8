"""The benches' throwaway homes are removed however a bench ends.

Each case runs a child Python that makes a home with ``bench/_setup.py``, in a
temporary directory of the test's own (TMPDIR), and ends in one way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

# The child takes Ctrl-C as a bench run from a terminal does: a suite started in the
# background by a non-interactive shell has SIGINT ignored, and a child inherits that (there
# it read the EOF that communicate() sends and ended normally). A stopped bench is stopped
# while it runs Python, not while blocked reading stdin.
CHILD = """
import signal
import sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {bench!r})
from _setup import throwaway_home
home = throwaway_home()
(home / "conch.sqlite3").write_bytes(b"x" * 4096)
print(home, flush=True)
if {how!r} == "is stopped":
    while True:  # a running bench, until the test's signal arrives
        signal.pause()
sys.stdin.readline()  # the bench runs until the test has seen its home
if {how!r} == "fails":
    raise RuntimeError("the bench failed")
"""


def _run(tmp_path: Path, how: str, stop: signal.Signals | None = None) -> tuple[Path, int]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(bench=str(BENCH), how=how)],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    home = Path(child.stdout.readline().strip())
    assert home.parent == tmp_path and home.name.startswith("conch-bench-")
    assert home.is_dir()  # it is there while the bench runs
    if stop is None:
        child.communicate("go\n", timeout=30)
    else:
        child.send_signal(stop)
        child.communicate(timeout=30)
    return home, child.returncode


@pytest.mark.parametrize(
    ("how", "stop", "code"),
    [
        ("returns", None, 0),
        ("fails", None, 1),
        ("is stopped", signal.SIGINT, -signal.SIGINT),  # Ctrl-C: KeyboardInterrupt, unwound
        ("is stopped", signal.SIGTERM, 128 + signal.SIGTERM),  # kill
    ],
)
def test_the_throwaway_home_is_removed_when_the_bench(tmp_path, how, stop, code):
    home, returncode = _run(tmp_path, how, stop)
    assert returncode == code
    assert not home.exists()
    assert list(tmp_path.iterdir()) == []
