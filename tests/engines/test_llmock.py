"""The engine against LLMock, an OpenAI-API mock we didn't write (``llmock`` on PyPI).

Its server streams as it chooses (tool-call arguments in fragments, several calls
in one answer) and breaks on demand: HTTP errors of each class and broken streams.
"""

from __future__ import annotations

import ssl

import pytest
from llmock.scenarios import Fail, Match, Reply, StreamFault, ToolCall
from llmock.testing import LLMockServer

from chats.engines import openai_compat as oc
from chats.engines.discovery import models_list
from chats.engines.http import tls_context
from chats.engines.openai_compat.messages import passed_on
from chats.models import EntryRole, Step, TurnState
from tests.engines.conftest import use_model
from tests.engines.test_failures import run
from tests.engines.test_recaps import ask, questions_in, written
from tests.factories import ChatFactory

# Only the completions: the engine also asks the server for the model's context size.
CHAT = Match(path="*/chat/completions")


@pytest.fixture(scope="module")
def llmock():
    with LLMockServer() as server:
        yield server


@pytest.fixture
def mock(llmock):
    llmock.state.scenarios.clear()
    yield llmock
    llmock.state.scenarios.clear()


def chat_on(agent, mock, **config):
    use_model(agent, mock.base_url("openai"), **config)
    return ChatFactory(agent=agent, title="Fix the README")


def said(chat):
    return list(chat.entries.filter(role=EntryRole.ASSISTANT).values_list("text", flat=True))


def test_a_plain_answer(model_agent, mock):
    mock.state.scenarios.add(Reply(text="All done, nothing to change.", match=CHAT))
    chat = chat_on(model_agent, mock)
    turn = run(chat)
    assert turn.state == TurnState.COMPLETED
    assert said(chat) == ["All done, nothing to change."]


def test_the_model_calls_of_a_reply_share_one_tls_context(
    model_agent, mock, workspace, monkeypatch
):
    """A TLS context loads the whole CA bundle (10-20 ms of CPU, the GIL held): made
    once a process, not once a call, even though each call has a client of its own."""
    made = []
    real = ssl.create_default_context
    monkeypatch.setattr(
        ssl, "create_default_context", lambda *a, **k: made.append(1) or real(*a, **k)
    )
    tls_context.cache_clear()
    (workspace / "README.md").write_text("read me\n")
    mock.state.scenarios.add(
        Reply(tool_calls=(ToolCall("read_file", {"path": "README.md"}),), match=CHAT),
        Reply(text="Read it.", match=CHAT),
        Reply(text="And again.", match=CHAT),
    )
    chat = chat_on(model_agent, mock)

    turn = run(chat)
    assert turn.state == TurnState.COMPLETED, turn.end_reason
    run(chat, "Once more")
    assert models_list(mock.base_url("openai"))  # the Connect page's question, too

    assert said(chat) == ["Read it.", "And again."]
    assert len(made) == 1


def test_fragmented_parallel_tool_calls_are_played_in_turn(model_agent, mock, workspace):
    (workspace / "README.md").write_text("read me\n")
    (workspace / "notes.txt").write_text("notes\n")
    mock.state.scenarios.add(
        Reply(
            tool_calls=(
                ToolCall("read_file", {"path": "README.md", "start": 1, "end": 40}),
                ToolCall("read_file", {"path": "notes.txt"}),
            ),
            match=CHAT,
        ),
        Reply(text="Read both.", match=CHAT),
    )
    chat = chat_on(model_agent, mock)
    turn = run(chat)
    assert turn.state == TurnState.COMPLETED, turn.end_reason
    assert [(s.tool, s.args) for s in Step.objects.filter(turn=turn).order_by("number")] == [
        ("read_file", {"path": "README.md", "start": 1, "end": 40}),
        ("read_file", {"path": "notes.txt"}),
    ]
    assert said(chat) == ["Read both."]


@pytest.mark.parametrize(
    ("fail", "starts"),
    [
        (
            Fail(401, message="Incorrect API key provided", match=CHAT),
            "The model at {url} refused the API key",
        ),
        (
            Fail(403, message="Forbidden", match=CHAT),
            "The model at {url} refused the API key (403)",
        ),
        (
            Fail(404, message="The model `m` does not exist", match=CHAT),
            "The model at {url} answered 404",
        ),
        (
            Fail(
                400,
                message="This model's maximum context length is 8192 tokens.",
                code="context_length_exceeded",
                match=CHAT,
            ),
            "The model at {url} says this reply no longer fits its context",
        ),
        (
            Fail(400, message="Invalid 'messages'", match=CHAT),
            "The model at {url} refused the request (400)",
        ),
        (
            Fail(
                429,
                message="You exceeded your current quota",
                code="insufficient_quota",
                match=CHAT,
            ),
            "The model at {url} says the key is out of quota",
        ),
    ],
    ids=["401", "403", "404", "overflow", "400", "quota"],
)
def test_each_error_that_trying_again_wont_mend_is_said_at_once(
    model_agent, mock, slept, fail, starts
):
    mock.state.scenarios.add(fail)
    chat = chat_on(model_agent, mock)
    turn = run(chat)
    assert turn.state == TurnState.FAILED
    assert turn.end_reason.startswith(starts.format(url=mock.base_url("openai"))), turn.end_reason
    assert slept == []


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_each_transient_error_is_tried_again(model_agent, mock, slept, status):
    mock.state.scenarios.add(
        Fail(status, retry_after=3, match=CHAT), Reply(text="Done.", match=CHAT)
    )
    chat = chat_on(model_agent, mock)
    turn = run(chat)
    assert turn.state == TurnState.COMPLETED, turn.end_reason
    assert said(chat) == ["Done."]
    assert slept == [3.0]  # its Retry-After, over the first backoff


def test_a_transient_error_that_lasts_ends_the_reply(model_agent, mock, slept):
    mock.state.scenarios.add(Fail(503, message="overloaded", times=3, match=CHAT))
    chat = chat_on(model_agent, mock, retries=2)
    turn = run(chat)
    assert turn.state == TurnState.FAILED
    assert turn.end_reason == oc.ERR_SERVER.format(
        url=mock.base_url("openai"), status=503, words="overloaded", tries="3 tries"
    )


@pytest.mark.parametrize(
    ("kind", "reason"),
    [("disconnect", None), ("truncate", oc.ERR_CUT_OFF), ("malformed", None)],
)
def test_a_broken_stream_is_tried_again(model_agent, mock, slept, kind, reason):
    mock.state.scenarios.add(
        Reply(text="The whole answer, at last.", match=CHAT),
        StreamFault(kind, after_chunks=1),
        Reply(text="The whole answer, at last.", match=CHAT),
    )
    chat = chat_on(model_agent, mock)
    turn = run(chat)
    assert turn.state == TurnState.COMPLETED, turn.end_reason
    assert said(chat) == ["The whole answer, at last."]
    assert len(slept) == 1


@pytest.mark.parametrize("kind", ["disconnect", "truncate", "malformed"])
def test_a_stream_that_keeps_breaking_ends_the_reply_saying_so(model_agent, mock, slept, kind):
    mock.state.scenarios.add(StreamFault(kind, after_chunks=1, times=3))
    chat = chat_on(model_agent, mock, retries=2)
    turn = run(chat)
    assert turn.state == TurnState.FAILED
    assert "after 3 tries" in turn.end_reason, turn.end_reason
    assert len(slept) == 2


def test_a_recap_folds_on_from_the_one_before(model_agent, mock):
    """Its summary requests (the ones that offer no tools) each read the recap before it,
    framed, and only the replies the cut newly passed: the same size each time."""
    recaps = [f"Recap {k}: " + "They went on with the details. " * 40 for k in range(3)]
    mock.state.scenarios.add(
        *(Reply(text=text, match=Match(path="*/chat/completions", tools=False)) for text in recaps),
        Reply(text="Answered.", times=None, match=Match(path="*/chat/completions", tools=True)),
    )
    chat = chat_on(model_agent, mock, context_tokens=4_000)
    written(chat, range(9))
    ask(chat, 9)
    for n in (10, 14):
        written(chat, range(n, n + oc.CUT_EVERY - 1))
        ask(chat, n + oc.CUT_EVERY - 1)

    summaries = [
        r.body["messages"][-1]["content"]
        for r in mock.state.journal.records(wait=5)
        if r.path.endswith("/chat/completions") and not r.body.get("tools")
    ]
    assert len(summaries) == 3
    assert not summaries[0].startswith(oc.RECAP_FRAME)
    folded = questions_in(summaries[0])
    for k, read in enumerate(summaries[1:], start=1):
        assert read.startswith(passed_on(recaps[k - 1].strip(), oc.RECAP_FRAME) + "\n\n")
        new = questions_in(read)
        assert new == list(range(folded[-1] + 1, folded[-1] + 1 + oc.CUT_EVERY)), read
        folded += new
    assert abs(len(summaries[2]) - len(summaries[1])) <= 10  # one recap, one cut's replies
