"""Fixtures for the scale-out tests: the machine's real PostgreSQL and Redis.

When they can't be reached the tests fail under CI (``CI=true``) or when
asked for (``CONCH_SCALEOUT_TESTS=1``), and are skipped, with the reason,
on a laptop that runs neither.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import redis
from psycopg import sql

from tests.once import made_once, shared_folder
from tests.scaleout.postgres import POSTGRES_ADMIN_URL, database_drop
from tests.scaleout.processes import manage_ok, process_env

REDIS_URL = "redis://127.0.0.1:6379/0"


def redis_layer_made(prefix: str):
    """The channel layer conch/settings.py sets up for REDIS_URL, made as Channels makes it."""
    from django.utils.module_loading import import_string

    from conch.settings import redis_channel_layer

    config = redis_channel_layer(REDIS_URL, prefix=prefix)
    return import_string(config["BACKEND"])(**config["CONFIG"])


def scaleout_required() -> bool:
    return os.environ.get("CI", "").lower() == "true" or os.environ.get(
        "CONCH_SCALEOUT_TESTS", ""
    ) in ("1", "true", "yes")


def _unreachable() -> str | None:
    try:
        with psycopg.connect(POSTGRES_ADMIN_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {POSTGRES_ADMIN_URL} is unreachable: {exc}"
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3, socket_timeout=3)
    try:
        client.ping()
    except redis.RedisError as exc:
        return f"Redis at {REDIS_URL} is unreachable: {exc}"
    finally:
        client.close()
    return None


@pytest.fixture(scope="session")
def scaleout_services() -> None:
    problem = _unreachable()
    if problem is None:
        return
    if scaleout_required():
        pytest.fail(f"{problem} (the scale-out tests must run here)")
    pytest.skip(f"{problem}; set CONCH_SCALEOUT_TESTS=1 to make this a failure")


@dataclass
class Scaleout:
    """One test's own PostgreSQL database and Redis prefix, and the env for a child Conch."""

    database: str
    database_url: str
    channel_prefix: str
    env: dict[str, str]

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.database_url, autocommit=True, connect_timeout=5)


def _database_url(name: str) -> str:
    return f"postgres://postgres@127.0.0.1:5432/{name}"


def _create_database(name: str, template: str | None = None) -> None:
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(statement)


def _drop_database(name: str) -> None:
    database_drop(name)


def shared_template_name() -> str:
    """The PostgreSQL template this run's pytest-xdist workers share: its name carries the
    run's token (``tests/envplugin.py``), whose controller drops it when the run ends."""
    return f"conch_template_{os.environ['CONCH_TEST_RUN']}"


def template_migrate(name: str, home: Path) -> None:
    _create_database(name)
    env = process_env(home, DATABASE_URL=_database_url(name))
    manage_ok("migrate", "--noinput", "-v0", env=env, timeout=180)


@pytest.fixture(scope="session")
def migrated_template(scaleout_services, tmp_path_factory) -> Iterator[str]:
    """A PostgreSQL database migrated once, which each test's database copies: ``CREATE
    DATABASE … TEMPLATE`` takes a fraction of a second, a child's ``migrate`` several.

    Under pytest-xdist the workers share one (``made_once``); in one process the
    fixture makes its own and drops it itself.
    """
    if shared_folder(tmp_path_factory) is not None:
        name = shared_template_name()

        def make(home: Path) -> Path:
            _drop_database(name)  # what a failed make left
            template_migrate(name, home)
            return home

        made_once(tmp_path_factory, "postgres-template", make)
        yield name
        return
    name = f"conch_template_{uuid.uuid4().hex[:10]}"
    try:
        template_migrate(name, tmp_path_factory.mktemp("template-home"))
        yield name
    finally:
        _drop_database(name)


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory) -> Path:
    """Conch's SQLite file migrated once for the whole run (``made_once``); ``sqlite_home``
    copies it."""

    def make(home: Path) -> Path:
        manage_ok("migrate", "--noinput", "-v0", env=process_env(home), timeout=180)
        database = home / "conch.sqlite3"
        with contextlib.closing(sqlite3.connect(database)) as connection:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all of it in the one file
        return database

    return made_once(tmp_path_factory, "sqlite-template", make)


@pytest.fixture
def sqlite_home(migrated_sqlite, tmp_path) -> Path:
    """A CONCH_HOME whose SQLite database is migrated already, for a child Conch."""
    home = tmp_path / "sqlite-home"
    home.mkdir(mode=0o700)
    shutil.copy2(migrated_sqlite, home / "conch.sqlite3")
    return home


def _scaleout(tmp_path: Path, template: str | None) -> Iterator[Scaleout]:
    token = uuid.uuid4().hex[:10]
    name = f"conch_scaleout_{token}"
    prefix = f"conch-scaleout-{token}"
    database_url = _database_url(name)
    _create_database(name, template)
    home = tmp_path / "conch-home"
    home.mkdir()
    env = process_env(
        home,
        DATABASE_URL=database_url,
        REDIS_URL=REDIS_URL,
        CONCH_CHANNEL_PREFIX=prefix,
    )
    try:
        yield Scaleout(name, database_url, prefix, env)
    finally:
        _drop_database(name)
        client = redis.Redis.from_url(REDIS_URL)
        try:
            keys = list(client.scan_iter(match=f"{prefix}*"))
            if keys:
                client.delete(*keys)
        finally:
            client.close()


@pytest.fixture
def scaleout(scaleout_services, migrated_template, tmp_path) -> Iterator[Scaleout]:
    """A fresh PostgreSQL database, migrated (a copy of ``migrated_template``) and dropped
    afterwards, and a unique Redis prefix."""
    yield from _scaleout(tmp_path, migrated_template)


@pytest.fixture
def scaleout_empty(scaleout_services, tmp_path) -> Iterator[Scaleout]:
    """As ``scaleout``, with an empty database: for the tests of migrating itself."""
    yield from _scaleout(tmp_path, None)
