"""Events are numbered as their transaction commits, the whole transaction in one statement:
on SQLite as the last statement before its COMMIT, elsewhere after it.

A writer never holds the owner's stream row while it works, and a page that read the
sequence number before its state (``regions.page_context``) never takes a change that
committed after that read for one it has.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from chats import events
from tests.factories import ChatFactory

pytestmark = pytest.mark.django_db


def stream_statements(queries) -> list[str]:
    return [q["sql"] for q in queries if "chats_eventstream" in q["sql"]]


def test_a_transactions_events_take_no_query_until_it_commits_then_one(
    owner, published, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        chat = ChatFactory(owner=owner)  # its own events: the owner's stream exists
    published.clear()
    before = events.current_seq(owner.pk)
    with CaptureQueriesContext(connection) as writing:
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            events.publish_chat(chat)
            events.publish(events.STATUS, owner_id=owner.pk, conversation_id=chat.public_id)
            events.publish_many(
                events.CONVERSATION_DELETED, owner_id=owner.pk, conversation_ids=["c_a", "c_b"]
            )
    assert stream_statements(writing.captured_queries) == []  # the writer never waits on it
    assert published == []

    with CaptureQueriesContext(connection) as committing:
        for callback in callbacks:
            callback()
    assert len(stream_statements(committing.captured_queries)) == 1  # four events, one number
    assert [e.seq for e in published] == [before + 1, before + 2, before + 3, before + 4]
    assert [e.type for e in published] == [
        events.CONVERSATION_UPDATED,
        events.STATUS,
        events.CONVERSATION_DELETED,
        events.CONVERSATION_DELETED,
    ]
    assert events.current_seq(owner.pk) == before + 4


def test_each_owner_gets_its_own_numbers_in_the_order_published(
    owner, second_owner, published, django_capture_on_commit_callbacks
):
    mine, theirs = events.current_seq(owner.pk), events.current_seq(second_owner.pk)
    with django_capture_on_commit_callbacks(execute=True):
        events.publish(events.STATUS, owner_id=owner.pk, conversation_id="c_1")
        events.publish(events.STATUS, owner_id=second_owner.pk, conversation_id="c_2")
        events.publish(events.STATUS, owner_id=owner.pk, conversation_id="c_3")
    assert [(e.owner_id, e.conversation_id, e.seq) for e in published] == [
        (owner.pk, "c_1", mine + 1),
        (second_owner.pk, "c_2", theirs + 1),
        (owner.pk, "c_3", mine + 2),
    ]


def test_an_event_a_rolled_back_savepoint_published_is_never_sent(
    owner, published, django_capture_on_commit_callbacks
):
    before = events.current_seq(owner.pk)
    with django_capture_on_commit_callbacks(execute=True):
        events.publish(events.STATUS, owner_id=owner.pk, conversation_id="c_kept")
        try:
            with transaction.atomic():
                events.publish(events.STATUS, owner_id=owner.pk, conversation_id="c_undone")
                raise RuntimeError("rolled back")
        except RuntimeError:
            pass
        events.publish(events.STATUS, owner_id=owner.pk, conversation_id="c_after")
    assert [e.conversation_id for e in published] == ["c_kept", "c_after"]
    seqs = [e.seq for e in published]
    assert seqs == sorted(seqs) and seqs[0] == before + 1  # a gap at most: a page refetches


def test_a_page_that_read_the_number_first_gets_every_later_change(
    owner, published, django_capture_on_commit_callbacks
):
    """The invariant: the number is read before the state. A change whose transaction
    has not committed yet has no number, so a page reading meanwhile cannot count it as
    seen; it gets a number above what the page read, and the page takes it."""
    chat = ChatFactory(owner=owner)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        events.publish_chat(chat)
        page_read = events.current_seq(owner.pk)  # a page loads while the writer works
    for callback in callbacks:
        callback()
    assert published[-1].seq > page_read


@pytest.mark.django_db(transaction=True)
def test_a_numbering_that_fails_after_commit_fails_no_writer_and_leaves_a_gap_the_pages_see(
    owner, published, monkeypatch, caplog
):
    """The change committed: its writer is not told otherwise. The watchers here still
    hear it; the pages, which need a number, see the numbers it would have had skipped
    at the next event, a gap, and fetch what they missed."""
    from django.db import OperationalError

    chat = ChatFactory(owner=owner)
    before = events.current_seq(owner.pk)
    real = events._next_seq
    failing = [True]

    def once_locked(*args, **kwargs):
        if failing.pop() if failing else False:
            raise OperationalError("database is locked")
        return real(*args, **kwargs)

    monkeypatch.setattr(events, "_next_seq", once_locked)
    sent = []
    monkeypatch.setattr(
        events, "_group_send_many", lambda group, messages, newest_of=None: sent.extend(messages)
    )
    published.clear()

    with transaction.atomic():  # returns: the writer's change is in
        events.publish_chat(chat)
        events.publish(events.STATUS, owner_id=owner.pk, conversation_id=chat.public_id)

    assert "could not number the events of a committed transaction" in caplog.text
    assert [(e.type, e.seq) for e in published] == [
        (events.CONVERSATION_UPDATED, events.UNNUMBERED),
        (events.STATUS, events.UNNUMBERED),
    ]
    assert sent == []  # no page takes an event without a number
    assert events.current_seq(owner.pk) == before

    with transaction.atomic():
        events.publish_chat(chat)

    assert [m["seq"] for m in sent] == [before + 3]  # before + 1 and + 2: the gap
    assert events.current_seq(owner.pk) == before + 3


@pytest.mark.django_db(transaction=True)
def test_on_sqlite_the_numbers_are_written_by_the_transaction_itself_just_before_it_commits(
    owner, published
):
    """SQLite's writers go one at a time (the write lock is taken at BEGIN), so numbered
    last inside the transaction the numbers are in commit order all the same, and the
    change and its numbers are one commit, not two."""
    assert connection.vendor == "sqlite"  # the default suite's database
    chat = ChatFactory(owner=owner)
    before = events.current_seq(owner.pk)
    published.clear()
    with CaptureQueriesContext(connection) as captured:
        with transaction.atomic():
            events.publish_chat(chat)
            events.publish(events.STATUS, owner_id=owner.pk, conversation_id=chat.public_id)
    sqls = [q["sql"] for q in captured.captured_queries]
    assert [s for s in sqls if s.startswith(("BEGIN", "COMMIT"))] == ["BEGIN IMMEDIATE", "COMMIT"]
    committed = sqls.index("COMMIT")
    assert "chats_eventstream" in sqls[committed - 1]  # numbered, then committed
    assert len(stream_statements(captured.captured_queries)) == 1  # and never again after
    assert [e.seq for e in published] == [before + 1, before + 2]
    assert events.current_seq(owner.pk) == before + 2
