"""``list_chats`` on realistic data, at 1,000, 10,000 and 100,000 chats.

Realistic, as a person's store looks: 5 chats working (each with its open
reply), 3 that need the person, a fifth of the rest archived, and the last
activity spread evenly over 30 days, so only a tenth of the chats are
"recent" (three days) and fewer than twelve are busy. The store grows in
place from one size to the next, and is ANALYZEd at each, as a store that
has been running a while is.

Judged by: the median of ``list_chats`` at 100,000 chats (goal ≤ 5 ms), its
queries (goal ≤ 5), and flatness: the ratio of the 100,000-chat median to the
1,000-chat one. Beside each size it prints the index each of the look's
chat queries uses, from SQLite's EXPLAIN QUERY PLAN, and says when it sorts
in a temporary B-tree instead of reading the index in order.

    .venv/bin/python bench/bench_list_chats.py
"""

from __future__ import annotations

import argparse
import random
import re
from datetime import timedelta

from _setup import django_on_fresh_sqlite, median_ms

SIZES = (1_000, 10_000, 100_000)
WORKING = 5
NEEDS_YOU = 3
ARCHIVED_SHARE = 0.2
SPREAD = timedelta(days=30)
GOAL_MS = 5.0
GOAL_QUERIES = 5


def grow(*, owner, agent, folder: str, start: int, stop: int, now) -> None:
    """Add chats ``start``..``stop`` (idle, activity over 30 days, a fifth archived)."""
    from chats.models import Conversation, Status

    rng = random.Random(start)
    for first in range(start, stop, 5_000):
        Conversation.objects.bulk_create(
            [
                Conversation(
                    owner=owner,
                    agent=agent,
                    title=f"Chat {n}",
                    folder=folder,
                    public_id=f"c_l{n}",
                    status=Status.IDLE,
                    archived=rng.random() < ARCHIVED_SHARE,
                    last_interaction_at=now - SPREAD * rng.random(),
                )
                for n in range(first, min(stop, first + 5_000))
            ],
            batch_size=5_000,
        )


def plans(sqls: list[str]) -> list[str]:
    """Each chat query's plan, shortened to what it uses: its index, and a sort if any."""
    from django.db import connection

    out = []
    with connection.cursor() as cursor:
        for sql in sqls:
            if 'FROM "chats_conversation"' not in sql.split("WHERE")[0]:
                continue
            cursor.execute("EXPLAIN QUERY PLAN " + sql)
            steps = [row[-1] for row in cursor.fetchall()]
            used = [m.group(1) for s in steps if (m := re.search(r"INDEX (\w+)", s))]
            sorts = any("TEMP B-TREE" in s and "ORDER BY" in s for s in steps)
            scans = any(re.match(r"SCAN \"?chats_conversation", s) for s in steps)
            out.append(
                (", ".join(used) or "no index")
                + (" + sort" if sorts else "")
                + (" + full scan" if scans else "")
            )
    return out


def main() -> None:
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()  # --help, and no other option
    home = django_on_fresh_sqlite()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from chats.models import Conversation, Status, Turn
    from chats.runtime.chats import default_agent
    from chats.signin import owner_ensure
    from together.listing import list_chats

    owner = owner_ensure()
    agent = default_agent()
    folder = str(home / "workspace")
    now = timezone.now()
    me = Conversation.objects.create(owner=owner, agent=agent, title="Me", folder=folder)
    special = Conversation.objects.bulk_create(
        [
            Conversation(
                owner=owner,
                agent=agent,
                title=f"Busy {n}" if n < WORKING else f"Needs you {n}",
                folder=folder,
                public_id=f"c_s{n}",
                status=Status.WORKING if n < WORKING else Status.NEEDS_YOU,
                last_interaction_at=now - timedelta(hours=n),
            )
            for n in range(WORKING + NEEDS_YOU)
        ]
    )
    Turn.objects.bulk_create(
        [
            Turn(conversation=c, number=1, folder=folder, files_changed=[f"{folder}/f{n}.py"])
            for n, c in enumerate(special[:WORKING])
        ]
    )
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode")
    print(
        f"database: SQLite ({cursor.fetchone()[0]}); {WORKING} working, {NEEDS_YOU} need you, "
        f"{ARCHIVED_SHARE:.0%} archived, activity over {SPREAD.days} days"
    )
    medians = {}
    made = 0
    for size in SIZES:
        grow(owner=owner, agent=agent, folder=folder, start=made, stop=size, now=now)
        made = size
        cursor.execute("ANALYZE")
        with CaptureQueriesContext(connection) as captured:
            look = list_chats(conversation=me, now=now)
        assert look.working == WORKING and look.needs_you == NEEDS_YOU, look
        queries = len(captured.captured_queries)
        used = plans([q["sql"] for q in captured.captured_queries])
        medians[size] = ms = median_ms(lambda: list_chats(conversation=me, now=now), runs=100)
        print(
            f"  {size:>7,} chats: {ms:.3f} ms, {queries} queries, {len(look.rows)} rows; "
            f"chat queries use: {' | '.join(used)}"
        )
    top = SIZES[-1]
    ms = medians[top]
    flat = ms / medians[SIZES[0]]
    ok = ms <= GOAL_MS and queries <= GOAL_QUERIES
    print(
        f"list_chats median at {top:,} chats: {ms:.2f} ms (goal ≤ {GOAL_MS:.0f} ms, "
        f"{ms / GOAL_MS:.2f}x of goal), {queries} queries (goal ≤ {GOAL_QUERIES}), "
        f"{flat:.1f}x the {SIZES[0]:,}-chat median {'PASS' if ok else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
