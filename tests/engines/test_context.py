"""The model's real context size, read from its server, and never budgeted past.

Each server's answer is a published shape (tests/engines/recordings/SOURCES.md).
"""

from __future__ import annotations

import json

import pytest

from chats.engines import openai_compat as oc
from chats.models import TurnState
from tests.engines.conftest import use_model
from tests.engines.replay import RECORDINGS, Replay
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
    ("pages", "model", "size"), [VLLM, LLAMACPP, OLLAMA], ids=["vllm", "llamacpp", "ollama"]
)
def test_a_reply_is_never_budgeted_past_the_servers_context(model_agent, pages, model, size):
    # The persona says 32768; the server runs the model with less: the server wins.
    with Replay(pages=pages) as replay:
        use_model(model_agent, replay.base_url, model=model, context_tokens=32_768)
        chat = ChatFactory(agent=model_agent, title="Fix the README")
        turn = run(chat, text=("word " * (size * 4 // 5 + 400)).strip())
    assert turn.state == TurnState.FAILED
    assert f"has {size} (context_tokens)" in turn.end_reason, turn.end_reason
    assert not [r for r in replay.requests if r["path"].endswith("/chat/completions")]


def test_a_smaller_setting_than_the_servers_is_kept():
    config = oc.ModelConfig(
        base_url="http://x/v1", model="m", context_tokens=1000, context_set=True
    )
    assert config.fitted(4096).context_tokens == 1000
    unset = oc.ModelConfig(base_url="http://x/v1", model="m")
    assert unset.fitted(4096).context_tokens == 4096
    assert unset.fitted(4096).reserve_tokens == 512
