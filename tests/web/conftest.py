from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import ChatFactory


@pytest.fixture
def signed_in(owner, agent) -> Client:
    """A browser the owner signed in with."""
    client = Client()
    client.force_login(owner)
    return client


@pytest.fixture
def htmx(owner, agent) -> Client:
    """The owner's browser, asking as htmx does."""
    client = Client(headers={"HX-Request": "true"})
    client.force_login(owner)
    return client


@pytest.fixture
def chat(owner, agent, workspace):
    return ChatFactory(owner=owner, title="Fix the login bug", folder=str(workspace))
