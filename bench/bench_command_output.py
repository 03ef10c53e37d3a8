"""``run_command`` on a command that prints 100 MB.

Before, ``communicate()`` held all of it, scrubbed all of it, then cut it: 100 MB took
92 s and peaked at 427 MB. Now the output is read as it comes and only a bounded head
and tail are kept and scrubbed (``chats/tools/output.py``).

Prints the time, the memory Python allocated at its peak (tracemalloc), and the ratio it
is judged by: peak / bytes printed (goal: under 0.05, that is, never held whole).

    .venv/bin/python bench/bench_command_output.py [megabytes]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc

from _setup import django_on_fresh_sqlite

GOAL_RATIO = 0.05


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "megabytes",
        nargs="?",
        type=int,
        default=100,
        help="how much the command prints (default 100)",
    )
    megabytes = parser.parse_args().megabytes
    os.environ["CONCH_COMMAND_OUTPUT_MAX_BYTES"] = str((megabytes + 1) * 1024 * 1024)
    os.environ["CONCH_SANDBOX"] = "off"
    home = django_on_fresh_sqlite()
    from chats.models import Conversation, Turn
    from chats.runtime.chats import default_agent
    from chats.signin import owner_ensure
    from chats.tools.registry import ToolContext, get_tool, validate_args

    folder = home / "workspace"
    folder.mkdir()
    chat = Conversation.objects.create(
        owner=owner_ensure(), agent=default_agent(), folder=str(folder), title="Bench"
    )
    ctx = ToolContext(
        conversation=chat, turn=Turn.objects.create(conversation=chat, number=1), folder=str(folder)
    )
    (folder / "print.py").write_text(
        f"import sys\nfor _ in range({megabytes * 16}): sys.stdout.write('x' * 65536)\n"
    )
    tool = get_tool("run_command")
    args = validate_args(tool, {"command": f"{sys.executable} print.py"})

    tracemalloc.start()
    started = time.perf_counter()
    result = tool.run(ctx, args)
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    printed = megabytes * 1024 * 1024
    ratio = peak / printed
    print(f"command output: {megabytes} MB printed, {len(result.text)} characters kept")
    print(f"time: {seconds:.2f} s; peak allocated: {peak / 1024 / 1024:.1f} MB")
    print(f"ratio: peak / printed = {ratio:.4f} (judged: < {GOAL_RATIO})")
    return 0 if ratio < GOAL_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
