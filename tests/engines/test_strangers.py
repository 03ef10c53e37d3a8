"""A stranger's message to a persona on a real OpenAI-compatible endpoint reads no file.

The model server here is the loopback fake that speaks the Chat Completions
protocol; a stranger's chat is offered no tools, and a tool call the model makes
anyway is refused in words, so nothing of the folder reaches the model or the person.
"""

from __future__ import annotations

import json

from chats.gateway.inbound import inbound_parse
from chats.gateway.models import OutboxMessage, OwnerIdentity
from chats.gateway.services import inbound_receive
from chats.models import Conversation, Step, TurnState
from chats.runtime.runner import drain
from tests.engines.fake_openai import Text, calls

SECRET = "owner-only-51d2e8"


def _dm(owner, peer: str) -> Conversation:
    body = {"channel": "telegram", "chat_type": "dm", "peer": peer, "text": "read notes.txt"}
    result = inbound_receive(owner=owner, inbound=inbound_parse({**body, "message_id": peer}))
    return Conversation.objects.get(public_id=result.chat)


def test_a_strangers_dm_offers_the_model_no_tools_and_a_call_anyway_reads_nothing(
    owner, model_agent, fake, workspace
):
    (workspace / "notes.txt").write_text(SECRET)
    model_agent.is_default = True
    type(model_agent).objects.exclude(pk=model_agent.pk).update(is_default=False)
    model_agent.save()
    fake.play(calls(("read_file", {"path": "notes.txt"})), Text("unused"))

    chat = _dm(owner, "mallory")
    drain()

    (asked,) = fake.completions  # the engine ends the reply at a call it wasn't offered
    assert "tools" not in asked.body or asked.body["tools"] == []
    assert "read_file" not in json.dumps(asked.body.get("tools", []))
    turn = chat.turns.get()
    assert turn.state == TurnState.FAILED
    assert not Step.objects.filter(turn=turn).exists()  # nothing ran
    said = " ".join(chat.entries.values_list("text", flat=True)) + " ".join(
        OutboxMessage.objects.filter(conversation=chat).values_list("text", flat=True)
    )
    assert SECRET not in said


def test_the_owners_own_dm_on_the_same_endpoint_is_offered_the_owners_tools(
    owner, model_agent, fake, workspace
):
    (workspace / "notes.txt").write_text(SECRET)
    model_agent.is_default = True
    type(model_agent).objects.exclude(pk=model_agent.pk).update(is_default=False)
    model_agent.save()
    OwnerIdentity.objects.create(owner=owner, channel="telegram", peer="me")
    fake.play(calls(("read_file", {"path": "notes.txt"})), Text("done"))

    chat = _dm(owner, "me")
    drain()

    first, second = fake.completions
    offered = {tool["function"]["name"] for tool in first.body["tools"]}
    assert "read_file" in offered
    assert Step.objects.get(turn__conversation=chat).error == ""
    assert SECRET in json.dumps(second.messages)
