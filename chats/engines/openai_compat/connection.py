"""The admin's and Connect a model's "Test connection": a tiny request, and what came of it
in words.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chats.engines.base import EngineError
from chats.engines.openai_compat.config import ModelConfig, api_key_for
from chats.engines.openai_compat.reasons import short
from chats.engines.openai_compat.retries import complete

if TYPE_CHECKING:
    from chats.models import Agent


CONNECTION_PROMPT = "Reply with the single word: OK"


@dataclass(frozen=True)
class ConnectionResult:
    ok: bool
    message: str


def connection_test(agent: Agent, *, key: str | None = None) -> ConnectionResult:
    """A tiny request with the persona's settings and key; what came of it, in words.

    ``key``, when given, is used instead of the persona's saved one: Connect a model
    tries settings before they are saved (chats/runtime/connect.py)."""
    try:
        config = ModelConfig.of(agent)
        key = api_key_for(agent, config) if key is None else key
        started = time.monotonic()
        answer = complete(
            config,
            key,
            [{"role": "user", "content": CONNECTION_PROMPT}],
            agent=agent.slug,
            max_tokens=16,
            retries=0,
        )
    except EngineError as exc:
        return ConnectionResult(False, str(exc))
    took = time.monotonic() - started
    said = short(answer.text, 60) if answer.text else "nothing in 16 tokens"
    return ConnectionResult(
        True, f"Connected: “{config.model}” at {config.base_url} answered in {took:.1f} s: {said}."
    )
