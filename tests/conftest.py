"""The personas every test may ask for: the owner, a second owner, an outsider on a chat app.

Records are made with the factories in tests/factories.py.
"""

from __future__ import annotations

import pytest

from chats.models import Agent, Conversation
from tests.factories import AgentFactory, ChatFactory, OwnerFactory, UserFactory


@pytest.fixture
def workspace(tmp_path):
    folder = tmp_path / "workspace"
    folder.mkdir()
    return folder


@pytest.fixture
def agent(db, workspace) -> Agent:
    return AgentFactory(slug="main", name="Conch", workspace=str(workspace), is_default=True)


@pytest.fixture
def owner(db):
    """The person who runs this Conch."""
    return OwnerFactory()


@pytest.fixture
def second_owner(db):
    """Someone else with an account on the same Conch: none of the owner's chats are theirs."""
    return UserFactory(username="second", is_superuser=False, is_staff=False)


@pytest.fixture
def outsider(owner, agent) -> Conversation:
    """Someone on a chat app who is not the owner: the owner's Telegram chat their words came into."""
    return ChatFactory(owner=owner, outsider=True, title="A stranger on Telegram")


@pytest.fixture
def published():
    """Every event this process delivers during the test, in the order delivered."""
    from chats import events

    seen: list = []
    unsubscribe = events.subscribe(seen.append)
    yield seen
    unsubscribe()
