"""Keeping the gateway's state bounded (seed ch. 4): prune dead sessions, compact long ones.

The limits are the gateway's settings (``GatewayConfig``); in mode ``warn``, or with
``dry_run``, it only reports. A working or pinned session, or one whose task is still
going, is never pruned; a session mid-reply is compacted at the next run, its oldest
overflow folded into one recap (:func:`chats.summarize.summarize`). It works in batches,
so memory stays flat as the store grows, and touches only gateway sessions.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from django.db import models, transaction
from django.db.models import Count, Q, signals
from django.db.models.deletion import get_candidate_relations_to_delete
from django.utils import timezone

from chats import events, hooks
from chats.gateway.models import (
    InboundRecord,
    MaintenanceMode,
    OutboxMessage,
    OutboxState,
    SentPart,
)
from chats.gateway.selectors import gateway_config
from chats.models import (
    TASK_GOING_STATES,
    Conversation,
    Entry,
    EntryKind,
    EntryRole,
    QueuedInput,
    Status,
    Task,
    Turn,
)
from chats.summarize import SummaryLine, summarize

log = logging.getLogger(__name__)

BATCH = 500
SAMPLE = 20  # how many actions a report names; the counts are always whole


@dataclass
class MaintenanceReport:
    mode: str
    dry_run: bool
    prune_before: dt.datetime
    max_entries: int
    looked_at: int = 0
    pruned: int = 0
    kept_working: int = 0
    kept_pinned: int = 0
    compacted: int = 0
    entries_removed: int = 0
    compaction_deferred: int = 0
    records_pruned: int = 0
    actions: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.actions) < SAMPLE:
            self.actions.append(text)

    def lines(self) -> list[str]:
        verb = "would" if self.dry_run else "did"
        return [
            f"maintenance ({self.mode}{', dry run' if self.dry_run else ''}): "
            f"prune before {self.prune_before:%Y-%m-%d %H:%M} UTC, at most {self.max_entries} entries",
            f"pruned ({verb}): {self.pruned} sessions; kept {self.kept_working} working "
            f"and {self.kept_pinned} pinned",
            f"compacted ({verb}): {self.compacted} sessions, {self.entries_removed} entries "
            f"folded into recaps; {self.compaction_deferred} mid-reply left for next time",
            f"receipts and sent replies pruned ({verb}): {self.records_pruned}",
            *[f"  {action}" for action in self.actions],
        ]


Progress = Callable[[str], None]


def maintenance_run(
    *,
    now: dt.datetime | None = None,
    dry_run: bool = False,
    batch: int = BATCH,
    progress: Progress | None = None,
) -> MaintenanceReport:
    config = gateway_config()
    now = now or timezone.now()
    dry = dry_run or config.maintenance_mode == MaintenanceMode.WARN
    report = MaintenanceReport(
        mode=config.maintenance_mode,
        dry_run=dry,
        prune_before=now - dt.timedelta(days=config.prune_after_days),
        max_entries=config.max_entries,
    )
    # The old receipts and sent replies first: most are the pruned sessions' own, and
    # deleting them after the sessions would first set their link to each session null.
    records_prune(report=report, batch=batch)
    sessions_prune(report=report, batch=batch, progress=progress)
    sessions_compact(report=report, batch=batch, progress=progress)
    if (
        dry
        and config.maintenance_mode == MaintenanceMode.WARN
        and (report.pruned or report.compacted)
    ):
        log.warning("gateway maintenance (warn): %s", "; ".join(report.lines()[1:3]))
    return report


# ---------------------------------------------------------------------------
# Pruning


def _busy(ids: list[int]) -> set[int]:
    """Of these chats, the ones in use: mid-reply, with a task still going, with the
    person's message queued for the next reply, or holding something live of an app's
    (a wait: ``hooks.add_in_use_check``). None of them is idle, however old."""
    queued = QueuedInput.objects.filter(conversation_id__in=ids).values_list(
        "conversation_id", flat=True
    )
    in_use: set[int] = set(queued)
    for check in list(hooks.in_use_checks):
        in_use |= check(ids)
    open_turns = Turn.objects.filter(conversation_id__in=ids, ended_at__isnull=True).values_list(
        "conversation_id", flat=True
    )
    going = Task.objects.filter(parent_id__in=ids, state__in=TASK_GOING_STATES).values_list(
        "parent_id", flat=True
    )
    return set(open_turns) | set(going) | in_use


def sessions_prune(
    *, report: MaintenanceReport, batch: int = BATCH, progress: Progress | None = None
) -> None:
    candidates = Conversation.objects.filter(
        session_key__isnull=False, last_interaction_at__lt=report.prune_before
    )
    total = candidates.count()
    if progress and total:
        progress(f"pruning: {total} sessions last touched before {report.prune_before:%Y-%m-%d}")
    last_pk, seen = 0, 0
    while True:
        rows = list(
            candidates.filter(pk__gt=last_pk)
            .order_by("pk")
            .values_list("pk", "pinned", "status", "session_key")[:batch]
        )
        if not rows:
            break
        last_pk = rows[-1][0]
        seen += len(rows)
        report.looked_at += len(rows)
        idle: dict[int, str | None] = {}  # their keys
        for pk, pinned, status, key in rows:
            if pinned:
                report.kept_pinned += 1
            elif status == Status.WORKING:
                report.kept_working += 1
            else:
                idle[pk] = key
        if report.dry_run:
            busy = _busy(list(idle))
            pruned = [key for pk, key in idle.items() if pk not in busy]
        else:  # what is in use is asked under the rows' locks only: asked before, it may change
            pruned, busy = _delete_sessions(list(idle), report.prune_before)
        report.kept_working += len(busy)
        report.pruned += len(pruned)
        for key in pruned:
            report.note(f"prune {key}")
        if progress:
            progress(f"pruning: {seen}/{total} looked at, {report.pruned} pruned")


def _delete_sessions(ids: list[int], before: dt.datetime) -> tuple[list[str | None], set[int]]:
    """Delete those of these sessions still idle and old once their rows are locked.
    Returns the keys of those deleted, and the ones kept because in use (:func:`_busy`)."""
    if not ids:
        return [], set()
    with transaction.atomic():
        locked = list(
            Conversation.objects.locked()
            .filter(
                pk__in=ids,
                pinned=False,
                last_interaction_at__lt=before,
                session_key__isnull=False,
            )
            .exclude(status=Status.WORKING)
        )
        busy = _busy([c.pk for c in locked])
        doomed = [c for c in locked if c.pk not in busy]
        if doomed:
            for hook in list(hooks.before_delete_hooks):
                hook(doomed)
        gone = Conversation.objects.filter(pk__in=[c.pk for c in doomed])
        if _plain(Conversation):
            _delete_by_statement(gone)
        else:  # something must see each row as it goes: Django's collector does that
            gone.delete()
        # One numbered event per chat, as a single delete sends, but numbered and sent
        # per owner in one go: thousands of pruned chats, one write and one hop each.
        by_owner: dict[int, list[str]] = {}
        for chat in doomed:
            by_owner.setdefault(chat.owner_id, []).append(chat.public_id)
        for owner_id, public_ids in by_owner.items():
            events.publish_many(
                events.CONVERSATION_DELETED, owner_id=owner_id, conversation_ids=public_ids
            )
    return [chat.session_key for chat in doomed], busy


_HANDLED = (models.CASCADE, models.SET_NULL, models.DO_NOTHING)


def _relations(model: type[models.Model]) -> list[models.ForeignObjectRel]:
    """What points at ``model``'s rows and must change when they go (all but DO_NOTHING)."""
    found = (
        cast(models.ForeignObjectRel, relation)
        for relation in get_candidate_relations_to_delete(model._meta)
    )
    return [relation for relation in found if relation.on_delete is not models.DO_NOTHING]


def _plain(model: type[models.Model], _below: frozenset = frozenset()) -> bool:
    """Whether deleting ``model``'s rows, and all they cascade to, needs nothing but
    statements: no delete signals to send with each row, no parent table, no generic
    relation, only CASCADE and SET_NULL (and DO_NOTHING), and no cascade back round."""
    opts = model._meta
    if (
        model in _below
        or opts.parents
        or signals.pre_delete.has_listeners(model)
        or signals.post_delete.has_listeners(model)
        or any(hasattr(f, "bulk_related_objects") for f in opts.private_fields)
    ):
        return False
    for relation in _relations(model):
        if relation.on_delete not in _HANDLED:
            return False
        if relation.on_delete is models.CASCADE and not _plain(
            relation.related_model, _below | {model}
        ):
            return False
    return True


def _delete_by_statement(rows: models.QuerySet) -> int:
    """Delete ``rows`` and what hangs on them as Django's collector would (cascade, set
    null), but with one statement per table over a subquery of their keys. The collector
    reads every reply of the batch into Python (10,000 for 500 sessions), then deletes
    them and sets null what points at them a few hundred ids a statement. Only for a
    :func:`_plain` model, inside ``atomic()``. Returns how many of ``rows`` went.

    What hangs on the rows goes before them, and what has nothing hanging on it first of
    all (the collector's fast deletes): a chat's transcript goes before its replies, so
    setting the replies' entries' ``turn`` null finds none left to rewrite (each such
    update deletes and re-adds the entry in the search index, for an entry about to go).
    """
    keys = rows.order_by().values("pk")
    relations = sorted(_relations(rows.model), key=lambda r: bool(_relations(r.related_model)))
    for relation in relations:
        if relation.on_delete is models.CASCADE:
            _delete_by_statement(_pointing(relation, keys))
    for relation in relations:
        if relation.on_delete is models.SET_NULL:
            # IS NOT NULL says nothing IN doesn't, but SQLite's statistics count a mostly
            # null column (a chat's parent) as one huge key: without it, a full scan.
            name = relation.field.name
            _pointing(relation, keys).filter(**{f"{name}__isnull": False}).update(**{name: None})
    return rows._raw_delete(rows.db)


def _pointing(relation: models.ForeignObjectRel, keys: models.QuerySet) -> models.QuerySet:
    manager = relation.related_model._base_manager
    return manager.filter(**{f"{relation.field.name}__in": keys}).order_by()


# ---------------------------------------------------------------------------
# Compacting


def sessions_compact(
    *, report: MaintenanceReport, batch: int = BATCH, progress: Progress | None = None
) -> None:
    cap = report.max_entries
    sessions = Conversation.objects.filter(session_key__isnull=False, archived=False)
    total = sessions.count()
    last_pk, seen = 0, 0
    while True:
        ids = list(
            sessions.filter(pk__gt=last_pk).order_by("pk").values_list("pk", flat=True)[:batch]
        )
        if not ids:
            break
        last_pk = ids[-1]
        seen += len(ids)
        over = list(
            Entry.objects.filter(conversation_id__in=ids)
            .values("conversation_id")
            .annotate(n=Count("id"))
            .filter(n__gt=cap)
            .values_list("conversation_id", "n")
        )
        chats = Conversation.objects.select_related("agent").in_bulk([pk for pk, _ in over])
        for conversation_id, n in over:
            session_compact(
                conversation_id=conversation_id,
                count=n,
                report=report,
                chat=chats.get(conversation_id),
            )
        if progress and (over or seen == total):
            progress(f"compacting: {seen}/{total} sessions looked at, {report.compacted} compacted")


def session_compact(
    *,
    conversation_id: int,
    count: int,
    report: MaintenanceReport,
    chat: Conversation | None = None,
) -> bool:
    """Fold the oldest overflow of one session into a recap. Returns whether it did.

    The summary is made with no transaction held (a model may be slow); the
    write then happens under the chat's row lock, and only if nothing moved.
    ``chat``, with its agent, is what the summary needs, read for a whole batch
    (:func:`sessions_compact`); without it, it is read here.
    """
    cap = report.max_entries
    keep_recent = cap - 1
    remove = count - keep_recent
    if count <= cap:
        return False
    if Turn.objects.filter(conversation_id=conversation_id, ended_at__isnull=True).exists():
        report.compaction_deferred += 1
        return False
    entries = Entry.objects.filter(conversation_id=conversation_id)
    cut = entries.order_by("seq").values_list("seq", flat=True)[remove - 1]
    if chat is None:
        chat = Conversation.objects.select_related("agent").get(pk=conversation_id)
    report.note(f"compact {chat.session_key}: {remove} entries into a recap")
    if report.dry_run:
        report.compacted += 1
        report.entries_removed += remove
        return True

    def read():
        return (
            SummaryLine(role, kind, text)
            for role, kind, text in entries.filter(seq__lte=cut)
            .order_by("seq")
            .values_list("role", "kind", "text")
            .iterator(chunk_size=500)
        )

    summary, summarizer = summarize(read, agent=chat.agent)

    with transaction.atomic():
        chat = Conversation.objects.lock(conversation_id)
        if Turn.objects.filter(conversation_id=conversation_id, ended_at__isnull=True).exists():
            report.compaction_deferred += 1
            return False
        # Re-read under the lock: another run (every runner starts one) may have compacted
        # this chat since ``count`` was taken. A stale count would fold the other run's
        # recap and entries the cap keeps, and summarise a recap again.
        counted = entries.aggregate(
            kept=Count("pk", filter=Q(seq__gt=cut)), folded=Count("pk", filter=Q(seq__lte=cut))
        )
        kept, folded = counted["kept"], counted["folded"]
        if kept + folded != count or kept > keep_recent or folded != remove:
            report.compaction_deferred += 1  # it moved while we summarized: next time
            return False
        entries.filter(seq__lte=cut).delete()
        Entry.objects.create(
            conversation_id=conversation_id,
            seq=cut,
            role=EntryRole.CONCH,
            kind=EntryKind.RECAP,
            text=summary,
            data={"compacted": remove, "through_seq": cut, "summarizer": summarizer},
        )
        events.publish_chat(chat, compacted=remove)
    report.compacted += 1
    report.entries_removed += remove
    return True


# ---------------------------------------------------------------------------
# Receipts and delivered replies


def records_prune(*, report: MaintenanceReport, batch: int = BATCH) -> None:
    """Inbound receipts (idempotency keys) and finished outbox rows past pruneAfter."""
    old = [
        InboundRecord.objects.filter(received_at__lt=report.prune_before),
        OutboxMessage.objects.filter(
            created_at__lt=report.prune_before, state__in=[OutboxState.SENT, OutboxState.FAILED]
        ),
    ]
    for rows in old:
        if report.dry_run:
            report.records_pruned += rows.count()
            continue
        # Unordered: the outbox's default ordering (created_at, id) made every batch sort
        # all the sent replies again. Each batch takes whichever old rows its index
        # (inbound_received, outbox_finished) finds first; the last batch's are gone.
        rows = rows.order_by()
        while ids := list(rows.values_list("pk", flat=True)[:batch]):
            if rows.model is OutboxMessage:  # its parts first: they hold no cascade
                SentPart.objects.filter(message_id__in=ids).delete()
            report.records_pruned += rows.model._default_manager.filter(pk__in=ids).delete()[0]
