"""Engines choose a reply's next action. ``engine_for`` picks a persona's engine.

Conch's own engines are made the first time a persona needs one: ``scripted``
(plays a chat's JSON script) and ``openai`` (any OpenAI-compatible endpoint,
:mod:`chats.engines.openai_compat`). The ``openai`` engine also writes the
recaps for its personas (:mod:`chats.summarize`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from chats.engines.base import Engine, EngineError
from chats.engines.openai_compat import OpenAICompatEngine, summarizer_factory
from chats.engines.scripted import ScriptedEngine
from chats.summarize import register_summarizer

if TYPE_CHECKING:
    from chats.models import Agent

_engines: dict[str, Engine] = {}

BUILT_IN: dict[str, Callable[[], Engine]] = {
    "scripted": ScriptedEngine,
    "openai": OpenAICompatEngine,
}


def register_engine(engine: Engine) -> None:
    _engines[engine.name] = engine


def engine_names() -> list[str]:
    return sorted({*BUILT_IN, *_engines})


def engine_for(agent: Agent) -> Engine:
    # A built-in engine is made when a persona first needs it; one registered by name wins.
    if agent.engine not in _engines and agent.engine in BUILT_IN:
        register_engine(BUILT_IN[agent.engine]())
    try:
        return _engines[agent.engine]
    except KeyError:
        raise EngineError(
            f"The persona {agent.slug!r} uses an engine Conch doesn't have: {agent.engine!r}."
        ) from None


register_summarizer("openai", summarizer_factory)
