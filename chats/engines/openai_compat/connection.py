"""The admin's and Connect a model's "Test connection": a tiny request, what came of it in
words, and whether what a chat sends leaves the model room to work.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chats.engines.base import EngineError
from chats.engines.openai_compat.config import ROOM_TO_WORK, ModelConfig, api_key_for
from chats.engines.openai_compat.context import (
    more_context,
    server_said,
    too_small_to_work_in,
    whose,
)
from chats.engines.openai_compat.messages import function_specs, request_tokens
from chats.engines.openai_compat.reasons import ERR_TOO_SMALL, short
from chats.engines.openai_compat.retries import complete

if TYPE_CHECKING:
    from chats.models import Agent
    from chats.tools.registry import Tool


CONNECTION_PROMPT = "Reply with the single word: OK"


@dataclass(frozen=True)
class ConnectionResult:
    ok: bool
    message: str
    # When the model answered but its context is too small to work in: why, and what
    # would help, in words ("" when a chat fits). Connect a model saves it only if asked twice.
    too_small: str = ""


def connection_test(
    agent: Agent,
    *,
    key: str | None = None,
    system_text: str | None = None,
    tools: Sequence[Tool] = (),
) -> ConnectionResult:
    """A tiny request with the persona's settings and key; what came of it, in words.

    ``key``, when given, is used instead of the persona's saved one: Connect a model
    tries settings before they are saved (chats/runtime/connect.py). ``system_text`` and
    ``tools`` are what the persona's chats send with every request
    (``chats.runtime.connect.chat_sends``): once the model answered, they are measured
    against the context its server says it has, as a chat's request would be."""
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
    message = f"Connected: “{config.model}” at {config.base_url} answered in {took:.1f} s: {said}."
    if system_text is None:
        return ConnectionResult(True, message)
    # Asked afresh: the request just made has loaded the model, so Ollama says what it has.
    config = config.fitted(server_said(config, key, fresh=True))
    return ConnectionResult(True, message, room_check(config, system_text, tools))


def room_check(config: ModelConfig, system_text: str, tools: Sequence[Tool]) -> str:
    """Why the model's context is too small to work in and what would help, or "" if a chat
    fits: what every request sends, the answer's reserve and ROOM_TO_WORK, as a chat
    measures them."""
    sends = request_tokens(system_text, function_specs(tools))
    if not too_small_to_work_in(config, sends):
        return ""
    return ERR_TOO_SMALL.format(
        model=config.model,
        have=config.context_tokens,
        whose=whose(config),
        sends=sends,
        tools=f"{len(tools)} tool schema{'' if len(tools) == 1 else 's'}",
        reserve=config.reserve_tokens,
        left=max(0, config.context_tokens - sends - config.reserve_tokens),
        room=ROOM_TO_WORK,
        advice=more_context(config, sends + ROOM_TO_WORK),
    )
