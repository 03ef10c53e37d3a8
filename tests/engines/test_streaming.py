"""A reply's words reach the page while the model writes them, through the same partials."""

from __future__ import annotations

import pytest

from chats import events, regions
from chats.runtime.runner import drain
from chats.runtime.turns import message_send
from tests.engines.fake_openai import Text
from tests.factories import ChatFactory


@pytest.mark.django_db(transaction=True)
def test_the_tab_showing_the_chat_gets_the_live_words_in_the_running_reply_escaped(
    model_agent, fake, published
):
    fake.play(Text("Hello <b>there</b>, friend", pieces=4))
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    message_send(conversation=chat, text="hi")
    drain()
    live = [e for e in published if e.type == events.REPLY_TEXT]
    assert len(live) >= 2

    def push(event, showing):
        return regions.render_event(
            owner_id=chat.owner_id,
            event=event.type,
            seq=event.seq,
            conversation_id=event.conversation_id,
            showing=showing,
            data=event.data,
        )

    shown = push(live[-1], chat.public_id)
    assert f'data-seq="{live[-1].seq}"' in shown  # numbered like every push
    assert '<div id="reply-1-text" class="msg from-assistant is-streaming" hx-disable' in shown
    assert 'hx-swap-oob="true"' in shown
    assert "Hello &lt;b&gt;there&lt;/b&gt;, friend" in shown and "<b>" not in shown
    # Another tab only takes the number: no transcript, no row, nothing to refetch.
    elsewhere = push(live[-1], None)
    assert "reply-1-text" not in elsewhere and 'id="conch-seq"' in elsewhere
    assert "chat-row" not in elsewhere and "transcript" not in elsewhere


def test_a_running_reply_has_an_empty_slot_its_live_words_go_into(model_agent):
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    message_send(conversation=chat, text="hi")  # not run yet: it is running
    page = regions.render_region("transcript", regions.chat_context(conversation=chat))
    slot = page.split('id="reply-1-text"', 1)[1].split(">", 1)[0]
    assert "hidden" in slot and "hx-swap-oob" not in slot
    drain()  # the fake answers nothing: the reply fails, and the slot goes with it
    chat.refresh_from_db()
    page = regions.render_region("transcript", regions.chat_context(conversation=chat))
    assert "reply-1-text" not in page
