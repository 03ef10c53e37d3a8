"""Maintenance: pruneAfter deletes dead sessions, maxEntries compacts long ones into a recap."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.management import call_command
from django.utils import timezone

from chats.gateway.maintenance import maintenance_run
from chats.gateway.models import MaintenanceMode, SessionOrigin
from chats.gateway.selectors import gateway_config
from chats.models import (
    Conversation,
    Entry,
    EntryKind,
    EntryRole,
    Status,
    TaskState,
)
from chats.summarize import ExtractiveSummarizer, SummaryLine, register_summarizer
from tests.factories import ConversationFactory, TaskFactory, TurnFactory

NOW = timezone.now()


def session(owner, agent, key, *, entries=0, days_ago=0, **fields):
    chat = ConversationFactory(
        owner=owner,
        agent=agent,
        session_key=f"agent:{agent.slug}:{key}",
        last_interaction_at=NOW - dt.timedelta(days=days_ago),
        **fields,
    )
    SessionOrigin.objects.create(conversation=chat, chat_type="dm", channel="telegram", peer=key)
    Entry.objects.bulk_create(
        Entry(
            conversation=chat,
            seq=n,
            role=EntryRole.PERSON if n % 2 else EntryRole.ASSISTANT,
            text=f"line {n}. More words after the first sentence.",
        )
        for n in range(1, entries + 1)
    )
    return chat


def exists(chat) -> bool:
    return Conversation.objects.filter(pk=chat.pk).exists()


def test_a_session_untouched_past_prune_after_is_deleted_and_a_recent_one_kept(owner, agent):
    dead = session(owner, agent, "dm:telegram:dead", entries=3, days_ago=31)
    alive = session(owner, agent, "dm:telegram:alive", entries=3, days_ago=29)
    report = maintenance_run(now=NOW)
    assert (exists(dead), exists(alive)) == (False, True)
    assert report.pruned == 1
    assert not Entry.objects.filter(conversation_id=dead.pk).exists()


def test_prune_after_is_a_setting(owner, agent):
    config = gateway_config()
    config.prune_after_days = 7
    config.save()
    week_old = session(owner, agent, "dm:telegram:a", days_ago=8)
    maintenance_run(now=NOW)
    assert not exists(week_old)


def test_a_pinned_session_is_never_pruned(owner, agent):
    pinned = session(owner, agent, "dm:telegram:p", days_ago=400, pinned=True)
    report = maintenance_run(now=NOW)
    assert exists(pinned)
    assert report.kept_pinned == 1


def test_a_working_session_is_never_pruned(owner, agent):
    working = session(owner, agent, "dm:telegram:w", days_ago=400, status=Status.WORKING)
    mid_reply = session(owner, agent, "dm:telegram:m", days_ago=400)
    TurnFactory(conversation=mid_reply, number=1)  # open: no ended_at
    with_a_task = session(owner, agent, "dm:telegram:t", days_ago=400)
    TaskFactory(parent=with_a_task, state=TaskState.RUNNING)
    report = maintenance_run(now=NOW)
    assert exists(working) and exists(mid_reply) and exists(with_a_task)
    assert report.kept_working == 3


def test_the_persons_own_chats_are_never_pruned(owner, agent):
    own = ConversationFactory(
        owner=owner, agent=agent, last_interaction_at=NOW - dt.timedelta(days=400)
    )
    maintenance_run(now=NOW)
    assert exists(own)


def test_an_old_archived_generation_is_pruned_like_any_session(owner, agent):
    old_generation = session(owner, agent, "dm:telegram:g", days_ago=60, archived=True)
    maintenance_run(now=NOW)
    assert not exists(old_generation)


@pytest.mark.parametrize("how", ["warn", "dry_run"])
def test_warn_mode_and_a_dry_run_only_report(owner, agent, how):
    if how == "warn":
        config = gateway_config()
        config.maintenance_mode = MaintenanceMode.WARN
        config.save()
    dead = session(owner, agent, "dm:telegram:dead", days_ago=31)
    long = session(owner, agent, "dm:telegram:long", entries=510)
    report = maintenance_run(now=NOW, dry_run=how == "dry_run")
    assert (report.pruned, report.compacted, report.entries_removed) == (1, 1, 11)
    assert report.dry_run
    assert exists(dead)
    assert long.entries.count() == 510


def test_a_long_session_keeps_one_recap_and_its_most_recent_entries_within_the_cap(owner, agent):
    long = session(owner, agent, "dm:telegram:long", entries=600)
    report = maintenance_run(now=NOW)
    kept = list(long.entries.order_by("seq"))
    assert len(kept) == 500
    recap, rest = kept[0], kept[1:]
    assert (recap.kind, recap.role) == (EntryKind.RECAP, EntryRole.CONCH)
    assert [e.seq for e in rest] == list(range(102, 601))  # the most recent 499, untouched
    assert recap.seq < rest[0].seq
    assert recap.data["compacted"] == 101
    assert "Recap of 101 earlier entries" in recap.text
    assert "line 1." in recap.text and "line 101." in recap.text
    assert (report.compacted, report.entries_removed) == (1, 101)


@pytest.mark.parametrize("cap", [2, 3, 10, 499])
def test_the_kept_length_never_goes_above_the_cap(owner, agent, cap):
    config = gateway_config()
    config.max_entries = cap
    config.save()
    long = session(owner, agent, "dm:telegram:long", entries=cap * 3 + 1)
    exact = session(owner, agent, "dm:telegram:exact", entries=cap)
    maintenance_run(now=NOW)
    assert long.entries.count() == cap
    assert long.entries.filter(kind=EntryKind.RECAP).count() == 1
    assert exact.entries.count() == cap
    assert not exact.entries.filter(kind=EntryKind.RECAP).exists()  # at the cap: left alone


def test_compacting_again_folds_the_old_recap_into_one_new_recap(owner, agent):
    config = gateway_config()
    config.max_entries = 10
    config.save()
    long = session(owner, agent, "dm:telegram:long", entries=20)
    maintenance_run(now=NOW)
    last = long.entries.order_by("-seq").first().seq
    Entry.objects.bulk_create(
        Entry(conversation=long, seq=last + n, role=EntryRole.PERSON, text=f"more {n}.")
        for n in range(1, 6)
    )
    maintenance_run(now=NOW)
    kept = list(long.entries.order_by("seq"))
    assert len(kept) == 10
    assert [e.kind for e in kept].count(EntryKind.RECAP) == 1
    assert kept[0].kind == EntryKind.RECAP
    assert "Before that:" in kept[0].text


def test_an_active_oversized_session_is_compacted_not_pruned(owner, agent):
    active = session(owner, agent, "dm:telegram:active", entries=700, days_ago=0)
    report = maintenance_run(now=NOW)
    assert exists(active)
    assert active.entries.count() == 500
    assert report.pruned == 0


def test_a_chat_mid_reply_is_compacted_later_not_now(owner, agent):
    busy = session(owner, agent, "dm:telegram:busy", entries=600)
    TurnFactory(conversation=busy, number=1)
    report = maintenance_run(now=NOW)
    assert busy.entries.count() == 600
    assert report.compaction_deferred == 1


def test_batches_give_the_same_result_and_report_progress(owner, agent):
    config = gateway_config()
    config.max_entries = 5
    config.save()
    dead = [session(owner, agent, f"dm:telegram:d{i}", days_ago=40) for i in range(5)]
    long = [session(owner, agent, f"dm:telegram:l{i}", entries=8) for i in range(5)]
    lines: list[str] = []
    report = maintenance_run(now=NOW, batch=2, progress=lines.append)
    assert not any(exists(c) for c in dead)
    assert all(c.entries.count() == 5 for c in long)
    assert (report.pruned, report.compacted) == (5, 5)
    assert any("pruning: 5/5 looked at" in line for line in lines)
    assert any("compacting: 5/5 sessions looked at, 5 compacted" in line for line in lines)


def test_the_extractive_recap_is_the_same_every_time():
    lines = [SummaryLine("person", "message", f"Question {n}? Detail.") for n in range(50)]
    one = ExtractiveSummarizer().summarize(lines)
    two = ExtractiveSummarizer().summarize(iter(lines))
    assert one == two
    assert "Recap of 50 earlier entries" in one
    assert len(one) <= 4000


def test_a_personas_model_summarizer_makes_the_recap_and_a_failing_one_falls_back(owner, agent):
    config = gateway_config()
    config.max_entries = 4
    config.save()

    class Modelish:
        name = "modelish"

        def summarize(self, lines, *, limit=4000):
            return f"model recap of {len(list(lines))} lines"

    class Broken:
        name = "broken"

        def summarize(self, lines, *, limit=4000):
            raise RuntimeError("the model is down")

    register_summarizer("modelish", lambda a: Modelish())
    register_summarizer("broken", lambda a: Broken())
    agent.engine = "modelish"
    agent.save()
    first = session(owner, agent, "dm:telegram:a", entries=10)
    maintenance_run(now=NOW)
    recap = first.entries.get(kind=EntryKind.RECAP)
    assert (recap.text, recap.data["summarizer"]) == ("model recap of 7 lines", "modelish")

    agent.engine = "broken"
    agent.save()
    second = session(owner, agent, "dm:telegram:b", entries=10)
    maintenance_run(now=NOW)
    recap = second.entries.get(kind=EntryKind.RECAP)
    assert recap.data["summarizer"] == "extractive"
    assert recap.text.startswith("Recap of 7 earlier entries")


def test_conch_maintain_prints_what_it_would_do_and_then_does_it(owner, agent):
    dead = session(owner, agent, "dm:telegram:dead", days_ago=31)
    out, err = io.StringIO(), io.StringIO()
    call_command("conch_maintain", "--dry-run", stdout=out, stderr=err)
    assert "pruned (would): 1 sessions" in out.getvalue()
    assert "prune agent:main:dm:telegram:dead" in out.getvalue()
    assert "pruning: 1/1 looked at" in err.getvalue()
    assert exists(dead)
    out = io.StringIO()
    call_command("conch_maintain", stdout=out, stderr=io.StringIO())
    assert "pruned (did): 1 sessions" in out.getvalue()
    assert not exists(dead)


def test_old_receipts_and_delivered_replies_are_pruned_and_waiting_ones_kept(owner, agent):
    from chats.gateway.models import InboundRecord, OutboxMessage, OutboxState

    old = NOW - dt.timedelta(days=31)
    fields = dict(channel="t", account_id="a", session_key="k", agent_slug="main", rule="r")
    InboundRecord.objects.create(message_id="old", received_at=old, outcome="started", **fields)
    InboundRecord.objects.create(message_id="new", received_at=NOW, outcome="started", **fields)
    out = dict(channel="telegram", account_id="a", target={"chat_id": 1}, text="x", created_at=old)
    OutboxMessage.objects.create(state=OutboxState.SENT, **out)
    waiting = OutboxMessage.objects.create(state=OutboxState.PENDING, **out)
    report = maintenance_run(now=NOW)
    assert report.records_pruned == 2
    assert list(InboundRecord.objects.values_list("message_id", flat=True)) == ["new"]
    assert list(OutboxMessage.objects.values_list("pk", flat=True)) == [waiting.pk]
