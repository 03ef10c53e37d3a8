"""The context budget: the oldest replies become a recap, by the summarizer maintenance uses."""

from __future__ import annotations

import pytest

from chats.engines import openai_compat as oc
from chats.models import Conversation, TurnState
from chats.runtime.runner import drain
from chats.runtime.stepping import system_text_for
from chats.runtime.turns import message_send
from chats.summarize import SummaryLine, summarize
from tests.engines.conftest import use_model
from tests.engines.fake_openai import Status, Text
from tests.factories import ChatFactory

DETAIL = "detail " * 170  # about 300 tokens a question


def question(n: int) -> str:
    return f"Question {n}: {DETAIL}".strip()


@pytest.fixture
def long_chat(owner, agent, model_agent, fake, workspace):
    """Ten replies played by a script, then the chat handed to the model persona,
    whose context (4000 tokens) holds only the last few of them."""
    chat = ChatFactory(
        owner=owner,
        title="Long",
        folder=str(workspace),
        script=[[{"say": f"Answer {n}."}] for n in range(10)],
    )
    for n in range(10):
        message_send(conversation=chat, text=question(n))
        drain()
    use_model(model_agent, fake.base_url, context_tokens=4_000)
    Conversation.objects.filter(pk=chat.pk).update(agent=model_agent)
    chat.refresh_from_db()
    return chat


def ask(chat, text):
    turn = message_send(conversation=chat, text=text)
    drain()
    turn.refresh_from_db()
    return turn


def test_the_oldest_replies_become_a_recap_and_the_recent_ones_are_kept(long_chat, fake):
    fake.play(Text("They asked ten questions about details."), Text("Answer 10."))
    turn = ask(long_chat, "Question 10")

    assert turn.state == TurnState.COMPLETED
    summary_request, request = fake.completions
    # The recap is written by the persona's own model, through chats.summarize.
    assert summary_request.system.startswith("You summarize the earlier part")
    assert "person (message): Question 0: detail" in summary_request.messages[-1]["content"]
    opening = request.messages[1]
    assert opening["role"] == "user"
    assert opening["content"].startswith(
        f"{oc.RECAP_FRAME}\nThey asked ten questions about details."
    )
    sent = repr(request.messages)
    assert question(0) not in sent and question(7) not in sent
    assert question(8) in sent and question(9) in sent  # the recent replies, word for word
    assert request.messages[-1] == {"role": "user", "content": "Question 10"}
    assert request.system == system_text_for(long_chat)  # the recap is not in it
    budget = oc.ModelConfig.of(long_chat.agent)
    tools = len(repr(request.body["tools"])) // oc.CHARS_PER_TOKEN
    assert oc.estimate_tokens(request.messages) + tools + budget.reserve_tokens <= 4_000


def test_the_recap_is_made_once_and_what_is_kept_keeps_its_bytes(long_chat, fake):
    fake.play(Text("Recap of the early questions."), Text("Answer 10."), Text("Answer 11."))
    ask(long_chat, "Question 10")
    ask(long_chat, "Question 11")

    summaries = [r for r in fake.completions if r.system.startswith("You summarize")]
    assert len(summaries) == 1
    first, second = [r for r in fake.completions if not r.system.startswith("You summarize")]
    # The same cut: the second request starts with everything the first sent.
    assert second.messages[: len(first.messages)] == first.messages


def test_a_recap_the_model_cannot_write_falls_back_to_the_extractive_one(long_chat, fake):
    fake.play(Status(400, "summaries are not allowed here"), Text("Answer 10."))
    turn = ask(long_chat, "Question 10")

    assert turn.state == TurnState.COMPLETED
    request = fake.completions[-1]
    assert request.messages[1]["content"].startswith(f"{oc.RECAP_FRAME}\nRecap of ")
    assert "Question 0" in request.messages[1]["content"]  # the extractive recap's first line


def test_the_cut_moves_in_steps_so_it_stays_put_while_the_chat_grows():
    sizes = [100] * 10
    cut = oc.choose_cut(sizes, room=500)
    assert cut == 8  # a multiple of CUT_EVERY: 4 would keep 600, 8 keeps 200
    grown = [oc.choose_cut(sizes + [100] * more, room=500) for more in range(3)]
    assert grown == [8, 8, 8]  # still fits after two more replies: the same cut
    assert oc.choose_cut([*sizes, 100, 100, 100, 100], room=500) == 12
    assert oc.choose_cut([100, 600], room=500) is None  # the last reply alone is too big


def test_compaction_uses_the_personas_model_when_it_has_one(model_agent, fake):
    fake.play(Text("A short recap."))
    lines = [SummaryLine("person", "message", f"Line {n}.") for n in range(5)]
    text, summarizer = summarize(lambda: iter(lines), agent=model_agent)

    assert (text, summarizer) == ("A short recap.", "openai")
    [request] = fake.completions
    assert "person (message): Line 0." in request.messages[-1]["content"]
