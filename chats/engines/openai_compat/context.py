"""The model's real context size, as its server says it.

- vLLM: ``GET /v1/models``, the model's ``max_model_len``.
- llama.cpp: ``GET /props``, ``default_generation_settings.n_ctx`` (a slot's share).
- Ollama: ``POST /api/show``: the ``num_ctx`` parameter if the model sets one; else
  the context of the loaded model (``GET /api/ps``); else the smallest default Ollama
  starts a model with (4096), never past the model's own ``*.context_length``. Ollama
  silently drops the oldest messages of a request longer than that.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from chats.engines.openai_compat.config import ModelConfig

CONTEXT_KEPT = 300.0  # seconds a server's answer is kept
OLLAMA_DEFAULT_CONTEXT = 4096
_contexts: dict[tuple[str, str], tuple[float, int | None]] = {}
_contexts_lock = threading.Lock()


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _vllm_context(http: Any, config: ModelConfig, root: str) -> int | None:
    models = http.get(f"{config.base_url.rstrip('/')}/models").json().get("data") or []
    for model in models:
        if isinstance(model, dict) and model.get("id") == config.model:
            return _positive(model.get("max_model_len"))
    return None


def _llamacpp_context(http: Any, config: ModelConfig, root: str) -> int | None:
    props = http.get(f"{root}/props").json()
    return _positive((props.get("default_generation_settings") or {}).get("n_ctx"))


def _ollama_context(http: Any, config: ModelConfig, root: str) -> int | None:
    response = http.post(f"{root}/api/show", json={"model": config.model})
    if response.status_code != 200:
        return None
    shown = response.json()
    for line in str(shown.get("parameters") or "").splitlines():
        name, _, value = line.strip().partition(" ")
        if name == "num_ctx" and value.strip().isdigit():
            return _positive(int(value.strip()))
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
                    return loaded
    if trained is None:
        return None
    return min(trained, OLLAMA_DEFAULT_CONTEXT)


def server_context(config: ModelConfig, key: str) -> int | None:
    """The model's context size as its server says it, or None where it doesn't say."""
    import httpx

    cache_key = (config.base_url, config.model)
    with _contexts_lock:
        kept = _contexts.get(cache_key)
    if kept and time.monotonic() - kept[0] < CONTEXT_KEPT:
        return kept[1]
    root = re.sub(r"/v1/?$", "", config.base_url.rstrip("/"))
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    size = None
    from chats.engines.http import http_client

    with http_client(timeout=min(5.0, config.timeout), headers=headers) as http:
        for probe in (_vllm_context, _llamacpp_context, _ollama_context):
            try:
                size = probe(http, config, root)
            except (httpx.HTTPError, ValueError, TypeError, AttributeError):
                size = None
            if size:
                break
    with _contexts_lock:
        _contexts[cache_key] = (time.monotonic(), size)
    return size
