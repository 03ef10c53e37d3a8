"""Dropping a database the scale-out tests made, from a process that may have no PostgreSQL."""

from __future__ import annotations

import psycopg
from psycopg import sql

POSTGRES_ADMIN_URL = "postgres://postgres@127.0.0.1:5432/test"


def database_drop(name: str, *, connect_timeout: int = 30) -> None:
    with psycopg.connect(
        POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=connect_timeout
    ) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def database_drop_if_reachable(name: str) -> None:
    """``database_drop``, where no PostgreSQL to reach means nothing was made to drop."""
    try:
        database_drop(name, connect_timeout=3)
    except psycopg.OperationalError:
        return
