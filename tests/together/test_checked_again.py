"""Messages that can no longer be delivered start nothing, approvals are looked at
again when they run, and a chain whose replies are spent says so and isn't "on its way in"."""

from __future__ import annotations

import pytest

from chats import hooks
from chats.models import Entry, Inbound, Mode, Origin, StartedBy, Step, Taint, Turn, TurnState
from chats.refusals import IN_PLAN_MODE_NOW, NOT_IN_SET, NOT_OFFERED_NOW, for_person
from chats.runtime.chats import conversation_set_mode
from chats.runtime.runner import drain
from chats.runtime.turns import turn_approve, turn_deny
from chats.taint import Cause, taint_raise
from chats.toolsets import tool_set_for
from tests.factories import ChatFactory
from tests.together.conftest import look, message, wait_chat
from together import messages as msgs
from together import waits
from together.messages import MESSAGE_LIMITS, NotDelivered, held_message_pass, inbound_set
from together.models import Chain, ChatMessage, MessageState, Wait, WaitState

STRANGER = Cause.stranger(channel="telegram", sender="mallory")


def answers(chat, tool="message_chat"):
    return list(
        Step.objects.filter(turn__conversation=chat, tool=tool)
        .order_by("turn__number", "number")
        .values_list("result", "error")
    )


def held_start_reply_message(live, **receiver):
    """A message asking to start a reply, held for the person by B."""
    b = ChatFactory(title="B", script=[[look()]], inbound=Inbound.HOLD, **receiver)
    a = ChatFactory(title="A", script=[[message(b, "please look", start_reply=True)]])
    live.start(a)
    drain()
    held = ChatMessage.objects.get()
    assert held.state == MessageState.HELD
    return a, b, held


def assert_nothing_started(b, held):
    assert not Turn.objects.filter(conversation=b).exists()
    assert Chain.objects.get(pk=held.chain_id).replies_started == 0


# ---------------------------------------------------------------------------
# Checked again before it starts a reply


def test_pass_it_on_to_a_chat_that_turned_messages_away_starts_nothing_and_says_why(live):
    _, b, held = held_start_reply_message(live)
    inbound_set(conversation=b, inbound=Inbound.REFUSE)
    with pytest.raises(NotDelivered) as refused:
        held_message_pass(message=held)
    drain()
    held.refresh_from_db()
    assert held.state == MessageState.NOT_DELIVERED
    assert held.reason == "That chat turned messages from other chats away."
    assert str(refused.value) == msgs.ERR_NOT_DELIVERED.format(why=held.reason)
    assert_nothing_started(b, held)


def test_pass_it_on_after_someone_elses_words_came_in_starts_nothing(live):
    _, b, held = held_start_reply_message(live, chat_app=True)
    taint_raise(conversation=b, taint=Taint.PERSON, cause=STRANGER)
    with pytest.raises(NotDelivered, match="Someone else's words came into that chat"):
        held_message_pass(message=held)
    drain()
    held.refresh_from_db()
    assert held.state == MessageState.NOT_DELIVERED
    assert_nothing_started(b, held)


def test_a_start_reply_message_to_a_busy_chat_that_then_turns_messages_away_starts_nothing(live):
    b = ChatFactory(title="B", script=[[look(), look()], [look()]])
    live.start(b)
    live.step(b, 1)
    a = ChatFactory(title="A", script=[[message(b, "when you're done", start_reply=True)]])
    taint_raise(
        conversation=a, taint=Taint.UNTRUSTED, cause=Cause.page("https://example.com/")
    )  # read only as a reply starts
    live.start(a)
    live.step(a, 2)
    sent = ChatMessage.objects.get()
    assert sent.state == MessageState.WAITING
    inbound_set(conversation=b, inbound=Inbound.REFUSE)
    drain()  # B's own reply ends; the message would start the next one
    sent.refresh_from_db()
    assert sent.state == MessageState.NOT_DELIVERED
    assert sent.reason == "That chat turned messages from other chats away."
    assert list(Turn.objects.filter(conversation=b).values_list("started_by", flat=True)) == [
        StartedBy.PERSON
    ]
    assert Chain.objects.get(pk=sent.chain_id).replies_started == 0


def test_a_start_reply_message_to_a_chat_that_now_holds_is_held_not_started(live):
    b = ChatFactory(title="B", script=[[look(), look()], [look()]])
    live.start(b)
    live.step(b, 1)
    a = ChatFactory(title="A", script=[[message(b, "when you're done", start_reply=True)]])
    taint_raise(conversation=a, taint=Taint.UNTRUSTED, cause=Cause.page("https://example.com/"))
    live.start(a)
    live.step(a, 2)
    inbound_set(conversation=b, inbound=Inbound.HOLD)
    drain()
    sent = ChatMessage.objects.get()
    assert sent.state == MessageState.HELD
    assert Turn.objects.filter(conversation=b).count() == 1
    held_message_pass(message=sent)  # the person lets it in: now it starts the reply
    drain()
    assert Turn.objects.filter(conversation=b, started_by=StartedBy.MESSAGE).count() == 1


def test_pass_it_on_in_words_at_the_door(client, owner, live):
    _, b, held = held_start_reply_message(live)
    inbound_set(conversation=b, inbound=Inbound.REFUSE)
    client.force_login(owner)
    response = client.post(
        f"/api/conversations/{b.public_id}/messages/{held.message_id}",
        {"action": "pass"},
        headers={"hx-request": "true"},
    )
    assert response.status_code == 409
    assert "Not passed on: That chat turned messages from other chats away." in response.text
    held.refresh_from_db()
    assert held.state == MessageState.NOT_DELIVERED
    assert_nothing_started(b, held)


# ---------------------------------------------------------------------------
# An approval is looked at again when its step runs


def stop_asked(live):
    b = ChatFactory(title="B", script=[[look(), look(), look()]])
    live.start(b)
    live.step(b, 1)
    a = ChatFactory(
        title="A",
        mode=Mode.ASK,
        script=[[{"tool": "stop_chat", "args": {"chat": b.public_id, "reason": "r"}}, look()]],
    )
    live.start(a)
    live.step(a, 2)
    turn = Turn.objects.get(conversation=a)
    assert turn.state == TurnState.NEEDS_YOU
    return a, b, turn


def test_an_approved_stop_chat_does_not_run_once_the_chat_is_in_plan_mode(live):
    a, b, turn = stop_asked(live)
    turn_approve(turn=turn)
    conversation_set_mode(conversation=a, mode=Mode.PLAN)  # in the same moment
    live.step(a, 1)
    assert Turn.objects.get(conversation=b).state == TurnState.RUNNING
    result, error = answers(a, "stop_chat")[-1]
    assert (result, error) == ("", IN_PLAN_MODE_NOW.for_model(tool="stop_chat"))
    assert (
        for_person(error) == "Not run: you approved stop_chat, but this chat is in Plan mode now."
    )


def someone_else_comes_in(chat):
    chat.origin = Origin.CHAT_APP
    chat.save(update_fields=["origin"])
    taint_raise(conversation=chat, taint=Taint.PERSON, cause=STRANGER)


def test_an_approved_stop_chat_does_not_run_once_someone_elses_words_came_in(live):
    a, b, turn = stop_asked(live)
    turn_approve(turn=turn)
    someone_else_comes_in(a)
    live.step(a, 1)
    assert Turn.objects.get(conversation=b).state == TurnState.RUNNING
    assert answers(a, "stop_chat")[-1] == (
        "",
        NOT_IN_SET.for_model(tool="stop_chat", persona=tool_set_for(a).persona),
    )


def test_approved_and_then_not_offered_is_refused_though_the_persona_gives_strangers_it(
    live, strangers_get_every_tool
):
    """The tool set allows it, but ADR 0134's own rule (offers_together) no longer does."""
    a, b, turn = stop_asked(live)
    turn_approve(turn=turn)
    someone_else_comes_in(a)
    live.step(a, 1)
    assert Turn.objects.get(conversation=b).state == TurnState.RUNNING
    result, error = answers(a, "stop_chat")[-1]
    assert (result, error) == ("", NOT_OFFERED_NOW.for_model(tool="stop_chat"))
    assert (
        for_person(error)
        == "Not run: you approved stop_chat, but it isn't one of this chat's tools any more."
    )


def test_an_approval_given_and_nothing_changed_runs(live):
    a, b, turn = stop_asked(live)
    turn_approve(turn=turn)
    live.step(a, 1)
    assert Turn.objects.get(conversation=b).state == TurnState.STOPPED


def test_deny_then_the_same_call_asks_again(live):
    b = ChatFactory(title="B", script=[[look(), look(), look(), look()]])
    live.start(b)
    live.step(b, 1)
    stop = {"tool": "stop_chat", "args": {"chat": b.public_id, "reason": "r"}}
    a = ChatFactory(title="A", mode=Mode.ASK, script=[[stop, stop]])
    live.start(a)
    live.step(a, 2)
    turn_deny(turn=Turn.objects.get(conversation=a))
    live.step(a, 2)
    assert Turn.objects.get(conversation=a).state == TurnState.NEEDS_YOU
    assert Turn.objects.get(conversation=b).state == TurnState.RUNNING


# ---------------------------------------------------------------------------
# A chain whose replies are spent


def test_a_message_sent_as_the_chain_spends_its_last_reply_is_told_the_truth(live, monkeypatch):
    """The budget is looked at as the message is sent, and spent by another sender's reply before
    this one starts: the sender is told its message starts none, not "a new reply starts now"."""
    limit = MESSAGE_LIMITS.replies_started_per_chain
    b = ChatFactory(title="B", script=[[look()]])
    a = ChatFactory(title="A", script=[[message(b, "go", start_reply=True)]])
    real_count = msgs._count

    def spent_by_another(queryset, field, n):
        if field == "replies_started":  # another sender's reply took the last one meanwhile
            queryset.update(replies_started=limit)
        return real_count(queryset, field, n)

    monkeypatch.setattr(msgs, "_count", spent_by_another)
    live.start(a)
    live.step(a, 2)
    said = answers(a)[0][0]
    assert msgs.ANSWER_SPENT.format(n=limit) in said and "starts now" not in said, said
    assert not Turn.objects.filter(conversation=b).exists()


def test_a_chat_whose_only_way_in_is_a_spent_chains_message_is_idle_to_a_waiter(live):
    """B is busy as a tainted chat's message asks it for a reply; the chain then starts its four
    elsewhere. When B's reply ends nothing can start one for that message: B is idle."""
    limit = MESSAGE_LIMITS.replies_started_per_chain
    b = ChatFactory(title="B", script=[[look(), look()]])
    live.start(b)
    live.step(b, 1)
    others = [ChatFactory(title=f"R{n}", script=[[look()]]) for n in range(limit)]
    sends = [message(b, "when you're done", start_reply=True)]
    a = ChatFactory(title="A", script=[sends + [message(r, "go", True) for r in others]])
    taint_raise(conversation=a, taint=Taint.UNTRUSTED, cause=Cause.page("https://example.com/"))
    live.start(a)
    live.step(a, len(others) + 2)  # every message sent before B's reply ends
    drain()
    to_b = ChatMessage.objects.get(receiver=b)
    assert (to_b.state, to_b.start_reply) == (MessageState.WAITING, True)
    assert Chain.objects.get(pk=to_b.chain_id).replies_started == limit
    assert Turn.objects.filter(conversation=b).count() == 1  # its own reply only
    waiter = ChatFactory(title="W", script=[[wait_chat(b)]])
    live.start(waiter)
    drain()
    assert not Wait.objects.filter(waiter=waiter, state=WaitState.WAITING).exists()
    said = answers(waiter, "wait_for")[0][0]
    assert "1 message from other chats waits for it, unread until its next reply." in said


# ---------------------------------------------------------------------------
# A wait wakes once, and the runners' 30-second look finds what no event said


def a_wait_whose_target_ended_unseen(live):
    """A chat waiting for another whose reply ended while no process watched (no hook ran)."""
    target = ChatFactory(title="Target", script=[[look(), look()]])
    live.start(target)
    waiter = ChatFactory(title="Waiter", script=[[wait_chat(target)], [look()], [look()]])
    live.start(waiter)
    live.step(waiter, 2)
    Turn.objects.filter(conversation=target).update(
        state=TurnState.COMPLETED, ended_at="2026-01-01T00:00:00Z"
    )
    wait = Wait.objects.get()
    assert wait.state == WaitState.WAITING
    return waiter, wait


def woken_once(waiter) -> bool:
    woken = Turn.objects.filter(conversation=waiter, started_by=StartedBy.WAIT)
    heard = Entry.objects.filter(
        conversation=waiter, text__contains="which this chat was waiting for"
    )
    return woken.count() == 1 and heard.count() == 1


def test_a_wait_woken_twice_at_once_wakes_its_chat_once(live):
    waiter, wait = a_wait_whose_target_ended_unseen(live)
    assert waits.wake(wait=wait) is True
    assert waits.wake(wait=wait) is False  # the second look, a moment later, finds it woken
    waits.waits_check()
    assert woken_once(waiter)
    drain()
    assert woken_once(waiter)  # and the woken reply's end wakes nothing again


def test_the_runners_look_every_30_seconds_wakes_a_wait_no_event_woke(live):
    waiter, wait = a_wait_whose_target_ended_unseen(live)
    looks = [sweep for sweep in hooks.sweeps if sweep.name == "waits"]
    assert [sweep.every for sweep in looks] == [30.0]  # ADR 0134: "a 30-second sweep"
    for sweep in hooks.sweeps:  # as each runner does when a sweep's period has passed
        sweep.run()
    wait.refresh_from_db()
    assert wait.state == WaitState.WOKEN
    assert woken_once(waiter)
