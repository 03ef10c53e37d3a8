"""A reply's words reach the page while the model writes them, through the same partials."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chats import events, processes, regions
from chats.models import EntryRole, Turn
from chats.runtime import stepping
from chats.runtime.runner import drain
from chats.runtime.turns import message_send
from tests.engines.conftest import use_model
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
    assert live[-1].seq == events.UNNUMBERED  # words take no number
    assert shown.startswith('<span id="conch-seq" data-seq="0" data-kind="words"')
    assert '<div id="reply-1-text" class="msg from-assistant is-streaming" hx-disable' in shown
    assert 'hx-swap-oob="true"' in shown
    assert "Hello &lt;b&gt;there&lt;/b&gt;, friend" in shown and "<b>" not in shown
    # Another tab is sent nothing: no number to take, no transcript, no row.
    assert push(live[-1], None) == ""


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


@pytest.mark.django_db(transaction=True)
def test_every_chunk_reaches_the_page_even_with_a_stream_every_saved_by_an_earlier_conch(
    model_agent, fake, published
):
    """No throttle where the words come in: each chunk's words are published as it is read.
    A persona saved with ``stream_every`` still loads, and the setting changes nothing."""
    use_model(model_agent, fake.base_url, stream_every=0.25)
    fake.play(Text("one two three four", pieces=4))  # read in well under 0.25 s
    chat = ChatFactory(agent=model_agent, title="Count")
    message_send(conversation=chat, text="count")
    drain()

    texts = [e.data["text"] for e in published if e.type == events.REPLY_TEXT]
    assert texts == ["one t", "one two th", "one two three f", "one two three four"]
    assert chat.entries.filter(role=EntryRole.ASSISTANT).get().text == "one two three four"


@pytest.mark.django_db(transaction=True)
def test_a_streamed_chunk_costs_no_statement(model_agent, published):
    """The runtime asks the database nothing per chunk (whether the reply is still this
    runner's is the halt's to say), and writes nothing: its words are never stored while
    they come, and their event takes no number."""
    chat = ChatFactory(agent=model_agent, title="Count")
    turn = message_send(conversation=chat, text="count")
    streamer = stepping._TextStreamer(
        Turn.objects.select_related("conversation").get(pk=turn.pk), threading.Event()
    )
    with CaptureQueriesContext(connection) as queries:
        for text in ("one", "one two", "one two three"):
            assert streamer(text)
    assert queries.captured_queries == []
    said = [e.data["text"] for e in published if e.type == events.REPLY_TEXT]
    assert said == ["one", "one two", "one two three"]  # each chunk's event went all the same


@pytest.mark.django_db(transaction=True)
def test_a_reply_another_runner_took_shows_no_more_words(model_agent, fake, monkeypatch):
    """A reply no longer this runner's (its claim taken, in another process) stops showing
    words as soon as the look at the database sets its halt, not a chunk later."""
    monkeypatch.setattr(stepping, "HALT_POLL", 0.02)
    fake.play(Text("one two three four five six", pieces=6))
    chat = ChatFactory(agent=model_agent, title="Count")
    turn = message_send(conversation=chat, text="count")
    seen: list[str] = []

    def taken_on_first_words(event):
        if event.type != events.REPLY_TEXT:
            return
        seen.append(event.data["text"])
        if len(seen) == 1:
            Turn.objects.filter(pk=turn.pk).update(claimed_by="another-runner")
            halts = [halt for (turn_id, _), halt in processes._waits if turn_id == turn.pk]
            assert halts and halts[0].wait(5), "the look at the database never set the halt"

    unsubscribe = events.subscribe(taken_on_first_words)
    try:
        drain()
    finally:
        unsubscribe()
    assert seen == ["one t"]
    assert not chat.entries.filter(role=EntryRole.ASSISTANT).exists()  # not its to write
