"""The reader at a step boundary and list_chats, with 10,000 chats of which 50 are working.

Judged by: the reader's median (target ≤ 1 ms on SQLite) and its ratio to a
single primary-key fetch on the same database; list_chats' median (target ≤ 5 ms)
when more than twelve chats are busy, so the busy ones fill its rows. How
list_chats does on a store as people have one (few busy, activity spread over
a month, up to 100,000 chats) is ``bench_list_chats.py``'s to say.

    .venv/bin/python bench/bench_together.py
"""

from __future__ import annotations

import argparse

from _setup import django_on_fresh_sqlite, median_ms

CHATS = 10_000
WORKING = 50
READER_GOAL_MS = 1.0
LISTING_GOAL_MS = 5.0


def main() -> None:
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()  # --help, and no other option
    home = django_on_fresh_sqlite()
    from django.db import connection
    from django.utils import timezone

    from chats.models import Conversation, Status, Turn
    from chats.runtime.chats import default_agent
    from chats.signin import owner_ensure
    from together.listing import list_chats
    from together.reader import reader

    owner = owner_ensure()
    agent = default_agent()
    folder = str(home / "workspace")
    now = timezone.now()
    Conversation.objects.bulk_create(
        [
            Conversation(
                owner=owner,
                agent=agent,
                title=f"Chat {n}",
                folder=folder,
                public_id=f"c_b{n}",
                status=Status.WORKING if n < WORKING else Status.IDLE,
                last_interaction_at=now,
            )
            for n in range(CHATS)
        ],
        batch_size=2_000,
    )
    working = list(Conversation.objects.filter(status=Status.WORKING).order_by("pk"))
    Turn.objects.bulk_create(
        [
            Turn(conversation=c, number=1, folder=folder, files_changed=[f"{folder}/f{c.pk}.py"])
            for c in working
        ]
    )
    me = working[0]
    turn = Turn.objects.select_related("conversation").get(conversation=me)
    # A usual step boundary: the other chats were said earlier this turn (not yet four lines),
    # so the reader reads every open turn, finds nothing new and writes nothing.
    said_before = {"keys": [f"chat:{c.public_id}" for c in working], "count": 1}

    def one_reader_step():
        turn.notes_said = dict(said_before)
        assert reader(turn, False) == []

    # A step at which it speaks: four new lines, and the write that remembers them.
    def one_reader_step_that_speaks():
        turn.notes_said = {"keys": [], "count": 0}
        assert len(reader(turn, False)) == 4

    def one_pk_fetch():
        Conversation.objects.get(pk=me.pk)

    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode")
    reader_ms = median_ms(one_reader_step)
    speaking_ms = median_ms(one_reader_step_that_speaks)
    pk_ms = median_ms(one_pk_fetch)
    listing_ms = median_ms(lambda: list_chats(conversation=me), runs=100)
    print(f"chats: {CHATS}, working: {WORKING}, database: SQLite ({cursor.fetchone()[0]})")
    print(f"reader median when it speaks (4 lines + 1 write): {speaking_ms:.3f} ms")
    print(f"primary-key fetch median: {pk_ms:.3f} ms")
    print(
        f"reader median: {reader_ms:.3f} ms (goal ≤ {READER_GOAL_MS:g} ms, "
        f"{reader_ms / READER_GOAL_MS:.2f}x of goal; {reader_ms / pk_ms:.1f}x a primary-key "
        f"fetch) {'PASS' if reader_ms <= READER_GOAL_MS else 'FAIL'}"
    )
    print(
        f"list_chats median with {WORKING} working: {listing_ms:.3f} ms (goal ≤ "
        f"{LISTING_GOAL_MS:g} ms, {listing_ms / LISTING_GOAL_MS:.2f}x of goal) "
        f"{'PASS' if listing_ms <= LISTING_GOAL_MS else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
