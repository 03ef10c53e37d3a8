"""The full-text index over the chats' transcripts, for ``search_chats`` (``together.past``).

Only the person's and the assistant's messages are indexed; whether their
reply has ended is asked at query time, since a running reply's words must
never be found.

- **SQLite** (the embedded default): an FTS5 table, ``together_entry_fts``,
  with ``chats_entry`` as its external content (the words are stored once),
  kept in step by triggers on ``chats_entry``. The porter stemmer, so
  "deploying" finds "deploy", as PostgreSQL's English configuration does.
- **PostgreSQL** (scale-out): a partial GIN expression index on
  ``to_tsvector('english', text)``. Queries must use the very same
  expression (:data:`PG_VECTOR`) for the planner to use it.

Django remakes a SQLite table to alter one of its columns, and the triggers
go with the old table. :func:`ensure_sqlite_triggers` runs after every
``migrate`` and puts them back, rebuilding the index if any was missing, so
a later ``chats`` migration can't silently stop the search from seeing new
words.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

FTS_TABLE = "together_entry_fts"
PG_INDEX = "together_entry_fts"
PG_CONFIG = "english"
PG_VECTOR = f"to_tsvector('{PG_CONFIG}'::regconfig, e.text)"
# Which entries are words of a chat: the person's and the assistant's messages.
INDEXED = "{row}.role IN ('person', 'assistant') AND {row}.kind = 'message'"

_TRIGGERS = {
    f"{FTS_TABLE}_ai": f"""
CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_ai AFTER INSERT ON chats_entry BEGIN
  INSERT INTO {FTS_TABLE}(rowid, text) SELECT new.id, new.text WHERE {INDEXED.format(row="new")};
END""",
    f"{FTS_TABLE}_ad": f"""
CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_ad AFTER DELETE ON chats_entry BEGIN
  INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text)
    SELECT 'delete', old.id, old.text WHERE {INDEXED.format(row="old")};
END""",
    f"{FTS_TABLE}_au": f"""
CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_au AFTER UPDATE ON chats_entry BEGIN
  INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text)
    SELECT 'delete', old.id, old.text WHERE {INDEXED.format(row="old")};
  INSERT INTO {FTS_TABLE}(rowid, text) SELECT new.id, new.text WHERE {INDEXED.format(row="new")};
END""",
}

# External content must be filled with exactly what the triggers would have
# written ('rebuild' would index every entry, and then a 'delete' of a note
# that was never meant to be there would corrupt the index).
_SQLITE_FILL = [
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('delete-all')",
    f"INSERT INTO {FTS_TABLE}(rowid, text) SELECT id, text FROM chats_entry e WHERE {INDEXED.format(row='e')}",
]

SQLITE_INSTALL = [
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5("
    "text, content='chats_entry', content_rowid='id', "
    "tokenize='porter unicode61 remove_diacritics 2')",
    *_TRIGGERS.values(),
    *_SQLITE_FILL,
]
SQLITE_REMOVE = [
    *(f"DROP TRIGGER IF EXISTS {name}" for name in _TRIGGERS),
    f"DROP TABLE IF EXISTS {FTS_TABLE}",
]
POSTGRES_INSTALL = [
    f"CREATE INDEX IF NOT EXISTS {PG_INDEX} ON chats_entry "
    f"USING GIN ((to_tsvector('{PG_CONFIG}'::regconfig, text))) WHERE {INDEXED.format(row='chats_entry')}",
]
POSTGRES_REMOVE = [f"DROP INDEX IF EXISTS {PG_INDEX}"]


def ensure_sqlite_triggers(connection) -> list[str]:
    """Put back any of the index's triggers that a remade ``chats_entry`` lost. Returns their names."""
    if connection.vendor != "sqlite":
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger') AND name IN (%s, %s, %s, %s)",
            [FTS_TABLE, *_TRIGGERS],
        )
        present = {row[0] for row in cursor.fetchall()}
        if FTS_TABLE not in present:
            return []  # not migrated this far yet: the migration makes it all
        missing = [name for name in _TRIGGERS if name not in present]
        if not missing:
            return []
        log.warning("the search index lost its triggers %s; putting them back", ", ".join(missing))
        for name in missing:
            cursor.execute(_TRIGGERS[name])
        for statement in _SQLITE_FILL:
            cursor.execute(statement)
    return missing


def on_post_migrate(sender, using="default", **kwargs) -> None:
    from django.db import connections

    ensure_sqlite_triggers(connections[using])
