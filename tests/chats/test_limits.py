"""Every bound lives in chats.limits, and the words that refuse something say the bound they enforce."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from chats import limits
from chats.limits import LIMITS, MESSAGE_LIMITS, MessageLimits, duration_words
from chats.models import Step
from chats.runtime import chats as runtime_chats
from chats.runtime.chats import ConchError, conversation_create, conversation_rename
from chats.runtime.runner import drain
from chats.runtime.turns import turn_start
from chats.tools.registry import get_tool
from tests.factories import ChatFactory
from tests.together.conftest import Stage, message
from together import messages as msgs
from together import waits


@pytest.fixture
def live(transactional_db, owner, agent, workspace):
    """Commits really commit, so a message's on-commit work runs."""
    return Stage(owner, workspace)


def test_the_limits_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        LIMITS.title_chars = 10  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        MESSAGE_LIMITS.waiting_per_chat = 50  # type: ignore[misc]


def test_together_names_the_adrs_limits_where_the_adr_puts_them():
    assert msgs.MESSAGE_LIMITS is limits.MESSAGE_LIMITS
    assert msgs.MessageLimits is limits.MessageLimits


@pytest.mark.parametrize(
    ("span", "words"),
    [
        (timedelta(minutes=10), "10 minutes"),
        (timedelta(minutes=1), "1 minute"),
        (timedelta(hours=2), "2 hours"),
        (timedelta(seconds=90), "90 seconds"),
        (timedelta(days=1), "1 day"),
    ],
)
def test_a_span_is_said_as_a_person_says_it(span, words):
    assert duration_words(span) == words


def test_a_chats_title_over_the_limit_is_refused_naming_the_limit(owner, agent, monkeypatch):
    monkeypatch.setattr(runtime_chats, "LIMITS", dataclasses.replace(LIMITS, title_chars=5))
    with pytest.raises(ConchError, match="at most 5 characters"):
        conversation_create(owner=owner, title="abcdef")
    chat = conversation_create(owner=owner, title="abcde")
    with pytest.raises(ConchError, match="1 to 5 characters"):
        conversation_rename(conversation=chat, title="abcdef")


def test_a_message_over_the_limit_is_refused_naming_the_limit(owner, agent, monkeypatch):
    monkeypatch.setattr(msgs, "LIMITS", dataclasses.replace(LIMITS, message_chars=10))
    sender = conversation_create(owner=owner, title="A")
    turn = turn_start(conversation=sender, started_by="person", text="go")
    with pytest.raises(ConchError, match="at most 10 characters"):
        msgs.message_chat(sender=sender, turn=turn, chat_id="c_x", text="x" * 11)


def test_the_same_words_refusal_says_the_window_it_enforces(live, monkeypatch):
    monkeypatch.setattr(msgs, "MESSAGE_LIMITS", MessageLimits(same_words_window=timedelta(hours=2)))
    b = ChatFactory(title="B", script=[])
    a = ChatFactory(title="A", script=[[message(b, "ping")], [message(b, "ping")]])
    live.start(a)
    drain()
    live.start(a, text="again")  # a new chain: only the repeat rule applies
    drain()
    errors = list(
        Step.objects.filter(turn__conversation=a, tool="message_chat")
        .order_by("turn__number", "number")
        .values_list("error", flat=True)
    )
    assert errors[0] == ""
    assert "less than 2 hours ago; the same words go to one chat once in 2 hours" in errors[1]


def test_waiting_for_too_many_things_says_how_many_it_may(owner, agent, monkeypatch):
    monkeypatch.setattr(waits, "MESSAGE_LIMITS", MessageLimits(waiting_per_chat=0))
    waiter = conversation_create(owner=owner, title="Waiter")
    target = conversation_create(owner=owner, title="Target")
    turn_start(conversation=target, started_by="person", text="keep working")
    turn = turn_start(conversation=waiter, started_by="person", text="go")
    with pytest.raises(ConchError, match="already waiting for 0 things"):
        waits.wait_for(waiter=waiter, turn=turn, kind="chat", target_id=target.public_id)


def test_the_tools_offer_the_limits_they_are_held_to():
    assert get_tool("message_chat").schema["properties"]["text"]["maxLength"] == (
        LIMITS.message_chars
    )
    assert get_tool("stop_chat").schema["properties"]["reason"]["maxLength"] == (
        LIMITS.stop_reason_chars
    )
    assert get_tool("fetch_page").schema["properties"]["url"]["maxLength"] == LIMITS.url_chars
