"""Fixtures for model engines: a loopback OpenAI-compatible server and a persona that uses it."""

from __future__ import annotations

import pytest

from chats.engines.openai_compat import context, retries
from chats.models import AuthProfile
from tests.engines.fake_openai import FakeOpenAI
from tests.factories import AgentFactory

MAIN_KEY = "sk-main-0123456789abcdefghij"
OTHER_KEY = "sk-other-9876543210zyxwvuts"


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(autouse=True)
def slept(monkeypatch) -> list[float]:
    """The backoff delays the engine asked for; nothing really sleeps."""
    delays: list[float] = []

    def pause(halt, seconds: float) -> bool:
        delays.append(seconds)
        return bool(halt and halt.is_set())

    monkeypatch.setattr(retries, "_pause", pause)
    return delays


@pytest.fixture(autouse=True)
def fresh_contexts():
    context._contexts.clear()
    yield
    context._contexts.clear()


def use_model(agent, base_url: str, *, profile: str = "main-key", secret: str = MAIN_KEY, **config):
    """Point a persona at a model endpoint, its key in its own auth profile."""
    AuthProfile.objects.update_or_create(agent=agent, name=profile, defaults={"secret": secret})
    agent.engine = "openai"
    agent.engine_config = {
        "base_url": base_url,
        "model": "fake-model",
        "auth_profile": profile,
        "retries": 2,
        **config,
    }
    agent.save()
    return agent


@pytest.fixture
def model_agent(agent, fake):
    """A persona on the fake endpoint, "coder"; another, "other", has a key of its own.

    The default persona ("main") stays scripted, for the other chats a test plays.
    """
    other = AgentFactory(slug="other", name="Other", workspace=agent.workspace)
    use_model(other, fake.base_url, profile="other-key", secret=OTHER_KEY)
    coder = AgentFactory(slug="coder", name="Coder", workspace=agent.workspace)
    return use_model(coder, fake.base_url)
