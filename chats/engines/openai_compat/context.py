"""The model's real context size, as its server says it, and what would give it more.

- vLLM: ``GET /v1/models``, the model's ``max_model_len``.
- llama.cpp: ``GET /props``, ``default_generation_settings.n_ctx`` (a slot's share).
- Ollama: ``POST /api/show``: the ``num_ctx`` parameter if the model sets one; else
  the context of the loaded model (``GET /api/ps``); else the smallest default Ollama
  starts a model with (4096), never past the model's own ``*.context_length``. Ollama
  silently drops the oldest messages of a request longer than that.

Each answer says which kind of server gave it (:class:`ServerContext`), so that what
would give the model more context names that server's own setting.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from chats.engines.openai_compat.config import (
    LLAMACPP,
    OLLAMA,
    ROOM_TO_WORK,
    VLLM,
    ModelConfig,
    ServerContext,
)
from chats.engines.openai_compat.reasons import (
    ERR_OVERFLOW,
    MORE_CONTEXT_LLAMACPP,
    MORE_CONTEXT_LLAMACPP_SLOTS,
    MORE_CONTEXT_OLLAMA,
    MORE_CONTEXT_OLLAMA_OWN,
    MORE_CONTEXT_SETTING,
    MORE_CONTEXT_UNSAID,
    MORE_CONTEXT_VLLM,
    OVERFLOW_FRESH_CHAT,
    SAID_BY_SERVER,
    SAID_BY_SETTING,
)

CONTEXT_KEPT = 300.0  # seconds a server's answer is kept
# The context Ollama gives a model that sets no num_ctx, before it is loaded: 2048 before
# Ollama 0.6.7, 4096 from it (the default of ``OLLAMA_CONTEXT_LENGTH`` in its envconfig);
# from 0.15.5 it is chosen by the GPU's memory, 4096 the smallest (Ollama's docs, "Context
# length"). Once the model is loaded, ``/api/ps`` says what it really has, and Test
# connection asks then.
OLLAMA_DEFAULT_CONTEXT = 4096
_contexts: dict[tuple[str, str], tuple[float, ServerContext | None]] = {}
_contexts_lock = threading.Lock()


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _said(size: int | None, kind: str, **more: Any) -> ServerContext | None:
    return ServerContext(size, kind, **more) if size else None


def _vllm_context(http: Any, config: ModelConfig, root: str) -> ServerContext | None:
    models = http.get(f"{config.base_url.rstrip('/')}/models").json().get("data") or []
    for model in models:
        if isinstance(model, dict) and model.get("id") == config.model:
            return _said(_positive(model.get("max_model_len")), VLLM)
    return None


def _llamacpp_context(http: Any, config: ModelConfig, root: str) -> ServerContext | None:
    props = http.get(f"{root}/props").json()
    size = _positive((props.get("default_generation_settings") or {}).get("n_ctx"))
    return _said(size, LLAMACPP, slots=_positive(props.get("total_slots")) or 1)


def _ollama_context(http: Any, config: ModelConfig, root: str) -> ServerContext | None:
    response = http.post(f"{root}/api/show", json={"model": config.model})
    if response.status_code != 200:
        return None
    shown = response.json()
    for line in str(shown.get("parameters") or "").splitlines():
        name, _, value = line.strip().partition(" ")
        if name == "num_ctx" and value.strip().isdigit():
            return _said(_positive(int(value.strip())), OLLAMA, own_setting=True)
    trained = next(
        (
            _positive(v)
            for k, v in (shown.get("model_info") or {}).items()
            if k.endswith(".context_length")
        ),
        None,
    )
    running = http.get(f"{root}/api/ps")
    if running.status_code == 200:
        for model in running.json().get("models") or []:
            if config.model in (model.get("name"), model.get("model")):
                loaded = _positive(model.get("context_length"))
                if loaded:
                    return ServerContext(loaded, OLLAMA)
    if trained is None:
        return None
    return ServerContext(min(trained, OLLAMA_DEFAULT_CONTEXT), OLLAMA)


def server_said(config: ModelConfig, key: str, *, fresh: bool = False) -> ServerContext | None:
    """The model's context size and the kind of server that says it, or None where none does.

    An answer is kept for CONTEXT_KEPT seconds; ``fresh`` asks again (Test connection
    asks once its request has loaded the model, when Ollama says what it really has)."""
    import httpx

    cache_key = (config.base_url, config.model)
    with _contexts_lock:
        kept = _contexts.get(cache_key)
    if kept and not fresh and time.monotonic() - kept[0] < CONTEXT_KEPT:
        return kept[1]
    root = re.sub(r"/v1/?$", "", config.base_url.rstrip("/"))
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    said = None
    from chats.engines.http import http_client

    with http_client(timeout=min(5.0, config.timeout), headers=headers) as http:
        for probe in (_vllm_context, _llamacpp_context, _ollama_context):
            try:
                said = probe(http, config, root)
            except (httpx.HTTPError, ValueError, TypeError, AttributeError):
                said = None
            if said:
                break
    with _contexts_lock:
        _contexts[cache_key] = (time.monotonic(), said)
    return said


def server_context(config: ModelConfig, key: str) -> int | None:
    """The model's context size as its server says it, or None where it doesn't say."""
    said = server_said(config, key)
    return said.size if said else None


def whose(config: ModelConfig) -> str:
    """Who says the model has ``config.context_tokens``: its server, or the setting."""
    said = config.server
    if said and said.kind and config.context_tokens == said.size:
        return SAID_BY_SERVER.format(kind=said.kind)
    return SAID_BY_SETTING


def more_context(config: ModelConfig, tokens: int) -> str:
    """What would give the model room for ``tokens`` beside the answer's reserve, in words
    that name the setting of the server that said its size, with the number to give it."""
    n = config.context_for(tokens)
    said = config.server
    if said is None or not said.kind:
        return MORE_CONTEXT_UNSAID.format(have=config.context_tokens, n=n)
    if config.context_set and config.context_tokens < said.size:
        # The persona's own setting holds it below what the server gives.
        raise_setting = MORE_CONTEXT_SETTING.format(n=n, have=config.context_tokens)
        if said.size >= n:
            return raise_setting
    else:
        raise_setting = ""
    if said.kind == OLLAMA:
        words = (MORE_CONTEXT_OLLAMA_OWN if said.own_setting else MORE_CONTEXT_OLLAMA).format(
            n=n, model=config.model
        )
    elif said.kind == LLAMACPP:
        words = MORE_CONTEXT_LLAMACPP.format(n=n)
        if said.slots > 1:
            words += MORE_CONTEXT_LLAMACPP_SLOTS.format(slots=said.slots, total=n * said.slots)
    else:
        words = MORE_CONTEXT_VLLM.format(n=n)
    return " ".join(part for part in (words, raise_setting) if part)


def too_small_to_work_in(config: ModelConfig, sends: int) -> bool:
    """Whether a context leaves less than ROOM_TO_WORK beside what every request ``sends``
    and the answer's reserve."""
    return sends + config.reserve_tokens + ROOM_TO_WORK > config.context_tokens


def overflow_reason(config: ModelConfig, need: int, sends: int) -> str:
    """Why a reply that needs about ``need`` tokens (what every request ``sends`` and the
    answer's reserve among them) can't be sent, and what would give it room: at least what
    Test connection asks for, more if this reply alone is bigger."""
    tokens = max(need - config.reserve_tokens, sends + ROOM_TO_WORK)
    fresh = "" if too_small_to_work_in(config, sends) else OVERFLOW_FRESH_CHAT
    return ERR_OVERFLOW.format(
        need=need,
        have=config.context_tokens,
        model=config.model,
        whose=whose(config),
        advice=fresh + more_context(config, tokens),
    )
