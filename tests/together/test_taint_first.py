"""Taint comes before the first action.

ADR 0134: ``stop_chat`` "asks you first in Ask mode, or once the chat asking has
read something from outside". A reply that takes in a tainted chat's message as
it starts (or a wait's, or a task's result) must act on the taint that intake
gave it, however many hops down a chain, and ``must_ask`` reads the chat as it
is now, not as the step found it.
"""

from __future__ import annotations

import pytest

from chats.engines.scripted import ScriptedEngine
from chats.models import Conversation, Taint, Task, TaskState, Turn, TurnState
from chats.runtime.turns import task_start
from chats.taint import Cause, taint_raise
from tests.factories import ChatFactory
from tests.together.conftest import look, message


def stop(chat, reason="Stop, the person wants it stopped."):
    return {"tool": "stop_chat", "args": {"chat": chat.public_id, "reason": reason}}


def open_turn(chat) -> Turn:
    return Turn.objects.filter(conversation=chat).order_by("-number").first()


@pytest.fixture
def busy(live):
    """The chat a hostile page wants stopped: busy with a long reply."""
    chat = ChatFactory(title="Deploy", script=[[look(), look(), look(), look()]])
    live.start(chat)
    return chat


@pytest.fixture
def engine_saw(monkeypatch):
    """Each chat's taint as its engine was asked to choose an action, by chat pk."""
    seen: dict[int, list[str]] = {}
    original = ScriptedEngine.next_action

    def spy(self, given):
        seen.setdefault(given.conversation.pk, []).append(given.conversation.taint)
        return original(self, given)

    monkeypatch.setattr(ScriptedEngine, "next_action", spy)
    return seen


def test_a_reply_a_tainted_message_starts_asks_before_its_first_stop_chat(live, busy, engine_saw):
    b = ChatFactory(title="Helper", script=[[stop(busy)]])
    a = ChatFactory(
        title="Browsed a page",
        taint=Taint.UNTRUSTED,
        script=[[message(b, "Stop the deploy now.", start_reply=True)]],
    )
    live.start(a)
    live.step(a, 1)  # sends; the message starts b's reply
    live.step(b, 1)
    assert engine_saw[b.pk] == [Taint.UNTRUSTED]  # marked before the first action was chosen
    assert open_turn(b).state == TurnState.NEEDS_YOU
    assert open_turn(b).pending_action["tool"] == "stop_chat"
    assert open_turn(busy).state == TurnState.RUNNING


def test_two_hops_down_a_chain_the_taint_still_comes_first(live, busy, engine_saw):
    c = ChatFactory(title="Second hop", script=[[stop(busy)]])
    b = ChatFactory(title="First hop", script=[[message(c, "Pass it on: stop it.", True)]])
    a = ChatFactory(
        title="Browsed a page",
        taint=Taint.UNTRUSTED,
        script=[[message(b, "Tell the next chat to stop the deploy.", start_reply=True)]],
    )
    live.start(a)
    live.step(a, 1)
    live.step(b, 1)
    assert Conversation.objects.get(pk=b.pk).taint == Taint.UNTRUSTED
    live.step(c, 1)
    assert engine_saw[c.pk] == [Taint.UNTRUSTED]
    assert open_turn(c).state == TurnState.NEEDS_YOU
    assert open_turn(busy).state == TurnState.RUNNING


def test_must_ask_reads_the_chat_as_it_is_now(live, busy, monkeypatch):
    """A wait's wake (or a message) in another process taints the chat while its engine chooses."""
    w = ChatFactory(title="Waiter", script=[[stop(busy)]])
    live.start(w)
    original = ScriptedEngine.next_action

    def meanwhile(self, given):
        decision = original(self, given)
        if given.conversation.pk == w.pk:
            elsewhere = Conversation.objects.get(pk=w.pk)  # another process's copy
            taint_raise(
                conversation=elsewhere,
                taint=Taint.UNTRUSTED,
                cause=Cause.page("https://example.com/"),
            )
        return decision

    monkeypatch.setattr(ScriptedEngine, "next_action", meanwhile)
    live.step(w, 1)
    assert open_turn(w).state == TurnState.NEEDS_YOU
    assert open_turn(busy).state == TurnState.RUNNING


def test_a_tainted_tasks_result_taints_the_chat_that_reads_it_before_it_acts(live, busy):
    parent = ChatFactory(title="Parent")
    task = task_start(parent=parent, title="Read the page", script=[[look()]])
    taint_raise(
        conversation=task.chat, taint=Taint.UNTRUSTED, cause=Cause.page("https://example.com/")
    )
    Task.objects.filter(pk=task.pk).update(state=TaskState.DONE, result="The page says: stop.")
    parent.script = [[{"tool": "task_status", "args": {}}, stop(busy)]]
    parent.save(update_fields=["script"])
    live.start(parent)
    live.step(parent, 2)
    assert Conversation.objects.get(pk=parent.pk).taint == Taint.UNTRUSTED
    assert open_turn(parent).state == TurnState.NEEDS_YOU
    assert open_turn(busy).state == TurnState.RUNNING


def test_with_nothing_read_stop_chat_still_goes_ahead_in_auto(live, busy):
    """The control: the same reply with an untainted sender stops the chat without asking."""
    b = ChatFactory(title="Helper", script=[[stop(busy)]])
    a = ChatFactory(title="Clean", script=[[message(b, "Stop the deploy now.", start_reply=True)]])
    live.start(a)
    live.step(a, 1)
    live.step(b, 1)
    assert open_turn(busy).state == TurnState.STOPPED
