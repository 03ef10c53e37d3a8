"""Fixtures for the scale-out tests: the machine's real PostgreSQL and Redis.

When they can't be reached the tests fail under CI (``CI=true``) or when
asked for (``CONCH_SCALEOUT_TESTS=1``), and are skipped, with the reason,
on a laptop that runs neither.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import psycopg
import pytest
import redis
from psycopg import sql

from tests.scaleout.processes import process_env

POSTGRES_ADMIN_URL = "postgres://postgres@127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/0"


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


@pytest.fixture
def scaleout(scaleout_services, tmp_path) -> Scaleout:
    """A fresh, empty PostgreSQL database (dropped afterwards) and a unique Redis prefix."""
    token = uuid.uuid4().hex[:10]
    name = f"conch_scaleout_{token}"
    prefix = f"conch-scaleout-{token}"
    database_url = f"postgres://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
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
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
        client = redis.Redis.from_url(REDIS_URL)
        try:
            keys = list(client.scan_iter(match=f"{prefix}*"))
            if keys:
                client.delete(*keys)
        finally:
            client.close()
