"""Engines choose a reply's next action. ``engine_for`` picks a persona's engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chats.engines.base import Engine, EngineError

if TYPE_CHECKING:
    from chats.models import Agent

_engines: dict[str, Engine] = {}


def register_engine(engine: Engine) -> None:
    _engines[engine.name] = engine


def engine_for(agent: Agent) -> Engine:
    # Every Conch plays scripts, even once a model engine registers itself first.
    if "scripted" not in _engines:
        from chats.engines.scripted import ScriptedEngine

        register_engine(ScriptedEngine())
    try:
        return _engines[agent.engine]
    except KeyError:
        raise EngineError(
            f"The persona {agent.slug!r} uses an engine Conch doesn't have: {agent.engine!r}."
        ) from None
