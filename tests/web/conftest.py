from __future__ import annotations

import pytest
from django.test import Client

from chats.runtime.chats import conversation_create


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
    return conversation_create(owner=owner, title="Fix the login bug", folder=str(workspace))
