"""A reply a thousand times longer than usual renders in about a thousand
times the time, never in quadratic time, with its maths, task lists and headings.

For each shape of reply, prints the time to render it a hundred and a thousand times
over, and the ratio it is judged by: the time per character at 1,000x over the time per
character at 100x (about 1 for a linear pass; 10 for a quadratic one, as mdit-py-plugins'
task lists have, which took 76 s for 20,000 items). A reply is re-rendered as its words
stream in, so this is paid per word.

    .venv/bin/python bench/bench_markdown.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chats.markdown import render_markdown  # noqa: E402

SHAPES = {
    "prose, list, table, code": (
        "## Plan\n\nRead the **tests**, then fix `login()`.\n\n| file | lines |\n|:--|--:|\n"
        "| login.py | 12 |\n\n```python\ndef login(user):\n    return True\n```\n\n"
    ),
    "maths": "For $n \\ge 1$, $$\\sum_{i=1}^{n} i = \\frac{n(n+1)}{2}$$ and $\\sqrt{x^2_1}$.\n\n",
    "task list": "- [ ] write the test\n- [x] fix the bug\n",
    "prices": "It costs $5 and $10, or \\$20.\n",
    "headings": "# One\n### Three\n## Two\n",
}
TIMES = 1_000
JUDGED_BY = 3.0  # the worst ratio allowed: linear is about 1, quadratic 10


def seconds(text: str) -> float:
    started = time.perf_counter()
    render_markdown(text)
    return time.perf_counter() - started


def main() -> int:
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()  # --help, and no other option
    worst = 0.0
    for text in SHAPES.values():  # the parser built and the code warm before any figure
        render_markdown(text)
    for name, text in SHAPES.items():
        tenth = min(seconds(text * (TIMES // 10)) for _ in range(5))
        whole = min(seconds(text * TIMES) for _ in range(2))
        ratio = whole / (tenth * 10)
        worst = max(worst, ratio)
        print(
            f"{name:26} {TIMES // 10}x {tenth * 1000:7.1f} ms  {TIMES}x"
            f" ({len(text) * TIMES:,} chars) {whole:6.2f} s  ratio {ratio:5.2f}"
        )
    print(f"worst ratio {worst:.2f} (judged by: at most {JUDGED_BY})")
    return 0 if worst <= JUDGED_BY else 1


if __name__ == "__main__":
    raise SystemExit(main())
