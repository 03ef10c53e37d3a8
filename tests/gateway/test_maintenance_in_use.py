"""Maintenance never takes what is in use.

- A session with a live wait, or with the person's message queued for its next reply, is
  not idle however old: pruning it would lose the wait or the message without a word.
- Two maintenance runs at once (every runner starts one) never over-compact: the second
  run's count is stale once the first has compacted, and it re-reads under the chat's lock.
  The real concurrent case is on PostgreSQL in ``tests/scaleout/test_maintenance_postgres.py``.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chats.gateway import maintenance
from chats.gateway.maintenance import MaintenanceReport, maintenance_run, session_compact
from chats.gateway.selectors import gateway_config
from chats.models import Conversation, EntryKind, QueuedInput
from tests.factories import WaitFactory
from tests.gateway.test_maintenance import NOW, session
from together.models import WaitState


def exists(chat) -> bool:
    return Conversation.objects.filter(pk=chat.pk).exists()


def test_a_session_with_a_live_wait_is_never_pruned(owner, agent):
    waiting = session(owner, agent, "dm:telegram:waiting", days_ago=40)
    woken = session(owner, agent, "dm:telegram:woken", days_ago=40)
    WaitFactory(waiter=waiting, target_chat__owner=owner, target_chat__agent=agent)
    WaitFactory(
        waiter=woken, target_chat__owner=owner, target_chat__agent=agent, state=WaitState.WOKEN
    )
    report = maintenance_run(now=NOW)
    assert (exists(waiting), exists(woken)) == (True, False)
    assert waiting.waits.get().state == WaitState.WAITING
    assert (report.pruned, report.kept_working) == (1, 1)


def test_a_session_with_the_persons_queued_message_is_never_pruned(owner, agent):
    queued = session(owner, agent, "dm:telegram:queued", days_ago=40)
    QueuedInput.objects.create(conversation=queued, text="Remind me about the dentist.")
    report = maintenance_run(now=NOW)
    assert exists(queued)
    assert QueuedInput.objects.filter(conversation=queued).count() == 1
    assert (report.pruned, report.kept_working) == (0, 1)


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_dry_run_counts_a_session_in_use_as_kept_as_the_real_run_does(owner, agent, dry_run):
    waiting = session(owner, agent, "dm:telegram:waiting", days_ago=40)
    WaitFactory(waiter=waiting, target_chat__owner=owner, target_chat__agent=agent)
    session(owner, agent, "dm:telegram:dead", days_ago=40)
    report = maintenance_run(now=NOW, dry_run=dry_run)
    assert (report.pruned, report.kept_working) == (1, 1)
    assert report.actions == ["prune agent:main:dm:telegram:dead"]


def test_a_session_that_comes_into_use_after_its_batch_was_read_is_still_kept(
    owner, agent, monkeypatch
):
    """What is in use is asked once a batch, under the rows' locks: the person's message
    queued between the read and the lock keeps the session."""
    late = session(owner, agent, "dm:telegram:late", days_ago=40)
    real = maintenance._delete_sessions

    def message_comes_in_first(ids, before):
        QueuedInput.objects.create(conversation=late, text="Are you still there?")
        return real(ids, before)

    monkeypatch.setattr(maintenance, "_delete_sessions", message_comes_in_first)
    with CaptureQueriesContext(connection) as captured:
        report = maintenance_run(now=NOW)
    assert exists(late)
    assert (report.pruned, report.kept_working) == (0, 1)
    asked = [q for q in captured if q["sql"].startswith('SELECT "chats_queuedinput"')]
    assert len(asked) == 1  # once, under the lock; asking before the lock told nothing


def _report() -> MaintenanceReport:
    config = gateway_config()
    return MaintenanceReport(
        mode=config.maintenance_mode,
        dry_run=False,
        prune_before=NOW,
        max_entries=config.max_entries,
    )


def test_a_second_run_with_a_stale_count_compacts_nothing_more(owner, agent):
    long = session(owner, agent, "dm:telegram:long", entries=700)
    counted = long.entries.count()  # both runs counted 700 before either compacted
    first, second = _report(), _report()
    assert session_compact(conversation_id=long.pk, count=counted, report=first)
    after_first = list(long.entries.order_by("seq").values_list("seq", "kind", "text"))
    assert len(after_first) == 500

    assert not session_compact(conversation_id=long.pk, count=counted, report=second)
    assert list(long.entries.order_by("seq").values_list("seq", "kind", "text")) == after_first
    assert long.entries.filter(kind=EntryKind.RECAP).count() == 1
    recap = long.entries.get(kind=EntryKind.RECAP)
    assert recap.data["compacted"] == 201 and "Recap of" not in recap.text.split("\n", 1)[1]
    assert (second.compacted, second.entries_removed, second.compaction_deferred) == (0, 0, 1)
