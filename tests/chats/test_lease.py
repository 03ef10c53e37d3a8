"""A runner keeps the replies it drives: their leases are renewed while a long step runs."""

from __future__ import annotations

from django.utils import timezone

from chats.models import TurnState
from chats.runtime import services
from chats.runtime.runner import Runner
from tests.factories import ChatFactory


def test_a_runner_renews_the_lease_of_a_reply_whose_step_outlasts_it(agent):
    chat = ChatFactory(reply=[{"tool": "list_files", "args": {}}])
    turn = services.message_send(conversation=chat, text="go")
    runner = Runner(name="busy-runner", lone=False)
    assert services.turn_claim(worker=runner.name, limit=1) == [turn.pk]
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
