from __future__ import annotations

import pytest

from chats.models import Agent
from tests.factories import AgentFactory, UserFactory


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
    return UserFactory(username="owner")


@pytest.fixture
def second_owner(db):
    """Someone else with an account on the same Conch: none of the owner's chats are theirs."""
    return UserFactory(username="second", is_superuser=False, is_staff=False)


@pytest.fixture
def published():
    """Every event this process delivers during the test, in the order delivered."""
    from chats import events

    seen: list = []
    unsubscribe = events.subscribe(seen.append)
    yield seen
    unsubscribe()


@pytest.fixture
def scripted_chat(owner, agent, workspace):
    """Make one of the owner's chats whose assistant plays the given replies."""
    from chats.models import Mode
    from chats.runtime.chats import conversation_create

    def make(*replies, mode=Mode.AUTO, folder=None, title="Scripted"):
        return conversation_create(
            owner=owner,
            title=title,
            folder=str(folder or workspace),
            script=[list(reply) for reply in replies],
            mode=mode,
        )

    return make
