"""Django's SQLite backend, with the database file made the owner's alone before SQLite opens it.

SQLite makes a new database file with mode 0644 (less the umask), and its
``-wal`` and ``-shm`` files with the database file's mode. Making the empty
file 0600 first keeps all three unreadable by the machine's other users from
the start, whatever the umask.
"""

from __future__ import annotations

import os

from django.db.backends.sqlite3 import base


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
