"""conch.rows on the real PostgreSQL: its converters and its RETURNING are not SQLite's.

A child ``manage.py shell`` runs tests/conch/test_rows.py's tests, which make their own
rows and take no fixture, against a fresh PostgreSQL database.
"""

from __future__ import annotations

import pytest

from tests.scaleout.processes import manage_ok

pytestmark = pytest.mark.scaleout

SCRIPT = r"""
from django.db import connection

from tests.conch import test_rows

assert connection.vendor == "postgresql", connection.vendor
ran = []
for name in sorted(vars(test_rows)):
    if name.startswith("test_"):
        getattr(test_rows, name)()
        ran.append(name)
print("RAN", len(ran))
"""


def test_rows_read_written_and_changed_by_conch_rows_are_the_orms_on_postgresql(scaleout):
    done = manage_ok("shell", "-c", SCRIPT, env=scaleout.env, timeout=120)
    assert "RAN 8" in done.stdout, done.stdout + done.stderr
