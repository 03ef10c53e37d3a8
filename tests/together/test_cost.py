"""The reader runs at every step and list_chats on demand: their queries don't grow with the chats."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chats.models import Conversation, Status, Turn
from together.listing import list_chats
from together.reader import reader

CHATS = 10_000
WORKING = 50


@pytest.fixture
def crowd(owner, agent, workspace):
    now = timezone.now()
    Conversation.objects.bulk_create(
        [
            Conversation(
                owner=owner,
                agent=agent,
                title=f"Chat {n}",
                folder=str(workspace),
                public_id=f"c_bulk{n}",
                status=Status.WORKING if n < WORKING else Status.IDLE,
                last_interaction_at=now,
            )
            for n in range(CHATS)
        ],
        batch_size=2_000,
    )
    working = Conversation.objects.filter(status=Status.WORKING).order_by("pk")
    Turn.objects.bulk_create(
        [
            Turn(
                conversation=c, number=1, folder=c.folder, files_changed=[f"{workspace}/f{c.pk}.py"]
            )
            for c in working
        ]
    )
    return working.first()


def test_the_reader_at_a_step_boundary_runs_at_most_three_queries(
    crowd, django_assert_max_num_queries
):
    me = crowd
    turn = Turn.objects.select_related("conversation").get(conversation=me)
    with django_assert_max_num_queries(3):
        notes = reader(turn, False)
    assert len(notes) == 4  # it really read the other working chats


def test_list_chats_runs_at_most_five_queries(crowd, django_assert_max_num_queries):
    with django_assert_max_num_queries(5):
        look = list_chats(conversation=crowd)
    assert look.working == WORKING - 1
    assert len(look.rows) == 12


@pytest.fixture
def a_month_of_chats(owner, agent, workspace):
    """A store as people have one (issue 17 item 3): 5 chats working, 3 that need you, a
    fifth of the rest archived, and the last activity spread over 30 days, so fewer than
    twelve are busy and list_chats must find the recent ones among the many idle ones."""
    now = timezone.now()
    rng = random.Random(17)
    special = Conversation.objects.bulk_create(
        [
            Conversation(
                owner=owner,
                agent=agent,
                title=f"Special {n}",
                folder=str(workspace),
                public_id=f"c_sp{n}",
                status=Status.WORKING if n < 5 else Status.NEEDS_YOU,
            )
            for n in range(8)
        ]
    )
    Turn.objects.bulk_create([Turn(conversation=c, number=1, folder=c.folder) for c in special[:5]])
    Conversation.objects.bulk_create(
        [
            Conversation(
                owner=owner,
                agent=agent,
                title=f"Chat {n}",
                folder=str(workspace),
                public_id=f"c_month{n}",
                archived=rng.random() < 0.2,
                last_interaction_at=now - timedelta(days=30) * rng.random(),
            )
            for n in range(2_000)
        ],
        batch_size=2_000,
    )
    return Conversation.objects.create(owner=owner, agent=agent, title="Me", folder=str(workspace))


def _plan(sql: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql)
        return [row[-1] for row in cursor.fetchall()]


def test_list_chats_finds_the_recent_chats_by_index_in_order_on_a_month_of_chats(
    a_month_of_chats, django_assert_max_num_queries
):
    """``archived=False`` is written ``NOT "archived"``, on which SQLite can't seek the
    column of a plain index: it skip-scanned every chat and sorted them. The partial index
    ``chat_owner_unarchived`` has that same term for its WHERE, so it is read in order."""
    with django_assert_max_num_queries(5), CaptureQueriesContext(connection) as captured:
        look = list_chats(conversation=a_month_of_chats)
    assert look.working == 5 and look.needs_you == 3 and len(look.rows) == 12
    recent = [q["sql"] for q in captured if '"last_interaction_at" >=' in q["sql"]]
    assert len(recent) == 1
    plan = _plan(recent[0])
    assert any("USING INDEX chat_owner_unarchived" in step for step in plan), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan
    for query in captured:  # no query of the look walks the chats or sorts them
        for step in _plan(query["sql"]):
            assert not step.startswith("SCAN chats_conversation"), (query["sql"], step)
            assert "TEMP B-TREE" not in step, (query["sql"], step)
