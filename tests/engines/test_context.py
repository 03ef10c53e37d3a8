"""The model's real context size, read from its server, and never budgeted past; and a
context too small to work in, said by Test connection and by a chat in the same words,
naming the setting of the server that said it.

Each server's answer is a published shape (tests/engines/recordings/SOURCES.md).
"""

from __future__ import annotations

import json
import re

import pytest

from chats.engines import openai_compat as oc
from chats.engines.openai_compat.config import ROOM_TO_WORK, ServerContext
from chats.engines.openai_compat.context import server_said, too_small_to_work_in
from chats.engines.openai_compat.messages import function_specs, request_tokens
from chats.models import TurnState
from chats.runtime.connect import chat_sends, model_test
from tests.engines.conftest import use_model
from tests.engines.replay import RECORDINGS, Replay, stream
from tests.engines.test_failures import run
from tests.factories import ChatFactory


def page(name):
    return json.loads((RECORDINGS / name).read_text())


VLLM = ({"/v1/models": page("vllm-models.json")}, "Qwen/Qwen2.5-Coder-7B-Instruct", 2048)
LLAMACPP = ({"/props": page("llamacpp-props.json")}, "Meta-Llama-3.1-8B-Instruct", 1024)
OLLAMA = ({"/api/show": page("ollama-api-show.json")}, "llava", 4096)
OLLAMA_LOADED = (
    {"/api/show": page("ollama-api-show.json"), "/api/ps": page("ollama-api-ps.json")},
    "mistral:latest",
    2048,
)
with_num_ctx = {**page("ollama-api-show.json")}
with_num_ctx["parameters"] += "\nnum_ctx                        3072"
OLLAMA_NUM_CTX = ({"/api/show": with_num_ctx}, "llava", 3072)


@pytest.mark.parametrize(
    ("pages", "model", "size"),
    [VLLM, LLAMACPP, OLLAMA, OLLAMA_LOADED, OLLAMA_NUM_CTX],
    ids=["vllm", "llamacpp", "ollama-default", "ollama-loaded", "ollama-num-ctx"],
)
def test_the_context_size_is_read_from_the_server(pages, model, size):
    with Replay(pages=pages) as replay:
        config = oc.ModelConfig(base_url=replay.base_url, model=model)
        assert oc.server_context(config, "") == size


def test_a_server_that_says_nothing_leaves_the_setting(fake):
    config = oc.ModelConfig(base_url=fake.base_url, model="fake-model")
    assert oc.server_context(config, "") is None
    assert config.fitted(None) == config


@pytest.mark.parametrize(
    ("pages", "model", "size", "kind"),
    [(*VLLM, "vLLM"), (*LLAMACPP, "llama.cpp"), (*OLLAMA, "Ollama")],
    ids=["vllm", "llamacpp", "ollama"],
)
def test_a_reply_is_never_budgeted_past_the_servers_context(model_agent, pages, model, size, kind):
    # The persona says 32768; the server runs the model with less: the server wins.
    with Replay(pages=pages) as replay:
        use_model(model_agent, replay.base_url, model=model, context_tokens=32_768)
        chat = ChatFactory(agent=model_agent, title="Fix the README")
        turn = run(chat, text=("word " * (size * 4 // 5 + 400)).strip())
    assert turn.state == TurnState.FAILED
    assert f"has {size} (as {kind} says)" in turn.end_reason, turn.end_reason
    assert not [r for r in replay.requests if r["path"].endswith("/chat/completions")]


def test_a_smaller_setting_than_the_servers_is_kept():
    config = oc.ModelConfig(
        base_url="http://x/v1", model="m", context_tokens=1000, context_set=True
    )
    assert config.fitted(4096).context_tokens == 1000
    unset = oc.ModelConfig(base_url="http://x/v1", model="m")
    assert unset.fitted(4096).context_tokens == 4096
    assert unset.fitted(4096).reserve_tokens == 512


# -- a context too small to work in ----------------------------------------------------

ANSWER = "llamacpp-inline-think.sse"  # any plain answer: the model answered Test connection
TWO_K = 2048
VLLM_2K = VLLM[:2]
LLAMACPP_2K = ({"/props": page("llamacpp-props.json")}, LLAMACPP[1])
LLAMACPP_2K[0]["/props"]["default_generation_settings"]["n_ctx"] = TWO_K
OLLAMA_2K = OLLAMA_LOADED[:2]  # loaded with 2048, as Ollama before 0.6.7 gave every model
own_2k = {**page("ollama-api-show.json")}
own_2k["parameters"] += f"\nnum_ctx                        {TWO_K}"
OLLAMA_OWN_2K = ({"/api/show": own_2k}, "llava")

# What would help, for each server: its own setting, with the number the chat needs.
KNOBS = {
    "vllm": (VLLM_2K, "vLLM", "restart vLLM with --max-model-len {n}"),
    "llamacpp": (LLAMACPP_2K, "llama.cpp", "restart llama-server with -c {n}"),
    "ollama": (OLLAMA_2K, "Ollama", "start Ollama with OLLAMA_CONTEXT_LENGTH={n} ollama serve"),
    "ollama-num-ctx": (OLLAMA_OWN_2K, "Ollama", "set the model's own num_ctx to {n}"),
}


def needed(said: str) -> int:
    """The context size the words ask for."""
    found = {int(n) for n in re.findall(r"(?:To give it|context_tokens to|really has) (\d+)", said)}
    assert len(found) == 1, said
    return found.pop()


@pytest.mark.parametrize("server", list(KNOBS))
def test_test_connection_says_a_context_too_small_to_work_in_and_what_would_help(
    model_agent, server
):
    (pages, model), kind, knob = KNOBS[server]
    with Replay(stream(ANSWER), pages=pages) as replay:
        use_model(model_agent, replay.base_url, model=model)
        result = model_test(model_agent)

    assert result.ok and result.message.startswith(f"Connected: “{model}”"), result.message
    words = result.too_small
    assert f"“{model}” has {TWO_K} tokens of context (as {kind} says): too few to work in" in (
        words
    )
    n = needed(words)
    assert knob.format(n=n) in words, words
    assert "context_tokens" not in words, "the persona's setting can't give it more"
    # The number is what a chat really sends, measured as the engine measures it: the
    # persona's system text and its tools' schemas, the answer's reserve, room to work.
    system_text, tools = chat_sends(model_agent)
    sends = request_tokens(system_text, function_specs(tools))
    assert f"about {sends} tokens before the conversation" in words
    assert f"and {len(tools)} tool schemas" in words and len(tools) > 10
    config = oc.ModelConfig.of(model_agent)
    assert not too_small_to_work_in(config.fitted(n), sends), "the number given is enough"
    assert too_small_to_work_in(config.fitted(n - 1024), sends), "and not far more"


def test_a_context_that_holds_the_requests_but_leaves_no_room_to_work_is_too_small(model_agent):
    # Ollama's smallest default today, 4096: what every request sends and the answer's
    # reserve fit, but a reply of a few file reads would not.
    with Replay(stream(ANSWER), pages=OLLAMA[0]) as replay:
        use_model(model_agent, replay.base_url, model=OLLAMA[1])
        words = model_test(model_agent).too_small
    system_text, tools = chat_sends(model_agent)
    left = 4096 - request_tokens(system_text, function_specs(tools)) - 512
    assert 0 < left < ROOM_TO_WORK
    assert "“llava” has 4096 tokens of context (as Ollama says): too few to work in" in words
    assert f"which leaves {left} for the person's message" in words, words
    assert f"OLLAMA_CONTEXT_LENGTH={needed(words)} ollama serve" in words


def test_a_context_with_room_to_work_passes_test_connection_without_a_word(model_agent):
    models = page("vllm-models.json")
    models["data"][0]["max_model_len"] = 32_768
    with Replay(stream(ANSWER), pages={"/v1/models": models}) as replay:
        use_model(model_agent, replay.base_url, model=VLLM[1])
        result = model_test(model_agent)
    assert result.ok and result.too_small == "", result.too_small


@pytest.mark.parametrize("server", list(KNOBS))
def test_a_chats_first_message_in_too_small_a_context_gives_the_same_true_advice(
    model_agent, server
):
    (pages, model), kind, knob = KNOBS[server]
    with Replay(stream(ANSWER), pages=pages) as replay:
        use_model(model_agent, replay.base_url, model=model)
        tested = needed(model_test(model_agent).too_small)
        chat = ChatFactory(agent=model_agent, title="Fix the README")
        turn = run(chat)

    assert turn.state == TurnState.FAILED
    reason = turn.end_reason
    assert reason.startswith("This reply no longer fits the model's context: it needs about ")
    assert f"has {TWO_K} (as {kind} says)" in reason, reason
    assert needed(reason) == tested, "the chat asks for what Test connection asked for"
    assert knob.format(n=tested) in reason, reason
    assert "context_tokens" not in reason and "fresh chat" not in reason, reason
    assert len(replay.completions) == 1, "only Test connection's request was sent"


def test_one_reply_too_long_for_a_context_with_room_is_told_a_fresh_chat_or_more(model_agent):
    models = page("vllm-models.json")
    models["data"][0]["max_model_len"] = 16_384
    with Replay(pages={"/v1/models": models}) as replay:
        use_model(model_agent, replay.base_url, model=VLLM[1])
        chat = ChatFactory(agent=model_agent, title="Fix the README")
        turn = run(chat, text=("word " * 20_000).strip())
    reason = turn.end_reason
    assert turn.state == TurnState.FAILED
    assert "has 16384 (as vLLM says). Start a fresh chat and ask for less in one message" in (
        reason
    )
    need = int(re.search(r"needs about (\d+) tokens", reason).group(1))
    n = needed(reason)
    assert n > need > 16_384, "this reply's own size, beside the answer's reserve"
    assert f"restart vLLM with --max-model-len {n} " in reason
    assert replay.completions == []


def test_a_persona_holding_the_model_below_its_server_is_told_to_raise_its_setting(
    model_agent,
):
    big = {**page("ollama-api-show.json")}
    big["parameters"] += "\nnum_ctx                        32768"
    with Replay(stream(ANSWER), pages={"/api/show": big}) as replay:
        use_model(model_agent, replay.base_url, model="llava", context_tokens=TWO_K)
        words = model_test(model_agent).too_small
    assert f"has {TWO_K} tokens of context (context_tokens): too few" in words, words
    n = needed(words)
    assert f"Raise context_tokens to {n} in the persona's engine settings" in words
    assert TWO_K < n <= 32_768
    assert "OLLAMA_CONTEXT_LENGTH" not in words, "the server gives enough already"


def test_a_server_that_says_nothing_is_not_blamed(model_agent, fake):
    use_model(model_agent, fake.base_url, context_tokens=TWO_K)
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)
    assert turn.state == TurnState.FAILED
    assert f"has {TWO_K} (context_tokens)" in turn.end_reason
    assert "Its server doesn't say how much context the model has" in turn.end_reason
    assert f"If the model really has {needed(turn.end_reason)} tokens or more" in (turn.end_reason)


def test_each_server_says_which_kind_it_is():
    for (pages, model, size), said in [
        (VLLM, ServerContext(size=2048, kind="vLLM")),
        (LLAMACPP, ServerContext(size=1024, kind="llama.cpp", slots=1)),
        (OLLAMA_LOADED, ServerContext(size=2048, kind="Ollama")),
        (OLLAMA_NUM_CTX, ServerContext(size=3072, kind="Ollama", own_setting=True)),
    ]:
        with Replay(pages=pages) as replay:
            config = oc.ModelConfig(base_url=replay.base_url, model=model)
            assert server_said(config, "") == said
            assert oc.server_context(config, "") == size


def test_test_connection_asks_the_server_afresh_once_the_model_is_loaded(model_agent):
    # Before Test connection's request, Ollama hasn't loaded the model: its default is a
    # guess. After it, /api/ps says what the model really has.
    with Replay(stream(ANSWER), pages={"/api/show": page("ollama-api-show.json")}) as replay:
        use_model(model_agent, replay.base_url, model="mistral:latest")
        config = oc.ModelConfig.of(model_agent)
        assert server_said(config, "") == ServerContext(4096, "Ollama")  # kept for a while
        replay.pages["/api/ps"] = page("ollama-api-ps.json")  # the request loaded it
        words = model_test(model_agent).too_small
    assert "has 2048 tokens of context (as Ollama says)" in words, words
    assert ROOM_TO_WORK >= 4000
