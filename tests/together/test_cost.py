"""What runs often costs the same however much there is: the reader at every step and
list_chats on demand don't grow with the chats, nor a look at the waits or an event with the waits."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chats import events
from chats.models import Conversation, Status, Task, TaskState, Turn
from chats.runtime import stepping
from tests.gateway.test_inbound_cost import on
from together import waits
from together.listing import list_chats
from together.messages import message_reader
from together.models import Wait, WaitKind, WaitState
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
    """A store as people have one: 5 chats working, 3 that need you, a
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
    assert any("INDEX chat_owner_unarchived (" in step for step in plan), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan
    for query in captured:  # no query of the look walks the chats or sorts them
        for step in _plan(query["sql"]):
            assert not step.startswith("SCAN chats_conversation"), (query["sql"], step)
            assert "TEMP B-TREE" not in step, (query["sql"], step)


def _waiting(owner, agent, workspace, n: int) -> None:
    """``n`` chats each waiting for another that still works (alternately a chat and a task)."""
    for i in range(n):
        waiter = Conversation.objects.create(
            owner=owner, agent=agent, title=f"Waiter {i}", folder=str(workspace)
        )
        target = Conversation.objects.create(
            owner=owner, agent=agent, title=f"Target {i}", folder=str(workspace)
        )
        Turn.objects.create(conversation=target, number=1, folder=target.folder)
        if i % 2:
            task = Task.objects.create(
                parent=waiter, chat=target, title=f"Task {i}", state=TaskState.RUNNING
            )
            kind, public_id, fields = WaitKind.TASK, task.public_id, {"target_task": task}
        else:
            kind, public_id, fields = WaitKind.CHAT, target.public_id, {"target_chat": target}
        Wait.objects.create(
            waiter=waiter, kind=kind, target_public_id=public_id, target_title="T", **fields
        )


@pytest.mark.parametrize("n", [1, 50])
def test_the_look_every_30_seconds_is_one_query_whatever_the_number_of_waits(
    n, owner, agent, workspace
):
    """Each wait comes with whether its target still works: no query per wait."""
    _waiting(owner, agent, workspace, n)
    with CaptureQueriesContext(connection) as captured:
        woken = waits.waits_check()
    assert woken == []  # every target still works
    assert len(captured) == 1, [q["sql"] for q in captured]
    assert Wait.objects.filter(state=WaitState.WAITING).count() == n


@pytest.mark.parametrize("at_start", [True, False], ids=["a reply's start", "a step"])
def test_a_step_with_no_message_waiting_asks_one_exists(at_start, owner, agent, workspace):
    """The message reader runs at every step of every reply: with nothing waiting (nearly
    always) it costs one EXISTS, not the read of each message with its sender."""
    chat = Conversation.objects.create(owner=owner, agent=agent, title="C", folder=str(workspace))
    turn = Turn.objects.create(conversation=chat, number=1, folder=chat.folder)
    turn = Turn.objects.select_related("conversation").get(pk=turn.pk)
    with CaptureQueriesContext(connection) as captured:
        assert message_reader(turn, at_start) == []
    assert [q["sql"].split(" FROM ")[0] for q in captured] == ['SELECT 1 AS "a"']


@pytest.mark.parametrize("at_start", [True, False], ids=["a reply's start", "a step"])
def test_a_step_with_nothing_to_take_in_neither_locks_its_chat_nor_writes(
    at_start, crowd, owner, agent, tmp_path_factory
):
    """Every step asks the note providers: with nothing for it (no message, no other chat
    changing files here), they say so with no transaction, so no turn of SQLite's writer,
    and the chat's row is not locked."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # 50 chats change files in the crowd's
    chat = Conversation.objects.create(owner=owner, agent=agent, title="C", folder=str(elsewhere))
    turn = Turn.objects.create(conversation=chat, number=1, folder=chat.folder)
    turn = Turn.objects.select_related("conversation").get(pk=turn.pk)
    with CaptureQueriesContext(connection) as captured:
        assert stepping._take_in(turn, at_start) == []
    sqls = [q["sql"] for q in captured]
    assert not [s for s in sqls if s.startswith(("SAVEPOINT", "BEGIN"))], sqls
    assert not [s for s in sqls if s.startswith(("INSERT", "UPDATE"))], sqls
    assert not on("chats_conversation", sqls), sqls  # the chat's row is not read to lock it
    assert len(sqls) <= 2, sqls  # whether a message waits; the working chats' places


def _waiting_on(owner, agent, workspace, *, task: bool) -> tuple[Wait, Turn]:
    """A chat waiting for a target that has just stopped working (its one reply ended), or
    for a task that target ran; and that target's ended reply."""
    waiter = Conversation.objects.create(owner=owner, agent=agent, title="W", folder=str(workspace))
    target = Conversation.objects.create(owner=owner, agent=agent, title="T", folder=str(workspace))
    ended = Turn.objects.create(
        conversation=target, number=1, folder=target.folder, ended_at=timezone.now()
    )
    if task:
        done = Task.objects.create(parent=waiter, chat=target, title="Job", state=TaskState.DONE)
        kind, public_id, fields = WaitKind.TASK, done.public_id, {"target_task": done}
    else:
        kind, public_id, fields = WaitKind.CHAT, target.public_id, {"target_chat": target}
    wait = Wait.objects.create(
        waiter=waiter, kind=kind, target_public_id=public_id, target_title="T", **fields
    )
    return wait, ended


def test_a_reply_that_ends_with_no_one_waiting_for_its_chat_costs_one_query(
    owner, agent, workspace
):
    """Every reply's end asks whether a wait is on its chat: one plain query, not the look
    with each wait's target and whether it still works (a few ms to build, every reply)."""
    _waiting(owner, agent, workspace, 20)
    nobody = Conversation.objects.create(
        owner=owner, agent=agent, title="Nobody waits", folder=str(workspace)
    )
    ended = Turn.objects.create(
        conversation=nobody, number=1, folder=nobody.folder, ended_at=timezone.now()
    )
    with CaptureQueriesContext(connection) as captured:
        waits.after_turn_end(ended)
    assert len(captured) == 1, [q["sql"] for q in captured]
    assert "target_working" not in captured[0]["sql"]
    assert Wait.objects.filter(state=WaitState.WAITING).count() == 20


@pytest.mark.parametrize("task", [False, True], ids=["chat", "its task"])
def test_a_reply_that_ends_wakes_the_wait_on_its_chat_or_its_task(task, owner, agent, workspace):
    """The end of the reply wakes the wait by itself, with no event to nudge it."""
    wait, ended = _waiting_on(owner, agent, workspace, task=task)
    waits.after_turn_end(ended)
    wait.refresh_from_db()
    assert wait.state == WaitState.WOKEN


def test_an_event_no_one_waits_for_is_one_indexed_query(owner, agent, workspace):
    """Every status event asks whether someone waits for its chat: by the ``wait_target``
    index, not by reading every waiting wait."""
    _waiting(owner, agent, workspace, 50)
    nobody = Conversation.objects.create(
        owner=owner, agent=agent, title="Nobody waits", folder=str(workspace)
    )
    status = events.Event(
        type=events.STATUS, owner_id=owner.pk, seq=1, conversation_id=nobody.public_id
    )
    task = events.Event(
        type=events.TASK_CHANGED,
        owner_id=owner.pk,
        seq=2,
        conversation_id=nobody.public_id,
        data={"task": "t_nobody"},
    )
    for event in (status, task):
        with CaptureQueriesContext(connection) as captured:
            waits.on_event(event)
        assert len(captured) == 1, [q["sql"] for q in captured]
        plan = _plan(captured[0]["sql"])
        assert any("INDEX wait_target (" in step for step in plan), plan
        assert not any(step.startswith("SCAN") for step in plan), plan
