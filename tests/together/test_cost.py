"""The reader runs at every step and list_chats on demand: their queries don't grow with the chats."""

from __future__ import annotations

import pytest
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
