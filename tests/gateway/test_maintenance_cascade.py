"""A pruned session goes with everything that is its own, and what others keep of it is kept,
pointing nowhere, exactly as one chat's delete leaves it.

Maintenance deletes a batch by a statement per table (``_delete_by_statement``), not by
Django's collector, which read every reply of the batch into Python; these tests hold it to
what the collector did.
"""

from __future__ import annotations

from django.db import connection

from chats.gateway.maintenance import maintenance_run
from chats.gateway.models import InboundRecord, OutboxMessage, OutboxState
from chats.models import Conversation, Entry, EntryRole, Step, Task, TaskState, Turn
from tests.factories import (
    ChatMessageFactory,
    ConversationFactory,
    StepFactory,
    TaskFactory,
    TurnFactory,
    WaitFactory,
)
from tests.gateway.test_maintenance import NOW, session
from together.models import ChatMessage, Wait, WaitState
from together.past import person_search


def lived_in(owner, agent, key, *, days_ago):
    """A session with two replies, a step each, their words, a task, a receipt and a reply
    on its way out."""
    chat = session(owner, agent, key, days_ago=days_ago)
    for number in (1, 2):
        turn = TurnFactory(conversation=chat, number=number, ended=True)
        StepFactory(turn=turn)
        for role in (EntryRole.PERSON, EntryRole.ASSISTANT):
            Entry.objects.create(
                conversation=chat,
                turn=turn,
                seq=chat.entries.count() + 1,
                role=role,
                text=f"{key} deploy number {number}",
            )
    TaskFactory(parent=chat, state=TaskState.DONE)
    InboundRecord.objects.create(
        channel="telegram", account_id="bot", message_id=key, session_key=chat.session_key,
        agent_slug="main", rule="dm", outcome="routed", conversation=chat, received_at=NOW,
    )  # fmt: skip
    OutboxMessage.objects.create(
        conversation=chat, turn=turn, channel="telegram", account_id="bot",
        target={"chat_id": 1}, text="Done.", state=OutboxState.PENDING,
    )  # fmt: skip
    return chat


def _theirs(chat) -> dict[str, int]:
    return {
        "turns": Turn.objects.filter(conversation=chat).count(),
        "steps": Step.objects.filter(turn__conversation=chat).count(),
        "entries": Entry.objects.filter(conversation=chat).count(),
        "tasks": Task.objects.filter(parent=chat).count(),
        "receipts": InboundRecord.objects.filter(conversation=chat).count(),
        "outbox": OutboxMessage.objects.filter(conversation=chat).count(),
    }


def test_a_pruned_session_takes_its_replies_steps_words_and_tasks_and_the_kept_one_keeps_all(
    owner, agent
):
    dead = lived_in(owner, agent, "dm:telegram:dead", days_ago=40)
    alive = lived_in(owner, agent, "dm:telegram:alive", days_ago=1)
    report = maintenance_run(now=NOW)
    assert report.pruned == 1
    assert not Conversation.objects.filter(pk=dead.pk).exists()
    assert _theirs(dead) == dict.fromkeys(_theirs(dead), 0)
    assert _theirs(alive) == {
        "turns": 2, "steps": 2, "entries": 4, "tasks": 1, "receipts": 1, "outbox": 1,
    }  # fmt: skip
    assert Entry.objects.filter(conversation=alive, turn__isnull=False).count() == 4


def test_what_others_keep_of_a_pruned_session_is_kept_pointing_nowhere(owner, agent):
    """Its receipt and its reply still on the way out, another chat's message read in one of
    its replies, a task's chat it started, a chat it was the parent of: all kept, their
    link to it set null, as Django's ``SET_NULL`` says."""
    dead = lived_in(owner, agent, "dm:telegram:dead", days_ago=40)
    other = ConversationFactory(owner=owner, agent=agent)
    child = ConversationFactory(owner=owner, agent=agent, parent=dead)
    read = ChatMessageFactory(sender=other, receiver=other, read_in_turn=dead.turns.first())
    started = TaskFactory(parent=other, chat=dead, state=TaskState.DONE)
    outgoing = OutboxMessage.objects.get(conversation=dead)
    receipt = InboundRecord.objects.get(conversation=dead)

    assert maintenance_run(now=NOW).pruned == 1

    outgoing.refresh_from_db()
    assert (outgoing.state, outgoing.conversation_id, outgoing.turn_id) == ("pending", None, None)
    receipt.refresh_from_db()
    assert receipt.conversation_id is None
    child.refresh_from_db()
    assert child.parent_id is None
    assert ChatMessage.objects.get(pk=read.pk).read_in_turn_id is None
    assert Task.objects.get(pk=started.pk).chat_id is None


def test_a_chat_waiting_for_a_pruned_session_is_woken(
    owner, agent, django_capture_on_commit_callbacks
):
    dead = session(owner, agent, "dm:telegram:dead", days_ago=40)
    waiter = ConversationFactory(owner=owner, agent=agent, title="Release notes")
    wait = WaitFactory(waiter=waiter, target_chat=dead, target_title="Old session")
    with django_capture_on_commit_callbacks(execute=True):
        assert maintenance_run(now=NOW).pruned == 1
    wait = Wait.objects.get(pk=wait.pk)
    assert (wait.state, wait.target_chat_id) == (WaitState.WOKEN, None)
    assert "which this chat was waiting for, was deleted" in waiter.entries.last().text


def test_the_search_index_still_matches_the_transcripts_after_a_prune(owner, agent):
    lived_in(owner, agent, "dm:telegram:dead", days_ago=40)
    alive = lived_in(owner, agent, "dm:telegram:alive", days_ago=1)
    maintenance_run(now=NOW)
    with connection.cursor() as cursor:  # raises if the index holds a row its content lacks
        cursor.execute(
            "INSERT INTO together_entry_fts(together_entry_fts, rank) VALUES ('integrity-check', 1)"
        )
    found = person_search(owner_id=owner.pk, query="deploy")
    assert {hit.chat_id for hit in found.hits} == {alive.public_id}


def test_a_long_ago_session_is_pruned_the_same_way_in_batches(owner, agent):
    dead = [lived_in(owner, agent, f"dm:telegram:p{n}", days_ago=40) for n in range(5)]
    report = maintenance_run(now=NOW, batch=2)
    assert report.pruned == 5
    for chat in dead:
        assert _theirs(chat) == dict.fromkeys(_theirs(chat), 0)
    assert not Step.objects.exists() and not Turn.objects.exists()
    assert OutboxMessage.objects.filter(conversation__isnull=True).count() == 5
