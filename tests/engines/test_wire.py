"""Each server's dialect of the wire, replayed byte for byte from recordings
(tests/engines/recordings/, SOURCES.md says where each comes from)."""

from __future__ import annotations

import json
import re

import pytest

from chats.engines import openai_compat as oc
from chats.models import EntryRole, Step, TurnState
from tests.engines.conftest import use_model
from tests.engines.replay import Played, Replay, error, stream
from tests.engines.test_failures import run
from tests.factories import ChatFactory


def chat_on(agent, replay, **config):
    use_model(agent, replay.base_url, **config)
    return ChatFactory(agent=agent, title="Fix the README")


def said(chat):
    return list(chat.entries.filter(role=EntryRole.ASSISTANT).values_list("text", flat=True))


def steps(turn):
    return [(s.tool, s.args) for s in Step.objects.filter(turn=turn).order_by("number")]


def answer_of(replay, **config):
    """What the wire reading makes of the next recorded answer."""
    settings = {"base_url": replay.base_url, "model": "m", **config}
    config_ = oc.ModelConfig(**settings)
    return oc.complete(config_, "", [{"role": "user", "content": "hi"}], agent="coder")


DONE = stream("llamacpp-inline-think.sse")  # any plain answer, to end a tool loop


def test_openais_own_parallel_calls_are_read_as_two_calls():
    with Replay(stream("openai-parallel-calls.sse")) as replay:
        answer = answer_of(replay)
    assert [(c.name, json.loads(c.arguments)) for c in answer.calls] == [
        ("GetWeatherArgs", {"city": "Edinburgh", "country": "GB", "units": "c"}),
        ("get_stock_price", {"ticker": "AAPL", "exchange": "NASDAQ"}),
    ]


def test_ollamas_calls_all_at_index_0_are_two_calls(model_agent, workspace):
    (workspace / "README.md").write_text("read me\n")
    (workspace / "notes.txt").write_text("notes\n")
    with Replay(stream("ollama-parallel-calls-index-0.sse"), DONE) as replay:
        chat = chat_on(model_agent, replay)
        turn = run(chat)
    assert turn.state == TurnState.COMPLETED, turn.end_reason
    assert steps(turn) == [
        ("read_file", {"path": "README.md"}),
        ("read_file", {"path": "notes.txt"}),
    ]


def test_vllms_final_chunk_repeating_the_name_is_one_call(model_agent, workspace):
    (workspace / "README.md").write_text("read me\n")
    with Replay(stream("vllm-glm-final-chunk-repeats.sse"), DONE) as replay:
        chat = chat_on(model_agent, replay)
        turn = run(chat)
    assert turn.state == TurnState.COMPLETED, turn.end_reason
    assert steps(turn) == [("read_file", {"path": "README.md"})]


def test_geminis_fragments_with_no_index_are_one_call_and_its_signature_goes_back(
    model_agent, workspace
):
    (workspace / "README.md").write_text("read me\n")
    with Replay(stream("gemini-index-less-fragments-signature.sse"), DONE) as replay:
        chat = chat_on(model_agent, replay)
        turn = run(chat)
    assert turn.state == TurnState.COMPLETED, turn.end_reason
    assert steps(turn) == [("read_file", {"path": "README.md"})]
    second = replay.completions[1]["messages"]
    call = next(m for m in second if m.get("tool_calls"))["tool_calls"][0]
    assert call["extra_content"] == {"google": {"thought_signature": "CiQBjz1rX2Vx5l0sig/A=="}}


def test_litellms_arguments_as_an_object_are_read(model_agent, workspace):
    (workspace / "README.md").write_text("read me\n")
    with Replay(stream("litellm-arguments-object.sse"), DONE) as replay:
        chat = chat_on(model_agent, replay)
        turn = run(chat)
    assert turn.state == TurnState.COMPLETED, turn.end_reason
    assert steps(turn) == [("read_file", {"path": "README.md"})]


def test_a_malformed_chunk_is_tried_again_then_said(model_agent, slept):
    bad = stream("proxy-malformed-chunk.sse")
    with Replay(bad, bad, bad) as replay:
        chat = chat_on(model_agent, replay, retries=2)
        turn = run(chat)
    assert turn.state == TurnState.FAILED
    assert turn.end_reason.startswith(f"The model at {replay.base_url} kept sending a chunk")
    assert "after 3 tries" in turn.end_reason and len(slept) == 2


def test_a_reply_cut_at_the_length_limit_is_not_a_completed_reply(model_agent):
    # openai-python's own recording: the answer says only `{"`, then "length".
    with Replay(stream("openai-length-after-words.sse")) as replay:
        chat = chat_on(model_agent, replay)
        turn = run(chat)
    assert turn.state == TurnState.FAILED
    assert turn.end_reason == oc.ERR_CUT_AT_LENGTH
    assert said(chat) == ['{"']  # kept, and said to be unfinished


def test_inline_thinking_is_neither_shown_nor_sent_back(model_agent, monkeypatch):
    shown: list[str] = []
    with Replay(DONE, DONE) as replay:
        chat = chat_on(model_agent, replay)
        from chats.runtime import stepping

        real = stepping._TextStreamer.__call__

        def spy(streamer, text: str) -> bool:  # what the page is shown live
            shown.append(text)
            return real(streamer, text)

        monkeypatch.setattr(stepping._TextStreamer, "__call__", spy)
        run(chat)
        run(chat, text="And again")
    assert said(chat) == ["Hello there!", "Hello there!"]
    assert shown and not any("think" in text or "greeting" in text for text in shown)
    assert "greeting" not in json.dumps(replay.completions[1])


def test_deepseeks_reasoning_goes_back_with_its_call_in_the_tool_loop(model_agent, workspace):
    (workspace / "README.md").write_text("read me\n")
    with Replay(stream("deepseek-reasoning-then-call.sse"), DONE) as replay:
        chat = chat_on(model_agent, replay)
        turn = run(chat)
    assert turn.state == TurnState.COMPLETED, turn.end_reason
    call = next(m for m in replay.completions[1]["messages"] if m.get("tool_calls"))
    assert call["reasoning_content"] == "I should read the README first."


def test_tool_call_ids_are_nine_letters_or_digits(model_agent, workspace):
    (workspace / "README.md").write_text("read me\n")
    with Replay(stream("vllm-glm-final-chunk-repeats.sse"), DONE) as replay:
        chat = chat_on(model_agent, replay)
        run(chat)
    messages = replay.completions[1]["messages"]
    ids = [c["id"] for m in messages for c in m.get("tool_calls") or ()]
    ids += [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert ids and all(re.fullmatch(r"[a-zA-Z0-9]{9}", i) for i in ids), ids


def alternating(body):
    """What a Gemma template does: a 500 unless the roles after system alternate."""
    roles = [m["role"] for m in body["messages"] if m["role"] != "system"]
    if any(a == b == "user" for a, b in zip(roles, roles[1:], strict=False)):
        return error("llamacpp-500-roles-alternate.json", 500)
    return None


def test_after_a_failed_reply_the_next_request_still_alternates(model_agent, slept):
    refused = Played(b'{"error": {"message": "bad key"}}', 401)
    with Replay(refused, DONE, judge=alternating) as replay:
        chat = chat_on(model_agent, replay)
        first = run(chat)
        second = run(chat, text="Try again")
    assert first.state == TurnState.FAILED
    assert second.state == TurnState.COMPLETED, second.end_reason
    roles = [m["role"] for m in replay.completions[1]["messages"]]
    assert roles == ["system", "user"]
    assert "Try again" in replay.completions[1]["messages"][1]["content"]


def test_a_template_500_is_said_at_once_not_tried_again(model_agent, slept):
    with Replay(*[error("llamacpp-500-roles-alternate.json", 500)] * 3) as replay:
        chat = chat_on(model_agent, replay)
        turn = run(chat)
    assert turn.state == TurnState.FAILED
    assert "Conversation roles must alternate" in turn.end_reason
    assert "chat template refused" in turn.end_reason
    assert len(replay.completions) == 1 and slept == []


def test_a_500_saying_the_context_is_full_is_an_overflow_not_tried_again(model_agent, slept):
    with Replay(*[error("llamacpp-500-context.json", 500)] * 3) as replay:
        chat = chat_on(model_agent, replay)
        turn = run(chat)
    assert turn.end_reason.startswith(
        f"The model at {replay.base_url} says this reply no longer fits its context"
    )
    assert len(replay.completions) == 1 and slept == []


def test_max_tokens_refused_is_sent_again_as_max_completion_tokens(model_agent):
    with Replay(error("openai-400-max-tokens.json", 400), DONE) as replay:
        use_model(model_agent, replay.base_url)
        result = oc.connection_test(model_agent)
    assert result.ok, result.message
    first, second = replay.completions
    assert first["max_tokens"] == 16
    assert "max_tokens" not in second and second["max_completion_tokens"] == 16


@pytest.mark.parametrize(
    ("played", "words"),
    [
        (error("gemini-400-list.json", 400), "Function call is missing a thought_signature"),
        (stream("vllm-error-in-stream.sse"), "The decoder prompt (length 9000) is longer"),
        (stream("vllm-error-in-stream-nested.sse"), "Tool call parser failed"),
    ],
    ids=["gemini-list", "vllm-top-level-in-stream", "error-in-stream"],
)
def test_an_error_body_of_any_shape_keeps_its_reason(model_agent, slept, played, words):
    with Replay(played, played, played) as replay:
        chat = chat_on(model_agent, replay)
        turn = run(chat)
    assert turn.state == TurnState.FAILED
    assert words in turn.end_reason, turn.end_reason
    assert "breaking off" not in turn.end_reason and "Error code" not in turn.end_reason


def test_retry_after_ms_is_honoured(model_agent, slept):
    limited = error("openai-429-rate-limit.json", 429, **{"retry-after-ms": "2500"})
    with Replay(limited, DONE) as replay:
        chat = chat_on(model_agent, replay)
        turn = run(chat)
    assert turn.state == TurnState.COMPLETED, turn.end_reason
    assert slept == [2.5]


@pytest.mark.parametrize(
    "escaped",
    [RuntimeError("a new release's bug"), AttributeError("'NoneType' object has no attribute 'x'")],
    ids=["runtime-error", "attribute-error"],
)
def test_whatever_escapes_the_sdks_stream_reader_is_an_answer_that_broke_off(
    model_agent, slept, monkeypatch, escaped
):
    """Not "Conch hit an internal error": the server's stream is where it went wrong, and
    Conch says so (an SDK release once broke this way mid-stream)."""
    import openai

    real = openai.Stream.__iter__

    def breaks_after_a_chunk(self):
        chunks = real(self)
        yield next(chunks)
        raise escaped

    monkeypatch.setattr(openai.Stream, "__iter__", breaks_after_a_chunk)
    with Replay(DONE, DONE, DONE) as replay:
        chat = chat_on(model_agent, replay, retries=2)
        turn = run(chat)
    assert turn.state == TurnState.FAILED
    assert turn.end_reason == oc.ERR_CUT_OFF.format(url=replay.base_url, tries="3 tries")
    assert slept and len(slept) == 2  # tried again, as for any answer that broke off
