"""Fixtures for the gateway: personas, a token, an echoing engine, and sending messages in."""

from __future__ import annotations

import pytest

from chats.engines import register_engine
from chats.engines.base import Decision, End, EngineInput, Say
from chats.gateway.inbound import Inbound, inbound_parse
from chats.gateway.routing import route_index_invalidate
from chats.gateway.services import gateway_token_rotate, inbound_receive
from chats.models import EntryRole
from tests.factories import AgentFactory


class EchoEngine:
    """Answers every message with the person's last words: enough to see a reply go out."""

    name = "echo"

    def next_action(self, given: EngineInput) -> Decision:
        if given.state.get("said"):
            return Decision(End(), given.state)
        lines = given.load_transcript()
        last = next((line.text for line in reversed(lines) if line.role == EntryRole.PERSON), "")
        return Decision(Say(f"echo: {last}"), {**given.state, "said": True})


register_engine(EchoEngine())


@pytest.fixture(autouse=True)
def fresh_routing_index():
    """Each test's database starts anew, so no index outlives its test."""
    route_index_invalidate()
    yield
    route_index_invalidate()


@pytest.fixture
def personas(agent, tmp_path):
    """The default persona (main) and two more, each with its own workspace."""
    made = {"main": agent}
    for slug in ("work", "home"):
        folder = tmp_path / f"ws-{slug}"
        folder.mkdir()
        made[slug] = AgentFactory(slug=slug, name=slug.title(), workspace=str(folder))
    return made


@pytest.fixture
def gateway_token(owner) -> str:
    return gateway_token_rotate(owner=owner)


def message(**fields) -> Inbound:
    """An inbound message; a DM from alice on Telegram unless told otherwise."""
    body = {"channel": "telegram", "chat_type": "dm", "peer": "alice", "text": "hi"}
    body.update(fields)
    body.setdefault("message_id", f"m-{next(_ids)}")
    return inbound_parse(body)


def _counter():
    n = 0
    while True:
        n += 1
        yield n


_ids = _counter()


@pytest.fixture
def receive(owner, agent):
    """Take a message in as the owner's gateway does; returns the result."""

    def send(**fields):
        now = fields.pop("now", None)
        return inbound_receive(owner=owner, inbound=message(**fields), now=now)

    return send
