"""The trust timeline's record as the tests read it: a chat's rises, each rise's fields.

Shared by the tests that make each cause happen as it does for the person and check
its record field by field: tests/chats, tests/gateway and tests/together's
test_taint_rises.py. The page a chat reads there is ``outside_site`` (tests/conftest.py).
"""

from __future__ import annotations

from chats.models import Conversation, Step, TaintRise


def rises(chat: Conversation) -> list[TaintRise]:
    return list(TaintRise.objects.filter(conversation=chat).order_by("at", "id"))


def only_rise(chat: Conversation) -> TaintRise:
    (rise,) = rises(chat)
    return rise


def shape(rise: TaintRise) -> dict:
    """A rise as the timeline reads it: every field but its id and its time."""
    return {
        "before": rise.before,
        "after": rise.after,
        "cause": rise.cause,
        "url": rise.url,
        "path": rise.path,
        "source": rise.source_id,
        "source_taint": rise.source_taint,
        "source_rise": rise.source_rise_id,
        "turn": rise.turn_id,
        "step": rise.step_id,
        "detail": rise.detail,
    }


def step_of(chat: Conversation, tool: str) -> Step:
    return Step.objects.filter(turn__conversation=chat, tool=tool).order_by(
        "turn__number", "number"
    )[0]
