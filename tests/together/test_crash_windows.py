"""No crash window between what Conch commits and what it tells a chat.

A crash is simulated the way a killed server leaves things: an exception that no
code catches (``Crash``, a BaseException) raised inside the transaction that
would have committed, with the runner's claim left on the reply; the restart is
``turns_recover`` (what ``conch serve`` runs at start-up), then ``drain``.
"""

from __future__ import annotations

import pytest
from django.db import OperationalError

from chats.models import Entry, EntryKind, StartedBy, Step, Turn, TurnState
from chats.runtime import stepping
from chats.runtime.claims import turns_recover
from chats.runtime.runner import drain
from tests.factories import ChatFactory
from tests.together.conftest import look, message, wait_chat
from together import waits
from together.models import ChatMessage, MessageState, Wait, WaitState


class Crash(BaseException):
    """The process dying at this line: nothing catches it, nothing after it runs."""


def _crash(**_):
    raise Crash


def heard(chat, words: str) -> int:
    """How many times ``chat`` was told ``words``: in its transcript and its steps' results."""
    entries = Entry.objects.filter(conversation=chat, text__contains=words).count()
    steps = Step.objects.filter(turn__conversation=chat, result__contains=words).count()
    return entries + steps


@pytest.mark.parametrize("target_ends", ["before the restart", "after the restart"])
def test_a_crash_as_the_waiting_reply_lets_go_never_answers_the_wait_twice(
    live, monkeypatch, target_ends
):
    target = ChatFactory(title="Slow target", script=[[look(), {"say": "Target finished."}]])
    live.start(target)
    waiter = ChatFactory(title="Waiter", script=[[wait_chat(target)], [{"say": "Woken."}]])
    live.start(waiter)
    # The runner dies as the reply lets go of its turn: after wait_for ran, before its end commits.
    monkeypatch.setattr(stepping, "turn_end_locked", _crash)
    with pytest.raises(Crash):
        live.step(waiter, 1)
    monkeypatch.undo()
    assert Turn.objects.get(conversation=waiter).claimed_by == "stage"  # its runner is gone

    if target_ends == "before the restart":
        live.step(target, 3)
        assert Turn.objects.get(conversation=target).state == TurnState.COMPLETED
    turns_recover()
    live.step(waiter, 1)  # the restarted runner plays the reply on from where it was cut off
    if target_ends == "after the restart":
        assert Wait.objects.get().state == WaitState.WAITING
        live.step(target, 3)
    drain()

    # However the crash fell, the waiter heard how its target ended exactly once...
    assert heard(waiter, "“Slow target” finished its reply") == 1
    assert heard(waiter, "Target finished.") == 1
    assert not Wait.objects.filter(state=WaitState.WAITING).exists()
    # ...and a reply started by the wait said what comes after it, once, if the wait was made.
    woken = Turn.objects.filter(conversation=waiter, started_by=StartedBy.WAIT)
    said = Entry.objects.filter(conversation=waiter, text="Woken.")
    assert woken.count() == said.count() == Wait.objects.count()
    if target_ends == "after the restart":
        assert woken.get().state == TurnState.COMPLETED


def test_a_lock_error_between_reading_a_message_and_writing_its_words_loses_nothing(
    live, monkeypatch
):
    receiver = ChatFactory(title="Receiver", script=[[look(), look(), look()]])
    sender = ChatFactory(title="Sender", script=[[message(receiver, "The build is green.")]])
    live.start(receiver)
    live.step(receiver, 1)
    live.start(sender)
    live.step(sender, 1)
    assert ChatMessage.objects.get().state == MessageState.WAITING

    real = stepping.entry_append

    def locked_out(**kwargs):
        if kwargs.get("kind") == EntryKind.NOTE:
            raise OperationalError("could not obtain lock on row in relation chats_entry")
        return real(**kwargs)

    monkeypatch.setattr(stepping, "entry_append", locked_out)
    with pytest.raises(OperationalError):
        live.step(receiver, 1)
    monkeypatch.undo()
    # Not read: the sender's card can't say read while the words are nowhere.
    assert ChatMessage.objects.get().state == MessageState.WAITING
    assert heard(receiver, "The build is green.") == 0

    Turn.objects.filter(conversation=receiver).update(claimed_by="")
    live.step(receiver, 1)
    assert ChatMessage.objects.get().state == MessageState.READ
    assert heard(receiver, "The build is green.") == 1


def test_a_crash_while_a_message_is_taken_in_leaves_it_waiting_and_it_is_read_after(
    live, monkeypatch
):
    receiver = ChatFactory(title="Receiver", script=[[look()], [look()]])
    sender = ChatFactory(
        title="Sender", script=[[message(receiver, "Rebase onto main first.", start_reply=True)]]
    )
    live.start(sender)
    real = stepping.entry_append

    def dies(**kwargs):
        if kwargs.get("kind") == EntryKind.NOTE:
            raise Crash
        return real(**kwargs)

    monkeypatch.setattr(stepping, "entry_append", dies)
    with pytest.raises(Crash):
        drain()
    monkeypatch.undo()
    assert ChatMessage.objects.get().state == MessageState.WAITING
    turns_recover()
    drain()
    assert ChatMessage.objects.get().state == MessageState.READ
    assert heard(receiver, "Rebase onto main first.") == 1


def test_a_crash_as_a_wait_wakes_its_chat_leaves_it_waiting_and_the_next_look_wakes_it(
    live, monkeypatch
):
    """The wait is woken in the transaction that starts the reply it wakes: a process
    that dies between the two can't leave a wait marked woken with nothing woken."""
    target = ChatFactory(title="Slow target", script=[[look(), {"say": "Target finished."}]])
    live.start(target)
    waiter = ChatFactory(title="Waiter", script=[[wait_chat(target)], [{"say": "Woken."}]])
    live.start(waiter)
    live.step(waiter, 2)
    assert Wait.objects.get().state == WaitState.WAITING
    # The process dies as the waking reply is started, after the wait was found done.
    monkeypatch.setattr(waits, "turn_start", _crash)
    with pytest.raises(Crash):
        live.step(target, 3)  # its reply ends, and the waits on it are looked at
    monkeypatch.undo()
    assert Turn.objects.get(conversation=target).state == TurnState.COMPLETED

    assert Wait.objects.get().state == WaitState.WAITING  # not woken: nothing was
    waits.sweep()  # the restarted process's look

    assert Wait.objects.get().state == WaitState.WOKEN
    drain()
    assert heard(waiter, "“Slow target” finished its reply") == 1
    assert Entry.objects.filter(conversation=waiter, text="Woken.").count() == 1
