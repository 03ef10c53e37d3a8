"""A chat left untitled takes its title from the person's first message."""

from __future__ import annotations

import pytest

from chats.limits import LIMITS
from chats.models import Conversation, Mode
from chats.runtime.chats import UNTITLED, conversation_create, conversation_rename
from chats.runtime.turns import message_send

pytestmark = pytest.mark.django_db


def new_chat(client, **fields):
    from chats.runtime.chats import default_agent

    data = {"title": "", "folder": "", "mode": Mode.AUTO, "agent": default_agent().pk, **fields}
    return client.post("/chats/new/", data)


def test_the_new_chat_form_may_be_left_untitled(signed_in, owner):
    response = new_chat(signed_in)

    chat = Conversation.objects.get(owner=owner)
    assert response.status_code == 302
    assert (chat.title, chat.untitled) == (UNTITLED, True)
    page = signed_in.get(response.url).content.decode()
    assert '<h1 id="chat-heading">New chat</h1>' in page
    # A new chat's message box has the focus.
    assert "data-enter-sends autofocus>" in page


def test_the_first_message_names_an_untitled_chat(owner, agent):
    chat = conversation_create(owner=owner, title="  ")

    message_send(conversation=chat, text="\n  Fix   the flaky\tlogin test \nit fails on Mondays")

    chat.refresh_from_db()
    assert (chat.title, chat.untitled) == ("Fix the flaky login test", False)
    message_send(conversation=chat, text="Another thing")  # queued: the title stays
    chat.refresh_from_db()
    assert chat.title == "Fix the flaky login test"


def test_a_long_first_message_is_cut_and_a_key_in_it_never_shows(owner, agent):
    chat = conversation_create(owner=owner, title="")
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0L1m2"

    message_send(conversation=chat, text=f"use {key} then " + "x" * 300)

    chat.refresh_from_db()
    assert len(chat.title) == LIMITS.title_chars and chat.title.endswith("…")
    assert chat.title.startswith("use [redacted] then x")


def test_a_chat_given_a_title_keeps_it(owner, agent):
    chat = conversation_create(owner=owner, title="Release notes")

    message_send(conversation=chat, text="Write them")

    chat.refresh_from_db()
    assert (chat.title, chat.untitled) == ("Release notes", False)


def test_a_renamed_untitled_chat_keeps_the_name_it_was_given(owner, agent):
    chat = conversation_create(owner=owner, title="")
    conversation_rename(conversation=chat, title="Mine")

    message_send(conversation=chat, text="Go")

    chat.refresh_from_db()
    assert (chat.title, chat.untitled) == ("Mine", False)


def test_the_controls_say_where_focus_goes_next(signed_in, chat):
    message_send(conversation=chat, text="go")

    page = signed_in.get(f"/c/{chat.public_id}/").content.decode()

    assert 'data-focus-after="#chat-settings .modes [aria-pressed=true]"' in page
    assert 'hx-swap="none" data-focus-after="#composer-text">' in page  # Stop
    assert 'id="stop-button">Stop</button>' in page
    assert 'id="mode-plan" name="mode" value="plan"' in page
    assert '<details class="menu" id="rename-menu">' in page
    # An opened chat with words in it does not steal the focus.
    assert "data-enter-sends autofocus>" not in page
