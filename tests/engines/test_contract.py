"""The engine against a loopback server that speaks Chat Completions: streaming and tool calls."""

from __future__ import annotations

import json

import pytest

from chats import events
from chats.models import Entry, EntryRole, Status, Step, TurnState
from chats.runtime.runner import drain
from chats.runtime.turns import conversation_stop, message_send
from chats.tools.registry import tools_offered
from tests.engines.conftest import MAIN_KEY, OTHER_KEY
from tests.engines.fake_openai import Text, calls
from tests.factories import ChatFactory


def test_a_reply_calls_list_chats_then_edit_file_then_answers(model_agent, fake, workspace):
    (workspace / "README.md").write_text("Hello wrold\n")
    fake.play(
        calls(("list_chats", {})),
        calls(("edit_file", {"path": "README.md", "old": "wrold", "new": "world"})),
        Text("Fixed the typo in README.md."),
    )
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = message_send(conversation=chat, text="Fix the typo in the README")
    drain()

    turn.refresh_from_db()
    assert turn.state == TurnState.COMPLETED
    assert (workspace / "README.md").read_text() == "Hello world\n"
    assert list(turn.steps.values_list("tool", flat=True)) == ["list_chats", "edit_file"]
    assert turn.files_changed == [str((workspace / "README.md").resolve())]
    said = Entry.objects.filter(conversation=chat, role=EntryRole.ASSISTANT).last()
    assert said.text == "Fixed the typo in README.md."

    first, second, third = fake.completions
    assert all(r.body["stream"] is True for r in fake.completions)
    assert all(r.body["model"] == "fake-model" for r in fake.completions)
    offered = sorted(t.name for t in tools_offered(chat))
    assert sorted(t["function"]["name"] for t in first.body["tools"]) == offered
    assert {"list_chats", "edit_file"} <= set(offered)
    assert first.messages[-1] == {"role": "user", "content": "Fix the typo in the README"}

    # Each step comes back as the assistant's tool call, then the tool's result.
    list_call, list_result = second.messages[-2:]
    assert list_call["role"] == "assistant"
    step = Step.objects.get(turn=turn, tool="list_chats")
    function = list_call["tool_calls"][0]["function"]
    assert function["name"] == "list_chats"
    assert json.loads(function["arguments"]) == step.args  # as run, its defaults filled in
    assert list_result["role"] == "tool"
    assert list_result["tool_call_id"] == list_call["tool_calls"][0]["id"]
    assert list_result["content"].startswith(step.result.strip()[:40])

    edit_call, edit_result = third.messages[-2:]
    assert edit_call["tool_calls"][0]["function"]["name"] == "edit_file"
    assert edit_result["tool_call_id"] == edit_call["tool_calls"][0]["id"]
    assert "README.md" in edit_result["content"]
    # What was sent before is sent again, byte for byte: the prefix a prompt cache matches.
    assert third.messages[: len(second.messages)] == second.messages
    assert second.messages[: len(first.messages)] == first.messages


def test_words_before_a_tool_call_are_said_then_the_call_is_played(model_agent, fake, workspace):
    (workspace / "notes.txt").write_text("one\n")
    fake.play(
        calls(("read_file", {"path": "notes.txt"}), text="Let me read it first."),
        Text("It says one."),
    )
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = message_send(conversation=chat, text="What does notes.txt say?")
    drain()

    words = list(chat.entries.filter(role=EntryRole.ASSISTANT).values_list("text", flat=True))
    assert words == ["Let me read it first.", "It says one."]
    assert list(turn.steps.values_list("tool", flat=True)) == ["read_file"]
    call = fake.completions[1].messages[-2]
    assert call["content"] == "Let me read it first."
    assert call["tool_calls"][0]["function"]["name"] == "read_file"


def test_several_calls_in_one_answer_are_played_in_order(model_agent, fake, workspace):
    (workspace / "a.txt").write_text("a\n")
    (workspace / "b.txt").write_text("b\n")
    fake.play(
        calls(("read_file", {"path": "a.txt"}), ("read_file", {"path": "b.txt"})),
        Text("Both read."),
    )
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = message_send(conversation=chat, text="Read both")
    drain()

    assert [s.args["path"] for s in turn.steps.order_by("number")] == ["a.txt", "b.txt"]
    assert len(fake.completions) == 2  # the second call was played without asking again
    results = [m for m in fake.completions[1].messages if m["role"] == "tool"]
    assert [r["content"].strip() for r in results] == ["a", "b"]


def test_the_key_is_the_personas_own_sent_as_the_bearer_token(model_agent, fake, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment-000000")
    fake.play(Text("Hi."))
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    message_send(conversation=chat, text="hello")
    drain()

    [request] = fake.completions
    assert request.authorization == f"Bearer {MAIN_KEY}"
    sent = repr(request.headers) + repr(request.body)
    assert OTHER_KEY not in sent
    assert "sk-from-the-environment" not in sent


def test_another_persona_on_the_same_endpoint_sends_its_own_key(
    owner, model_agent, fake, workspace
):
    from chats.models import Agent

    other = Agent.objects.get(slug="other")
    fake.play(Text("Hi from the other persona."))
    chat = ChatFactory(owner=owner, title="Other", folder=str(workspace), agent=other)
    message_send(conversation=chat, text="hello")
    drain()

    [request] = fake.completions
    assert request.authorization == f"Bearer {OTHER_KEY}"
    assert MAIN_KEY not in repr(request.headers) + repr(request.body)


def test_a_persona_without_a_key_never_sends_one_from_the_environment(
    model_agent, fake, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment-000000")
    model_agent.engine_config = {**model_agent.engine_config, "auth_profile": ""}
    model_agent.save()
    fake.play(Text("Hi."))
    message_send(conversation=ChatFactory(agent=model_agent, title="Fix the README"), text="hello")
    drain()

    [request] = fake.completions
    assert "sk-" not in request.authorization


@pytest.mark.django_db(transaction=True)
def test_words_stream_into_the_page_as_the_model_writes_them(model_agent, fake, published):
    fake.play(Text("Hello <b>there</b>, friend", pieces=4))
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    message_send(conversation=chat, text="hi")
    drain()

    live = [e for e in published if e.type == events.REPLY_TEXT]
    texts = [e.data["text"] for e in live]
    assert len(texts) >= 3
    assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:], strict=False))
    assert texts[-1] == "Hello <b>there</b>, friend"
    assert {e.conversation_id for e in live} == {chat.public_id}
    assert {e.data["turn"] for e in live} == {1}
    # The words end up as one entry; nothing live was stored.
    assert list(chat.entries.filter(role=EntryRole.ASSISTANT).values_list("text", flat=True)) == [
        "Hello <b>there</b>, friend"
    ]


def drain_stopping_at_first_words(chat) -> list[str]:
    """Run the chat's reply, pressing Stop as its first words are shown; the words seen."""
    seen: list[str] = []

    def stop_on_first_words(event):
        if event.type == events.REPLY_TEXT:
            seen.append(event.data["text"])
            if len(seen) == 1:
                conversation_stop(conversation=chat)

    unsubscribe = events.subscribe(stop_on_first_words)
    try:
        drain()
    finally:
        unsubscribe()
    return seen


@pytest.mark.django_db(transaction=True)
def test_stopping_a_reply_stops_the_model_mid_answer(model_agent, fake):
    fake.play(Text("one two three four five six", pieces=6))
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = message_send(conversation=chat, text="count")
    seen = drain_stopping_at_first_words(chat)

    turn.refresh_from_db()
    chat.refresh_from_db()
    assert turn.state == TurnState.STOPPED
    assert chat.status == Status.STOPPED
    assert len(seen) == 1  # nothing more was shown once it stopped
    # The words it had written are kept, marked stopped, where the reply stood: before
    # the chat's note that it was stopped.
    kept = list(chat.entries.order_by("seq").values_list("role", "text", "data"))
    assert kept[-2:] == [
        (EntryRole.ASSISTANT, seen[0], {"stopped": True}),
        (EntryRole.CONCH, "Stopped: You stopped it.", {"stopped_by": "person"}),
    ]


@pytest.mark.django_db(transaction=True)
def test_the_words_a_stop_kept_are_the_reply_so_far_at_the_next_message(model_agent, fake):
    fake.play(Text("one two three four five six", pieces=6))
    fake.play(Text("Picking up: seven."))
    chat = ChatFactory(agent=model_agent, title="Count")
    message_send(conversation=chat, text="count")
    seen = drain_stopping_at_first_words(chat)
    message_send(conversation=chat, text="go on")
    drain()

    again = fake.completions[-1].messages
    assert again[-2] == {"role": "assistant", "content": seen[0]}
    assert again[-1]["role"] == "user"
    assert "Stopped: You stopped it." in again[-1]["content"]
    assert again[-1]["content"].endswith("go on")
    assert chat.entries.filter(data__stopped=True).count() == 1  # kept once
