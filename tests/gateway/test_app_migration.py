"""The gateway's move to an app of its own (label ``gateway``) loses no row.

From the last state in which its records were the ``chats`` app's, a row of
each is written with the models of that state; migrating forward, the gateway
app's models read every one back, from tables renamed ``gateway_*``, with the
bot token still opening and a permission given on a binding still held.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.gateway.moved_rows import BEFORE, EXPECTED, applied_state_apps, read, seed


@pytest.mark.django_db(transaction=True)
def test_every_gateway_row_survives_the_move_to_the_gateway_app():
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        MigrationExecutor(connection).migrate([BEFORE])
        assert not any(t.startswith("gateway_") for t in connection.introspection.table_names())
        seed(applied_state_apps())

        MigrationExecutor(connection).migrate(latest)
        found = read()
    finally:
        # Whatever happened, the tests after this one find today's schema.
        MigrationExecutor(connection).migrate(latest)
    assert found == EXPECTED
