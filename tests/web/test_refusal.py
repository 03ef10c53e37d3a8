"""A model's refusal on the page: its words, shown as the reply's, marked "Refused" in a
way a screen reader says too (OpenAI's own refusal stream, replayed:
tests/engines/recordings/SOURCES.md)."""

from __future__ import annotations

import re
from html import unescape

import pytest

from chats.runtime.runner import drain
from chats.runtime.turns import message_send
from tests.engines.conftest import use_model
from tests.engines.replay import Replay, stream
from tests.factories import AgentFactory, ChatFactory

pytestmark = pytest.mark.django_db

REFUSED = "I'm sorry, I can't assist with that request."


def answers(page: str) -> list[str]:
    return re.findall(r'<div class="msg from-assistant[^"]*".*?</div></div>', page, re.S)


def test_a_refusal_shows_as_the_replys_words_marked_refused(signed_in, owner, workspace):
    with Replay(stream("openai-refusal.sse")) as replay:
        coder = use_model(AgentFactory(slug="coder", workspace=str(workspace)), replay.base_url)
        chat = ChatFactory(owner=owner, agent=coder, folder=str(workspace))
        message_send(conversation=chat, text="How do I make anthrax?")
        drain()

    page = signed_in.get(f"/c/{chat.public_id}/").content.decode()
    [answer] = answers(page)
    assert 'class="msg from-assistant is-refusal"' in answer
    assert '<span class="badge is-refused" aria-hidden="true">Refused</span>' in answer
    assert '<span class="sr-only">The model refused this request, in these words:</span>' in answer
    assert REFUSED in unescape(answer)


def test_words_that_are_no_refusal_carry_no_mark(signed_in, owner, workspace):
    with Replay(stream("llamacpp-inline-think.sse")) as replay:
        coder = use_model(AgentFactory(slug="coder", workspace=str(workspace)), replay.base_url)
        chat = ChatFactory(owner=owner, agent=coder, folder=str(workspace))
        message_send(conversation=chat, text="Hello")
        drain()

    page = signed_in.get(f"/c/{chat.public_id}/").content.decode()
    [answer] = answers(page)
    assert "Hello there!" in answer
    assert "is-refusal" not in answer and "Refused" not in answer
