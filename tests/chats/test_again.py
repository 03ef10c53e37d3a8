"""Retry the last reply, and edit and resend the person's last message.

The replaced reply stays on the page as an earlier version and leaves what the model
reads; only the chat's last reply, ended, that the person's own message started may be
replaced, and a page that is behind the chat is refused rather than applied elsewhere.
"""

from __future__ import annotations

import pytest

from chats.models import EntryRole, Mode, StartedBy, TurnState
from chats.runtime.chats import ConchError
from chats.runtime.runner import drain
from chats.runtime.stepping import _transcript_loader
from chats.runtime.turns import (
    ERR_AGAIN_NOT_YOURS,
    ERR_AGAIN_STALE,
    ERR_AGAIN_WHILE_OPEN,
    ERR_EMPTY_MESSAGE,
    message_send,
    reply_again,
    turn_start,
)
from tests.factories import ChatFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def answered(owner, agent, workspace):
    """A chat whose first reply wrote a file and said so, and whose second says other words."""
    chat = ChatFactory(
        owner=owner,
        folder=str(workspace),
        mode=Mode.AUTO,
        script=[
            [
                {"tool": "write_file", "args": {"path": "plan.md", "content": "v1"}},
                {"say": "Wrote plan.md, version one."},
            ],
            [{"say": "Here is version two."}],
            [{"say": "And a third."}],
        ],
    )
    message_send(conversation=chat, text="Write the plan")
    drain()
    return chat


def model_reads(chat) -> list[tuple[str, str]]:
    return [(line.role, line.text) for line in _transcript_loader(chat)()]


def test_retry_writes_the_reply_again_and_the_model_reads_only_the_new_one(answered):
    new = reply_again(conversation=answered, turn_number=1)
    drain()

    old = answered.turns.get(number=1)
    assert old.replaced_by == new.number == 2
    read = model_reads(answered)
    said = [text for role, text in read if role == EntryRole.ASSISTANT]
    asked = [text for role, text in read if role == EntryRole.PERSON]
    assert said == ["Here is version two."]
    assert asked == ["Write the plan"]  # once: the replaced prompt is not read twice
    assert all("v1" not in text for role, text in read if role == EntryRole.TOOL)
    # The page still has every word of the earlier version.
    assert old.entries.filter(text="Wrote plan.md, version one.").exists()
    assert new.entries.get(role=EntryRole.PERSON).data == {"again": {"of": 1, "how": "retry"}}


def test_the_model_is_told_that_the_replaced_replys_file_changes_are_still_there(answered):
    reply_again(conversation=answered, turn_number=1)

    notes = [text for role, text in model_reads(answered) if role == EntryRole.CONCH]
    assert len(notes) == 1
    assert "plan.md" in notes[0] and "still there" in notes[0]


def test_an_edit_resends_the_new_words_in_place_of_the_old(answered):
    new = reply_again(conversation=answered, turn_number=1, text="  Write the plan, in French  ")
    drain()

    asked = [text for role, text in model_reads(answered) if role == EntryRole.PERSON]
    assert asked == ["Write the plan, in French"]
    assert new.entries.get(role=EntryRole.PERSON).data["again"]["how"] == "edit"
    assert answered.turns.get(number=1).replaced_by == 2


def test_only_the_last_reply_can_be_replaced_and_twice_works(answered):
    reply_again(conversation=answered, turn_number=1)
    drain()

    with pytest.raises(ConchError, match=ERR_AGAIN_STALE):
        reply_again(conversation=answered, turn_number=1)
    third = reply_again(conversation=answered, turn_number=2)
    drain()

    assert third.number == 3
    assert [t.replaced_by for t in answered.turns.order_by("number")] == [2, 3, None]
    said = [text for role, text in model_reads(answered) if role == EntryRole.ASSISTANT]
    assert said == ["And a third."]


def test_a_reply_still_running_is_not_replaced(answered):
    message_send(conversation=answered, text="More")

    with pytest.raises(ConchError, match=ERR_AGAIN_WHILE_OPEN):
        reply_again(conversation=answered, turn_number=2)


def test_an_empty_edit_is_refused_and_changes_nothing(answered):
    with pytest.raises(ConchError, match=ERR_EMPTY_MESSAGE):
        reply_again(conversation=answered, turn_number=1, text="   ")

    assert answered.turns.count() == 1 and answered.turns.get().replaced_by is None


def test_words_that_are_not_the_persons_own_are_not_theirs_to_rewrite(answered):
    """A chat app's sender's message, or a reply another chat started, can't be replaced."""
    message_send(conversation=answered, text="From Bob", said_by={"name": "bob", "app": "slack"})
    drain()
    with pytest.raises(ConchError, match=ERR_AGAIN_NOT_YOURS):
        reply_again(conversation=answered, turn_number=2, text="Something Bob never said")

    turn_start(conversation=answered, started_by=StartedBy.MESSAGE, text="Another chat's words")
    drain()
    with pytest.raises(ConchError, match=ERR_AGAIN_NOT_YOURS):
        reply_again(conversation=answered, turn_number=3)
    assert not answered.turns.filter(replaced_by__isnull=False).exists()


def test_a_failed_reply_can_be_retried(owner, agent, workspace):
    chat = ChatFactory(
        owner=owner,
        folder=str(workspace),
        script=[[{"fail": "The model server went away."}], [{"say": "Back again."}]],
    )
    message_send(conversation=chat, text="Hello")
    drain()
    assert chat.turns.get().state == TurnState.FAILED

    reply_again(conversation=chat, turn_number=1)
    drain()

    assert chat.turns.get(number=2).state == TurnState.COMPLETED
