"""Django's SQLite backend, with the database file made the owner's alone before SQLite
opens it, and this process's writers of it queued one at a time.

SQLite makes a new database file with mode 0644 (less the umask), and its
``-wal`` and ``-shm`` files with the database file's mode. Making the empty
file 0600 first keeps all three unreadable by the machine's other users from
the start, whatever the umask.

A transaction that takes the write lock at BEGIN (IMMEDIATE, as Conch's settings ask),
and a write outside any transaction, first wait for their turn among this process's
writers (:mod:`conch.sqlite3.writers`), not in SQLite's busy handler.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from django.db.backends.sqlite3 import base

from conch.sqlite3.writers import WriterQueue, writer_queue

# Statements that write, run outside a transaction: each takes the write lock on its own.
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


def make_private_file(name: str | os.PathLike) -> None:
    """Create ``name`` empty with mode 0600 if it does not exist yet."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    os.close(fd)


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        name = str(conn_params["database"])
        # A "file:" URI is the test's in-memory database; "" and ":memory:" have no file.
        if name not in ("", ":memory:") and not name.startswith("file:"):
            make_private_file(name)
        return super().get_new_connection(conn_params)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Held from BEGIN to COMMIT or ROLLBACK, or to the end of the commit's hooks.
        self._writer_turn: WriterQueue | None = None
        self._writer_hooks = False  # running a commit's hooks, in its turn
        # Run in the transaction, just before its COMMIT, in its writer's turn: what must be
        # written with the change and after everything else it writes (its events' numbers).
        self.before_commit: list[Callable[[], object]] = []
        self.execute_wrappers.append(_queued_write)

    def _writers_wait(self) -> None:
        """Wait for this connection's turn to write. Given up after SQLite's own timeout, the
        write goes on to SQLite's busy handler, as it did before there was a queue."""
        queue = writer_queue(str(self.settings_dict["NAME"]))
        if queue.acquire(timeout=self.settings_dict["OPTIONS"].get("timeout", 5.0)):
            self._writer_turn = queue

    def _writers_done(self) -> None:
        queue, self._writer_turn = self._writer_turn, None
        if queue is not None:
            queue.release()

    # Django's private hooks for BEGIN, COMMIT, ROLLBACK and closing, which django-stubs
    # does not declare: hence the ignores.

    def _start_transaction_under_autocommit(self):
        if self.transaction_mode not in ("IMMEDIATE", "EXCLUSIVE"):  # type: ignore[attr-defined]
            return super()._start_transaction_under_autocommit()  # type: ignore[misc]
        if self._writer_turn is None:  # else it is a commit's hook, in its writer's turn
            self._writers_wait()
        try:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]
        except BaseException:
            self._writers_done()
            raise

    def _commit(self):
        try:
            while self.before_commit:
                self.before_commit.pop(0)()
            return super()._commit()  # type: ignore[misc]
        finally:
            # A commit's hooks run in its turn (run_and_clear_commit_hooks lets go): what a
            # transaction writes once it commits (its events' numbers) waits behind no one,
            # and a hook's own transaction neither waits for the turn nor lets it go.
            if not self.run_on_commit and not self._writer_hooks:
                self._writers_done()

    def run_and_clear_commit_hooks(self):
        if self._writer_hooks:  # a hook's transaction's hooks: the outer ones let go
            return super().run_and_clear_commit_hooks()
        self._writer_hooks = True
        try:
            super().run_and_clear_commit_hooks()
        finally:
            self._writer_hooks = False
            self._writers_done()

    def _rollback(self):
        self.before_commit.clear()
        try:
            return super()._rollback()  # type: ignore[misc]
        finally:
            if not self._writer_hooks:
                self._writers_done()

    def _close(self):
        self.before_commit.clear()
        try:
            return super()._close()  # type: ignore[misc]
        finally:
            self._writers_done()


def _queued_write(execute, sql, params, many, context):
    """A write outside any transaction waits for its turn too, else it would meet the
    queued transactions in SQLite's busy handler and wait there."""
    connection = context["connection"]
    if (
        connection.in_atomic_block
        or connection._writer_turn is not None
        or not sql.lstrip()[:7].upper().startswith(WRITES)
    ):
        return execute(sql, params, many, context)
    connection._writers_wait()
    try:
        return execute(sql, params, many, context)
    finally:
        connection._writers_done()
