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
