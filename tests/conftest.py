"""The personas every test may ask for: the owner, a second owner, an outsider on a chat app.

Records are made with the factories in tests/factories.py.
"""

from __future__ import annotations

import os

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


@pytest.fixture
def broken_bwrap(tmp_path, settings):
    """A bwrap that never works, as in a container that forbids its namespaces."""
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    settings.CONCH_SANDBOX_BWRAP = str(fake)
    return fake


@pytest.fixture
def outside_site(settings):
    """Pages served on loopback for one test (``site.page(path, body)``), which fetch_page
    may read here: the outside a chat reads, for the tests of what reading it does."""
    from tests.chats.test_fetch_page import Site

    settings.CONCH_FETCH_ALLOW_PRIVATE = True
    served = Site()
    served.thread.start()
    yield served
    served.release.set()
    served.server.shutdown()
    served.server.server_close()


@pytest.fixture(scope="session")
def django_db_modify_db_settings_xdist_suffix(request):
    """Each pytest-xdist worker its own test database, as pytest-django gives it, but
    knowing that ``conch.sqlite3`` is SQLite too.

    pytest-django suffixes the test database's name with the worker's id, and leaves
    SQLite's alone only for the ``django.db.backends.sqlite3`` engine it knows: for
    ours it would make up a file name, ``test_/tmp/…/conch.sqlite3_gw0``, in a folder
    that doesn't exist. Conch's SQLite test database is in memory, which is each
    process's own, or a file in this process's own home (the browser tests'), so it
    needs no suffix; any other database (PostgreSQL) gets pytest-django's.
    """
    from django.conf import settings

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    for database in settings.DATABASES.values():
        if database["ENGINE"] == "conch.sqlite3":
            continue
        test = database.setdefault("TEST", {})
        test["NAME"] = f"{test.get('NAME') or 'test_' + str(database['NAME'])}_{worker}"
