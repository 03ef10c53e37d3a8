"""What the server's answer was, in the right words: a refusal is the reply's words, marked;
a connection that broke is told apart from one never made; a failure the server says will
repeat is said at once, with what to do; an answer whose stream said ``[DONE]`` is whole.

Each replays a real server's bytes (tests/engines/recordings/SOURCES.md), or a real break
of the connection (``replay.cut``, ``replay.HANG_UP``).
"""

from __future__ import annotations

import pytest

from chats.engines import openai_compat as oc
from chats.engines.base import EngineError
from chats.models import EntryRole, TurnState
from tests.engines.replay import HANG_UP, Played, Replay, cut, error, stream
from tests.engines.test_failures import run
from tests.engines.test_wire import DONE, answer_of, chat_on, said

REFUSED = "I'm sorry, I can't assist with that request."


def test_a_refusal_is_read_as_the_answers_refusal():
    with Replay(stream("openai-refusal.sse")) as replay:
        answer = answer_of(replay)
    assert answer.refusal == REFUSED
    assert answer.text == "" and answer.words == REFUSED
    assert answer.finish_reason == "stop"


def test_a_refusal_is_the_replys_words_marked_and_the_model_reads_them_back(model_agent):
    with Replay(stream("openai-refusal.sse"), DONE) as replay:
        chat = chat_on(model_agent, replay)
        turn = run(chat)
        run(chat, text="Then tell me something else")
    assert turn.state == TurnState.COMPLETED, turn.end_reason
    first = chat.entries.filter(role=EntryRole.ASSISTANT, turn=turn).get()
    assert (first.text, first.data) == (REFUSED, {"refusal": True})
    # Next time the model reads its refusal as its own words.
    messages = replay.completions[1]["messages"]
    assert {"role": "assistant", "content": REFUSED} in messages
    assert messages[-1]["role"] == "user"


def test_an_answer_that_breaks_off_mid_body_is_said_to_break_off_not_to_be_unreachable(
    model_agent, slept
):
    # The server answers, sends part of its stream, and the connection closes before the
    # chunked body's last chunk: httpx's "incomplete chunked read".
    broken = cut(DONE, 300)
    with Replay(broken, broken) as replay:
        chat = chat_on(model_agent, replay, retries=1)
        turn = run(chat)
    assert turn.state == TurnState.FAILED
    assert turn.end_reason == oc.ERR_CUT_OFF.format(url=replay.base_url, tries="2 tries")
    assert len(replay.completions) == 2 and slept == [1.0]


def test_an_answer_that_broke_off_once_is_tried_again(model_agent, slept):
    with Replay(cut(DONE, 300), DONE) as replay:
        chat = chat_on(model_agent, replay)
        turn = run(chat)
    assert turn.state == TurnState.COMPLETED, turn.end_reason
    assert said(chat) == ["Hello there!"]


def test_an_error_whose_body_breaks_off_is_an_answer_that_broke_off(model_agent, slept):
    # A 500 whose body never ends: the SDK reads it to raise the status error, and lets
    # the transport's error out as it is. Never "Conch hit an internal error".
    broken = cut(error("llamacpp-500-context.json", 500), 12)
    with Replay(broken, broken) as replay:
        chat = chat_on(model_agent, replay, retries=1)
        turn = run(chat)
    assert turn.state == TurnState.FAILED
    assert turn.end_reason == oc.ERR_CUT_OFF.format(url=replay.base_url, tries="2 tries")


def test_a_server_that_takes_the_request_and_hangs_up_was_reached(model_agent, slept):
    with Replay(HANG_UP, HANG_UP) as replay:
        chat = chat_on(model_agent, replay, retries=1)
        turn = run(chat)
    assert turn.state == TurnState.FAILED
    assert turn.end_reason.startswith(
        f"The model at {replay.base_url} took the request, then closed the connection "
        "without answering (Server disconnected without sending a response.), after 2 tries."
    )
    assert "couldn't reach" not in turn.end_reason
    assert len(replay.completions) == 2


@pytest.mark.parametrize(
    ("name", "status", "words", "advice"),
    [
        (
            "llamacpp-500-tools-stream.json",
            500,
            "Cannot use tools with stream",
            "Update llama.cpp and start llama-server again.",
        ),
        (
            "llamacpp-500-tools-jinja.json",
            500,
            "tools param requires --jinja flag",
            "start llama-server with --jinja.",
        ),
        (
            "ollama-400-no-tools.json",
            400,
            "registry.ollama.ai/library/gemma3:4b does not support tools",
            "Pick a model that supports tools",
        ),
        (
            "vllm-400-auto-tool-choice.json",
            400,
            '"auto" tool choice requires --enable-auto-tool-choice',
            "start it with --enable-auto-tool-choice and the --tool-call-parser for this model.",
        ),
        (
            "openrouter-404-no-tool-endpoints.json",
            404,
            "No endpoints found that support tool use.",
            "Pick a model that supports tool use.",
        ),
    ],
    ids=["llamacpp-stream", "llamacpp-jinja", "ollama", "vllm", "openrouter"],
)
def test_a_failure_the_server_says_will_repeat_is_said_at_once_with_what_to_do(
    model_agent, slept, name, status, words, advice
):
    with Replay(*[error(name, status)] * 3) as replay:
        chat = chat_on(model_agent, replay)
        turn = run(chat)
    assert turn.state == TurnState.FAILED
    assert len(replay.completions) == 1 and slept == []  # never tried again
    assert f"({status}: " in turn.end_reason and words in turn.end_reason
    assert advice in turn.end_reason, turn.end_reason
    assert "Check the model name" not in turn.end_reason  # OpenRouter's 404 is no unknown model


def test_an_empty_finish_reason_then_done_is_a_whole_answer(model_agent, slept):
    with Replay(stream("geniex-empty-finish-reason.sse")) as replay:
        chat = chat_on(model_agent, replay)
        turn = run(chat)
    assert turn.state == TurnState.COMPLETED, turn.end_reason
    assert said(chat) == ["Hello! How can I help you today?"]
    assert len(replay.completions) == 1 and slept == []


def test_an_empty_finish_reason_with_no_done_is_still_an_answer_that_broke_off(slept):
    whole = stream("geniex-empty-finish-reason.sse")
    unended = Played(whole.body.replace(b"data:[DONE]\n\n", b""), headers=whole.headers)
    with Replay(unended) as replay, pytest.raises(EngineError) as failed:
        answer_of(replay, retries=0)
    assert str(failed.value) == oc.ERR_CUT_OFF.format(url=replay.base_url, tries="1 try")
