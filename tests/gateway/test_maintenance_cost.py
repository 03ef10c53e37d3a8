"""What a maintenance run costs as the store grows: each batch seeks by an index
rather than reading or sorting the whole table again, so 100,000 sessions take one pass.

``bench/bench_maintenance.py`` times it; here the plans and the statements are pinned.
The PostgreSQL twins are in ``tests/scaleout/test_maintenance_postgres.py``.
"""

from __future__ import annotations

import datetime as dt

from django.db import connection
from django.db.models.signals import pre_delete
from django.test.utils import CaptureQueriesContext

from chats.gateway import maintenance
from chats.gateway.maintenance import (
    MaintenanceReport,
    maintenance_run,
    records_prune,
    sessions_compact,
)
from chats.gateway.models import InboundRecord, OutboxMessage, OutboxState, SentPart
from chats.models import Entry, EntryRole, Step, Turn, TurnState
from tests.gateway.test_maintenance import NOW, session

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


def test_old_replies_go_with_the_parts_their_app_numbered_and_new_ones_keep_theirs(db):
    old, new = (OutboxMessage.objects.create(**vars_of(_outbox(OutboxState.SENT, when)))
                for when in (OLD, NOW))  # fmt: skip
    for message, ts in ((old, "1.1"), (old, "1.2"), (new, "2.1")):
        SentPart.objects.create(
            message=message, channel=message.channel, account_id=message.account_id,
            platform_message_id=ts,
        )  # fmt: skip
    report = _report()
    records_prune(report=report, batch=3)
    assert list(OutboxMessage.objects.values_list("pk", flat=True)) == [new.pk]
    assert list(SentPart.objects.values_list("platform_message_id", flat=True)) == ["2.1"]


def vars_of(message: OutboxMessage) -> dict:
    return {f.attname: getattr(message, f.attname) for f in message._meta.concrete_fields
            if f.attname != "id"}  # fmt: skip


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


def _replied(chat, replies: int) -> None:
    """``replies`` finished replies in this chat, each with a step and its two lines."""
    turns = Turn.objects.bulk_create(
        Turn(conversation=chat, number=n, folder="/tmp", state=TurnState.COMPLETED, ended_at=OLD)
        for n in range(1, replies + 1)
    )
    Step.objects.bulk_create(
        Step(turn=turn, number=1, tool="read_file", family="reading files", effect="read")
        for turn in turns
    )
    Entry.objects.bulk_create(
        Entry(conversation=chat, turn=turn, seq=2 * turn.number - 1 + k, role=role, text="Deploy?")
        for turn in turns
        for k, role in enumerate((EntryRole.PERSON, EntryRole.ASSISTANT))
    )


def _statements_to_prune(owner, agent, key: str, replies: int) -> int:
    for n in range(2):
        _replied(session(owner, agent, f"{key}:{n}", days_ago=40), replies)
    with CaptureQueriesContext(connection) as captured:
        assert maintenance_run(now=NOW).pruned == 2
    return len(captured)


def test_pruning_sessions_with_a_thousand_replies_takes_the_statements_one_reply_does(owner, agent):
    """Django's collector read every reply of a batch into Python and deleted them, and set
    null what points at them, a few hundred ids a statement: 2,192 statements for the
    bench's replies. Each table is now one statement for the batch, however many replies."""
    one = _statements_to_prune(owner, agent, "dm:telegram:short", replies=1)
    many = _statements_to_prune(owner, agent, "dm:telegram:long", replies=500)
    assert many == one
    assert not Turn.objects.exists() and not Step.objects.exists()


def test_a_pruned_sessions_words_are_never_rewritten_on_their_way_out(owner, agent, monkeypatch):
    """Setting a reply's entries' ``turn`` null rewrites each one in the search index (its
    update trigger deletes and re-adds it) just before the entry is deleted. The transcript
    goes before the replies, whatever order the relations are listed in."""
    real = maintenance._relations
    monkeypatch.setattr(maintenance, "_relations", lambda model: real(model)[::-1])
    _replied(session(owner, agent, "dm:telegram:dead", days_ago=40), 3)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE rewritten (id integer)")
        cursor.execute(
            "CREATE TEMP TRIGGER entry_rewritten AFTER UPDATE ON main.chats_entry "
            "BEGIN INSERT INTO rewritten VALUES (old.id); END"
        )
    try:
        assert maintenance_run(now=NOW).pruned == 1
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM rewritten")
            assert cursor.fetchone()[0] == 0
        assert not Entry.objects.exists()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER temp.entry_rewritten")
            cursor.execute("DROP TABLE temp.rewritten")


def test_what_points_at_a_pruned_session_through_a_mostly_null_link_is_found_by_index(owner, agent):
    """Few chats have a parent, so SQLite's statistics see ``parent_id`` as one key shared
    by every chat and would scan them all, each batch, to set a pruned parent's children
    free. Saying the link is not null lets it seek the index."""
    for n in range(30):
        session(owner, agent, f"dm:telegram:kept{n}", days_ago=1)
    session(owner, agent, "dm:telegram:dead", days_ago=40)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    with CaptureQueriesContext(connection) as captured:
        assert maintenance_run(now=NOW).pruned == 1
    [freed] = [q["sql"] for q in captured if q["sql"].startswith('UPDATE "chats_conversation"')]
    plan = _plan(freed)
    assert any("INDEX chats_conversation_parent_id" in step for step in plan), plan
    assert not any(step.startswith("SCAN chats_conversation") for step in plan), plan


def test_a_model_that_listens_for_its_deletes_still_hears_each_one(owner, agent):
    """A delete signal wants each row as it goes, which only Django's collector gives."""
    _replied(session(owner, agent, "dm:telegram:dead", days_ago=40), 2)
    heard: list[int] = []

    def listen(sender, instance, **kwargs):
        heard.append(instance.pk)

    steps = sorted(Step.objects.values_list("pk", flat=True))
    pre_delete.connect(listen, sender=Step)
    try:
        assert maintenance_run(now=NOW).pruned == 1
    finally:
        pre_delete.disconnect(listen, sender=Step)
    assert sorted(heard) == steps
    assert not Step.objects.exists() and not Turn.objects.exists()


def test_a_pruned_sessions_old_receipts_and_sent_replies_are_deleted_not_first_set_null(
    owner, agent
):
    """Most old receipts and sent replies are the pruned sessions' own. Pruned after the
    sessions, each was first updated to point nowhere (600,000 rows in the bench), then
    deleted."""
    dead = session(owner, agent, "dm:telegram:dead", days_ago=40)
    _replied(dead, 1)
    InboundRecord.objects.create(
        channel="telegram", account_id="bot", message_id="1", session_key=dead.session_key,
        agent_slug="main", rule="dm", outcome="routed", conversation=dead, received_at=OLD,
    )  # fmt: skip
    sent = _outbox(OutboxState.SENT, OLD)
    sent.conversation, sent.turn = dead, dead.turns.get()
    sent.save()
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE rewritten (id integer)")
        for table in ("gateway_inboundrecord", "gateway_outboxmessage"):
            cursor.execute(
                f"CREATE TEMP TRIGGER {table}_rewritten AFTER UPDATE ON main.{table} "
                "BEGIN INSERT INTO rewritten VALUES (old.id); END"
            )
    try:
        report = maintenance_run(now=NOW)
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM rewritten")
            assert cursor.fetchone()[0] == 0
    finally:
        with connection.cursor() as cursor:
            for table in ("gateway_inboundrecord", "gateway_outboxmessage"):
                cursor.execute(f"DROP TRIGGER temp.{table}_rewritten")
            cursor.execute("DROP TABLE temp.rewritten")
    assert (report.pruned, report.records_pruned) == (1, 2)
    assert not InboundRecord.objects.exists() and not OutboxMessage.objects.exists()


def _statements_to_compact(owner, agent, key: str, sessions: int) -> int:
    for n in range(sessions):
        session(owner, agent, f"{key}:{n}", entries=510)
    report = _report()
    report.max_entries = 500
    with CaptureQueriesContext(connection) as captured:
        sessions_compact(report=report)
    assert report.compacted == sessions
    return len(captured)


def test_each_long_session_of_a_batch_is_compacted_in_ten_statements(owner, agent):
    """A thousand long sessions each cost their statements: the chats (with their agents)
    are read once for the batch, and the re-count under the lock is one statement."""
    one = _statements_to_compact(owner, agent, "dm:telegram:a", sessions=1)
    three = _statements_to_compact(owner, agent, "dm:telegram:b", sessions=3)
    # Each: an open reply?, the cut, the words read; then in a savepoint here (a transaction
    # in a run) the locked row, an open reply?, the one re-count, the delete, the recap.
    assert (three - one) / 2 == 10
