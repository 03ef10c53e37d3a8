"""The lanes' room, counted by one process at a time.

The subagent lane (``CONCH_SUBAGENT_LANE``: tasks running at once) and the cron lane
(``CONCH_CRON_LANE``: scheduled replies claimed at once) are counts across every
server and worker. Room is "the lane's size less what runs", and two processes that
count at once, before either commits, each see the same room and fill it twice.
:func:`lane_lock` makes them count in turn.

On PostgreSQL it is a transaction-scoped advisory lock, one per lane: the next
counter waits until the one before commits, and then sees what it started. On SQLite
(IMMEDIATE transactions) every writing transaction already holds the database's one
write lock from its start, so there is nothing more to take.
"""

from __future__ import annotations

import zlib

from django.db import connection


def lane_lock(lane: str) -> None:
    """Hold ``lane``'s lock until this transaction ends. Call inside ``atomic()``, before
    counting what runs in the lane."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [LOCK_SPACE, _key(lane)])


# The first half of each lane's advisory lock key: Conch's lanes, apart from any other
# advisory lock on the same database. (crc32 of "conch.lanes", as a signed int4.)
LOCK_SPACE = zlib.crc32(b"conch.lanes") - 2**31


def _key(lane: str) -> int:
    return zlib.crc32(lane.encode()) - 2**31
