"""conch.rows: the door's rows read, written and changed with statements made once, held
to what the ORM itself reads and writes.

Each test makes its own rows and takes no fixture, so that the scale-out suite runs the
same tests on the real PostgreSQL (tests/scaleout/test_rows_postgres.py), whose
converters are not SQLite's.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import signals
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chats.gateway.models import InboundRecord
from chats.models import Agent, Conversation, QueuedInput
from conch.rows import model_from_row, model_insert, model_update

pytestmark = pytest.mark.django_db

WHEN = dt.datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=dt.UTC)


def _chat(**fields) -> Conversation:
    owner = get_user_model().objects.create(username=f"u-{uuid.uuid4().hex[:8]}")
    agent = Agent.objects.create(slug=f"a-{uuid.uuid4().hex[:8]}", name="A", workspace="/tmp")
    return Conversation.objects.create(owner=owner, agent=agent, title="t", **fields)


def _columns(model, pk) -> dict:
    """The row as the database keeps it: what each column holds, no converter applied."""
    qn = connection.ops.quote_name
    columns = [field.column for field in model._meta.concrete_fields]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(map(qn, columns))} FROM {qn(model._meta.db_table)}"
            f" WHERE {qn(model._meta.pk.column)} = %s",
            [pk],
        )
        row = cursor.fetchone()
    return dict(zip(columns, row, strict=True))


def _fields(obj) -> dict:
    return {field.attname: getattr(obj, field.attname) for field in obj._meta.concrete_fields}


def test_a_row_a_written_out_statement_read_is_the_instance_the_orm_reads():
    chat = _chat(pinned=True, script=[["say", "hi"]], last_interaction_at=WHEN)
    # The statement's columns in an order of its own: the row is mapped by name.
    names = [field.attname for field in Conversation._meta.concrete_fields][::-1]
    row = [_columns(Conversation, chat.pk)[Conversation._meta.get_field(n).column] for n in names]

    made = model_from_row(Conversation, names, row, using=connection.alias)

    read = Conversation.objects.get(pk=chat.pk)
    assert _fields(made) == _fields(read)
    assert made.last_interaction_at == WHEN  # a datetime again, aware, to the microsecond
    assert made.pinned is True and made.archived is False  # bools, not 1 and 0
    assert made.script == [["say", "hi"]]  # JSON decoded
    assert not made._state.adding and made._state.db == connection.alias


def test_the_fields_a_statement_did_not_read_are_deferred_and_load_when_asked():
    chat = _chat()
    made = model_from_row(Conversation, ["title", "id"], [chat.title, chat.pk], using="default")
    assert made.pk == chat.pk and made.title == "t"
    assert "status" in made.get_deferred_fields()
    with CaptureQueriesContext(connection) as loading:
        assert made.status == chat.status
    assert len(loading.captured_queries) == 1


def test_a_column_that_is_no_field_of_the_model_is_refused():
    with pytest.raises(ValueError, match="no fields"):
        model_from_row(Conversation, ["id", "nonsense"], [1, 2], using="default")


def test_an_insert_writes_the_row_the_orm_writes():
    chat = _chat()
    saved = QueuedInput.objects.create(conversation=chat, text="hello", created_at=WHEN)
    inserted = model_insert(QueuedInput(conversation=chat, text="hello", created_at=WHEN))

    assert inserted.pk is not None and inserted.pk != saved.pk
    assert not inserted._state.adding and inserted._state.db == "default"
    stored, ours = _columns(QueuedInput, saved.pk), _columns(QueuedInput, inserted.pk)
    assert ours == {**stored, "id": inserted.pk}  # stored alike, column by column


def test_an_insert_fills_the_defaults_the_orm_fills():
    chat = _chat()
    fields = dict(
        channel="telegram",
        account_id="default",
        conversation=chat,
        session_key="agent:main:dm:telegram:p1",
        agent_slug="main",
        rule="default",
        outcome="queued",
    )
    before = timezone.now()
    saved = InboundRecord.objects.create(message_id="m1", **fields)
    inserted = model_insert(InboundRecord(message_id="m2", **fields))

    stored, ours = _columns(InboundRecord, saved.pk), _columns(InboundRecord, inserted.pk)
    for changes in ("id", "message_id", "received_at"):
        stored.pop(changes), ours.pop(changes)
    assert ours == stored  # reason "", shared_dm false
    assert before <= inserted.received_at <= timezone.now()
    assert InboundRecord.objects.get(pk=inserted.pk).received_at == inserted.received_at


def test_an_insert_of_a_model_someone_listens_to_goes_through_save():
    heard = []

    def listener(sender, instance, created, **kwargs):
        heard.append((instance.text, created))

    signals.post_save.connect(listener, sender=QueuedInput, dispatch_uid="test-rows")
    try:
        inserted = model_insert(QueuedInput(conversation=_chat(), text="told"))
    finally:
        signals.post_save.disconnect(sender=QueuedInput, dispatch_uid="test-rows")
    assert heard == [("told", True)]
    assert QueuedInput.objects.get(pk=inserted.pk).text == "told"


def test_an_update_changes_what_the_orm_update_changes():
    first, second = _chat(), _chat()
    Conversation.objects.filter(pk=first.pk).update(last_interaction_at=WHEN, updated_at=WHEN)

    changed = model_update(Conversation, second.pk, last_interaction_at=WHEN, updated_at=WHEN)

    assert changed == 1
    for column in ("last_interaction_at", "updated_at"):
        assert _columns(Conversation, second.pk)[column] == _columns(Conversation, first.pk)[column]
    assert model_update(Conversation, 10**9, updated_at=WHEN) == 0  # no such row


def test_an_update_is_only_of_plain_fields():
    with pytest.raises(ValueError, match="plain fields"):
        model_update(Conversation, 1, id=2)
    with pytest.raises(ValueError, match="plain fields"):
        model_update(Conversation, 1, turns=[])
