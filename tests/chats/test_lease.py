"""Claims and leases: a runner keeps the replies it drives, and a reply is claimed once."""

from __future__ import annotations

from django.utils import timezone

from chats.models import EntryRole, TurnState
from chats.runtime import runner as runner_module
from chats.runtime.claims import turn_claim, turn_claim_one
from chats.runtime.runner import ERR_INTERNAL, Runner, drive_one_action, runnable_by_chat
from chats.runtime.turns import message_send
from tests.factories import ChatFactory, ConversationFactory, TurnFactory


def test_a_runner_renews_the_lease_of_a_reply_whose_step_outlasts_it(agent):
    chat = ChatFactory(reply=[{"tool": "list_files", "args": {}}])
    turn = message_send(conversation=chat, text="go")
    runner = Runner(name="busy-runner", lone=False)
    assert turn_claim(worker=runner.name, limit=1) == [turn.pk]
    # The step has run past the lease: without a heartbeat, any runner would take it for an orphan.
    type(turn).objects.filter(pk=turn.pk).update(
        lease_until=timezone.now() - timezone.timedelta(seconds=5)
    )
    runner._active.add(turn.pk)
    runner.tick()
    turn.refresh_from_db()
    assert turn.state == TurnState.RUNNING
    assert turn.claimed_by == "busy-runner"
    assert turn.lease_until > timezone.now()


def test_a_particular_turn_is_claimed_by_one_worker_only(db):
    turn = TurnFactory(state=TurnState.RUNNING)
    assert turn_claim_one(turn_id=turn.pk, worker="one")
    assert not turn_claim_one(turn_id=turn.pk, worker="two")
    turn.refresh_from_db()
    assert turn.claimed_by == "one"
    waiting = TurnFactory(conversation=ConversationFactory(), state=TurnState.NEEDS_YOU)
    assert not turn_claim_one(turn_id=waiting.pk, worker="one")


def test_driving_one_action_plays_exactly_one_and_lets_the_reply_go(agent):
    chat = ChatFactory(reply=[{"say": "one"}, {"say": "two"}])
    turn = message_send(conversation=chat, text="go")
    assert runnable_by_chat() == {chat.pk: turn.pk}
    assert drive_one_action(turn_id=turn.pk, worker="player")
    said = list(chat.entries.filter(role=EntryRole.ASSISTANT).values_list("text", flat=True))
    assert said == ["one"]
    turn.refresh_from_db()
    assert (turn.state, turn.claimed_by) == (TurnState.RUNNING, "")
    assert runnable_by_chat() == {chat.pk: turn.pk}


def test_driving_one_action_leaves_a_reply_another_worker_holds_alone(agent):
    chat = ChatFactory(reply=[{"say": "one"}])
    turn = message_send(conversation=chat, text="go")
    assert turn_claim_one(turn_id=turn.pk, worker="runner")
    assert runnable_by_chat() == {}
    assert not drive_one_action(turn_id=turn.pk, worker="player")
    assert not chat.entries.filter(role=EntryRole.ASSISTANT).exists()
    turn.refresh_from_db()
    assert turn.claimed_by == "runner"


def test_an_action_that_raises_fails_the_reply_as_the_runner_does(agent, monkeypatch):
    chat = ChatFactory(reply=[{"say": "one"}])
    turn = message_send(conversation=chat, text="go")

    def broken(**_):
        raise RuntimeError("boom")

    monkeypatch.setattr(runner_module, "turn_advance", broken)
    assert drive_one_action(turn_id=turn.pk, worker="player")
    turn.refresh_from_db()
    assert (turn.state, turn.end_reason, turn.claimed_by) == (TurnState.FAILED, ERR_INTERNAL, "")


def test_an_idle_runners_tick_opens_no_transaction(db):
    """Nothing to claim: the tick reads, and never takes SQLite's write lock (a claim's
    IMMEDIATE transaction) from the writers taking messages in."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    runner = Runner(name="idle-runner", lone=False)
    with CaptureQueriesContext(connection) as ticked:
        assert runner.tick() == []
    sqls = [q["sql"] for q in ticked.captured_queries]
    assert not [s for s in sqls if s.startswith(("SAVEPOINT", "UPDATE", "INSERT", "DELETE"))], sqls
