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


def preload() -> None:
    """Import what a reply needs and the other commands don't: the model SDK (``openai``,
    some 80,000 objects and most of a second), which the ``openai`` engine imports only
    when it first talks to a model, so that ``manage.py``'s quick commands start quickly.

    A server or worker calls this before :func:`conch.collector.settle`, which freezes
    what start-up made: imported at the first reply instead, the SDK would be walked by
    every full collection after it, a pause of tens of milliseconds that holds the GIL,
    and so every reply's words, in flight.
    """
    import openai  # noqa: F401
    import openai.types.chat  # noqa: F401
    from openai import OpenAI  # noqa: F401


register_summarizer("openai", summarizer_factory)
