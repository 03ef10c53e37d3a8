"""The lookalike properties (tests/chats/test_lookalikes.py), 10,000 examples each.

Prints how many examples ran, the time, and the ratio it is judged by: failures / examples (0).

    .venv/bin/python bench/bench_lookalikes.py [examples]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROPERTIES = 3  # the @given tests in the module


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "examples", nargs="?", type=int, default=10_000, help="examples a property (default 10,000)"
    )
    examples = parser.parse_args().examples
    env = {**os.environ, "CONCH_LOOKALIKE_EXAMPLES": str(examples)}
    started = time.perf_counter()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/chats/test_lookalikes.py",
            "-n",
            "0",  # one process: the figure is a single run's, with its statistics
            "-p",
            "no:cacheprovider",
            "--hypothesis-show-statistics",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    passing = [line for line in run.stdout.splitlines() if re.search(r"\d+ passing\b", line)]
    ran = sum(int(re.search(r"(\d+) passing\b", line).group(1)) for line in passing)
    failed = run.returncode != 0
    print(run.stdout.splitlines()[-1] if run.stdout else run.stderr[-500:])
    if failed:
        print("\n".join(line for line in run.stdout.splitlines() if line.startswith("E ")))
    print(f"lookalikes: {ran} passing examples over {PROPERTIES} properties in {seconds:.1f}s")
    print(
        f"ratio: failures/examples = {int(failed)}/{ran} (judged: 0, with examples >= {examples} a property)"
    )
    return 1 if failed or ran < examples * PROPERTIES else 0


if __name__ == "__main__":
    sys.exit(main())
