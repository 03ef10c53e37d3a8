"""The gateway's move to an app of its own loses no row on PostgreSQL either.

A fresh PostgreSQL database is migrated to the last state in which the
gateway's records were the ``chats`` app's, a child ``manage.py shell`` writes
a row of each with the models of that state, and after ``migrate`` another
reads them back through the gateway app (``tests/gateway/moved_rows.py``).
"""

from __future__ import annotations

import json

import pytest

from tests.gateway.moved_rows import BEFORE, EXPECTED
from tests.scaleout.processes import manage_ok

pytestmark = pytest.mark.scaleout

SEED = "from tests.gateway.moved_rows import applied_state_apps, seed; seed(applied_state_apps())"
READ = (
    "import json; from tests.gateway.moved_rows import read; print('RESULT ' + json.dumps(read()))"
)


def test_every_gateway_row_survives_the_move_to_the_gateway_app_on_postgresql(scaleout_empty):
    manage_ok("migrate", *BEFORE, "--noinput", "-v0", env=scaleout_empty.env, timeout=120)
    manage_ok("shell", "-c", SEED, env=scaleout_empty.env, timeout=120)
    manage_ok("migrate", "--noinput", "-v0", env=scaleout_empty.env, timeout=120)
    done = manage_ok("shell", "-c", READ, env=scaleout_empty.env, timeout=120)

    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    assert json.loads(line.removeprefix("RESULT ")) == json.loads(json.dumps(EXPECTED))
