"""No timeline text crosses into a model's input.

A chat's trust timeline says why it is careful, as far back as the path goes: chat C
waited on B, which took in a message from A, which read a page. C's model is a real
OpenAI-compatible endpoint (the loopback fake) and hears what C was given (the wait's
answer: B's title and last words), never the path behind it: not A's title, not the
address A read, not the timeline's own words.
"""

from __future__ import annotations

import json

import pytest

from chats.models import TaintCause, TaintRise
from chats.runtime.runner import drain
from chats.runtime.turns import message_send
from tests.engines.fake_openai import Text, calls
from tests.factories import ChatFactory

pytestmark = pytest.mark.django_db(transaction=True)

A_TITLE = "Zephyr release page"
PAGE_PATH = "/quasar-notes-24.html"


@pytest.fixture
def site(outside_site):
    outside_site.page(PAGE_PATH, "<html><body><p>Sync is twice as fast.</p></body></html>")
    return outside_site


def test_a_chat_careful_because_of_a_path_of_chats_never_hears_the_path(
    owner, agent, model_agent, fake, site
):
    url = site.url(PAGE_PATH)
    b = ChatFactory(owner=owner, title="Changelog", script=[[{"say": "Changelog written."}]])
    a = ChatFactory(
        owner=owner,
        title=A_TITLE,
        script=[
            [
                {"tool": "fetch_page", "args": {"url": url}},
                {"tool": "message_chat", "args": {"chat": b.public_id, "text": "Sync is faster."}},
            ]
        ],
    )
    message_send(conversation=a, text="read the page and tell the changelog")
    drain()
    message_send(conversation=b, text="write it")  # takes in A's message
    drain()
    c = ChatFactory(owner=owner, title="Announce", agent=model_agent)
    fake.play(calls(("wait_for", {"kind": "chat", "id": b.public_id})), Text("Announced."))
    message_send(conversation=c, text="wait for the changelog, then announce")
    drain()

    # C is careful because of the whole path, and the timeline holds it.
    (c_rise,) = TaintRise.objects.filter(conversation=c)
    assert c_rise.cause == TaintCause.WAIT and c_rise.source_id == b.pk
    assert c_rise.source_rise.cause == TaintCause.MESSAGE and c_rise.source_rise.source_id == a.pk
    assert c_rise.source_rise.source_rise.url == url

    asked = fake.completions
    assert len(asked) == 2
    heard = json.dumps([request.body for request in asked], ensure_ascii=False)
    assert "Changelog written." in heard and "Changelog" in heard  # what C was given
    for never in (
        A_TITLE,
        a.public_id,
        url,
        PAGE_PATH,
        f"127.0.0.1:{site.port}",
        *(str(label) for label in TaintCause.labels),
    ):
        assert never not in heard, never
