"""What a reply's end costs when it leaves nothing to do: no one waits for the chat, nothing
is queued, it is no routine's run. Every reply ends so, and its hooks run after the commit,
in SQLite's writer turn: each look they spend is one the door's next message waits behind.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chats.models import Conversation, Origin, QueuedInput, Turn
from chats.runtime import turns
from tests.gateway.test_inbound_cost import on, statements

pytestmark = pytest.mark.django_db


@pytest.fixture
def ended(owner, agent, workspace) -> Turn:
    chat = Conversation.objects.create(
        owner=owner, agent=agent, title="Mine", folder=str(workspace), origin=Origin.OWN
    )
    Turn.objects.create(conversation=chat, number=1, folder=chat.folder, ended_at=timezone.now())
    return Turn.objects.select_related("conversation").get(conversation=chat)


def hooks_run(turn: Turn) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        turns._after_turn_end(turn)
    return statements(captured.captured_queries)


def test_a_reply_that_leaves_nothing_to_do_ends_in_four_plain_queries(ended):
    ran = hooks_run(ended)
    assert len(ran) <= 4, "\n".join(ran)
    assert not on("gateway_routinerun", ran)  # it is no routine's run: its origin says so
    assert not on("chats_conversation", ran)  # nothing queued: the chat is not locked
    asked = on("chats_queuedinput", ran)  # whether anything is queued; nothing taken
    assert len(asked) == 1 and asked[0].startswith("SELECT 1 AS"), asked


def test_a_message_queued_behind_the_reply_starts_the_next_one(ended):
    QueuedInput.objects.create(conversation=ended.conversation, text="and then?")
    turns._after_turn_end(ended)
    started = Turn.objects.filter(conversation=ended.conversation, ended_at__isnull=True).get()
    assert started.number == 2
    assert not QueuedInput.objects.filter(taken_at__isnull=True).exists()
