"""together plugs into chats when it is ready: its own words join chats' registries."""

from __future__ import annotations

import pytest

from chats import events
from chats.tools.registry import get_tool
from together.listing import CHATS_LISTED, LOOKING_AT_CHATS
from together.messages import CHAT_MESSAGE, MESSAGING_A_CHAT
from together.waits import WAITING


def test_together_adds_its_event_types_as_ones_that_change_a_card():
    for event_type in (CHATS_LISTED, CHAT_MESSAGE):
        assert event_type in events.EVENT_TYPES
        assert event_type in events.CARD_EVENT_TYPES


def test_together_adds_its_families_before_its_tools():
    families = {
        name: get_tool(name).family
        for name in ("list_chats", "read_chat", "search_chats", "message_chat", "wait_for")
    }
    assert families == {
        "list_chats": LOOKING_AT_CHATS,
        "read_chat": LOOKING_AT_CHATS,
        "search_chats": LOOKING_AT_CHATS,
        "message_chat": MESSAGING_A_CHAT,
        "wait_for": WAITING,
    }


@pytest.mark.django_db
def test_an_event_type_no_app_added_is_refused(owner):
    with pytest.raises(ValueError, match="unknown event type 'made.up'"):
        events.publish("made.up", owner_id=owner.pk)
