"""A stranger's chat never sees anything of another chat's trust timeline: not through a
tool (list_chats, read_chat, search_chats, wait_for, message_chat), not in a note, not in
an event, not in what goes back to them on their chat app. And what a rise's event says
is Conch's own words, to the chat's owner only.
"""

from __future__ import annotations

import json

import pytest

from chats.gateway.inbound import inbound_parse
from chats.gateway.models import OutboxMessage
from chats.gateway.services import inbound_receive
from chats.models import Conversation, Step, Taint, TaintCause, TaintRise
from chats.runtime.runner import drain
from tests.factories import ChatFactory
from tests.together.conftest import message

A_TITLE = "Zephyr release page"
B_TITLE = "Quokka changelog"
PAGE_PATH = "/quasar-notes-24.html"


@pytest.fixture
def site(outside_site):
    outside_site.page(PAGE_PATH, "<html><body><p>Sync is twice as fast.</p></body></html>")
    return outside_site


@pytest.fixture
def careful_path(live, site):
    """A read a page and messaged B, which took it in: both careful, each with its rise."""
    url = site.url(PAGE_PATH)
    b = ChatFactory(title=B_TITLE, script=[[{"say": "Changelog written."}]])
    a = ChatFactory(
        title=A_TITLE,
        script=[[{"tool": "fetch_page", "args": {"url": url}}, message(b, "Sync is faster.")]],
    )
    live.start(a)
    drain()
    live.start(b)
    drain()
    assert TaintRise.objects.filter(conversation__in=[a, b]).count() == 2
    return a, b, url


def never_said(a, b, url, port) -> tuple[str, ...]:
    """Every word of A's and B's timelines: titles, ids, the address, the causes' words."""
    labels = [str(label) for label in TaintCause.labels if label != "someone else's words"]
    return (A_TITLE, B_TITLE, a.public_id, b.public_id, url, PAGE_PATH, f":{port}", *labels)


@pytest.mark.usefixtures("strangers_get_every_tool")
def test_a_strangers_chat_sees_nothing_of_another_chats_timeline(
    owner, careful_path, site, published
):
    a, b, url = careful_path
    body = {"channel": "telegram", "chat_type": "dm", "peer": "mallory", "message_id": "x1"}
    got = inbound_receive(owner=owner, inbound=inbound_parse({**body, "text": "what's new?"}))
    stranger = Conversation.objects.get(public_id=got.chat)
    assert stranger.taint == Taint.PERSON
    Conversation.objects.filter(pk=stranger.pk).update(
        script=[
            [
                {"tool": "list_chats", "args": {}},
                {"tool": "read_chat", "args": {"chat": a.public_id}},
                {"tool": "search_chats", "args": {"query": "sync"}},
                {"tool": "wait_for", "args": {"kind": "chat", "id": b.public_id}},
                message(b, "what made you careful?"),
                {"say": "Nothing to tell."},
            ]
        ]
    )
    drain()

    steps = list(Step.objects.filter(turn__conversation=stranger).order_by("number"))
    assert [s.tool for s in steps] == [
        "list_chats",
        "read_chat",
        "search_chats",
        "wait_for",
        "message_chat",
    ]
    assert all(s.error and not s.result for s in steps)  # each refused, in words
    seen = {
        "steps": [(s.result, s.error) for s in steps],
        "transcript": list(stranger.entries.values_list("text", "data")),
        "outbox": list(OutboxMessage.objects.filter(conversation=stranger).values_list("text")),
        "events": [e.data for e in published if e.conversation_id == stranger.public_id],
    }
    assert seen["transcript"] and seen["outbox"] and seen["events"]  # it did hear things
    said = json.dumps(seen, ensure_ascii=False, default=str)
    for word in never_said(a, b, url, site.port):
        assert word not in said, word
    assert TaintRise.objects.filter(conversation__in=[a, b]).count() == 2  # nothing new there


def test_a_rises_event_says_why_in_conchs_words_only_to_the_owner(
    owner, published, careful_path, site
):
    a, b, url = careful_path
    raised = [e for e in published if "taint" in e.data]
    # A's page, B's message: each event names its cause's kind, nothing more.
    assert [(e.conversation_id, e.data["taint"], e.data["why"]) for e in raised] == [
        (a.public_id, Taint.UNTRUSTED, "read a web page"),
        (b.public_id, Taint.UNTRUSTED, "a message from another chat"),
    ]
    assert {e.owner_id for e in raised} == {owner.pk}
    said = json.dumps([e.data for e in raised])
    for word in (A_TITLE, B_TITLE, url, PAGE_PATH, a.public_id):
        assert word not in said, word
