"""What a maintenance run costs as the store grows (issue 17): each batch seeks by an index
rather than reading or sorting the whole table again, so 100,000 sessions take one pass.

``bench/bench_maintenance.py`` times it; here the plans and the statements are pinned.
The PostgreSQL twins are in ``tests/scaleout/test_maintenance_postgres.py``.
"""

from __future__ import annotations

import datetime as dt

from django.db import connection
from django.test.utils import CaptureQueriesContext

from chats.gateway.maintenance import MaintenanceReport, records_prune
from chats.gateway.models import InboundRecord, OutboxMessage, OutboxState
from tests.gateway.test_maintenance import NOW

OLD = NOW - dt.timedelta(days=40)


def _plan(sql: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql)
        return [row[-1] for row in cursor.fetchall()]


def _report() -> MaintenanceReport:
    return MaintenanceReport(
        mode="enforce", dry_run=False, prune_before=NOW - dt.timedelta(days=30), max_entries=500
    )


def _outbox(state: str, created_at: dt.datetime) -> OutboxMessage:
    return OutboxMessage(
        channel="telegram", account_id="bot", target={"chat_id": 1}, text="Done.",
        state=state, created_at=created_at,
    )  # fmt: skip


def test_each_batch_of_old_sent_replies_is_found_by_index_not_by_sorting_them_all(db):
    """The outbox's default ordering (created_at, id) made each batch read every sent reply
    and sort them: 600 sorts of a million rows in the bench. ``outbox_finished`` seeks the
    old finished ones, and the batch asks for no order."""
    OutboxMessage.objects.bulk_create(
        [_outbox(OutboxState.SENT, OLD) for _ in range(5)]
        + [_outbox(OutboxState.FAILED, OLD) for _ in range(2)]
        + [_outbox(OutboxState.SENT, NOW) for _ in range(3)]
        + [_outbox(OutboxState.PENDING, OLD)]
    )
    report = _report()
    with CaptureQueriesContext(connection) as captured:
        records_prune(report=report, batch=3)
    assert report.records_pruned == 7
    assert OutboxMessage.objects.count() == 4
    finds = [q["sql"] for q in captured if q["sql"].startswith('SELECT "gateway_outboxmessage"')]
    assert len(finds) == 4  # three batches of three, two and none
    for sql in finds:
        assert "ORDER BY" not in sql, sql
    plan = _plan(finds[0])
    assert any("INDEX outbox_finished (state=? AND created_at<?)" in step for step in plan), plan
    assert not any("TEMP B-TREE" in step or step.startswith("SCAN") for step in plan), plan


def test_each_batch_of_old_receipts_is_found_by_index(db):
    fields = dict(channel="t", account_id="a", session_key="k", agent_slug="main", rule="r")
    InboundRecord.objects.bulk_create(
        InboundRecord(message_id=str(n), received_at=OLD if n < 5 else NOW, outcome="started", **fields)
        for n in range(8)
    )  # fmt: skip
    report = _report()
    with CaptureQueriesContext(connection) as captured:
        records_prune(report=report, batch=3)
    assert report.records_pruned == 5
    finds = [q["sql"] for q in captured if q["sql"].startswith('SELECT "gateway_inboundrecord"')]
    assert len(finds) == 3
    plan = _plan(finds[0])
    assert any("INDEX inbound_received (received_at<?)" in step for step in plan), plan
    assert not any("TEMP B-TREE" in step or step.startswith("SCAN") for step in plan), plan
