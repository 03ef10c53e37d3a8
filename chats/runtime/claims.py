"""Claims, leases and recovery: each runnable reply is run by exactly one runner.

A runner claims a turn with a row lock and a conditional update, renews its
lease while it drives it, and releases it when it stops. A runner that died
leaves claims whose leases run out; :func:`turns_recover` picks those replies
up again, or ends them when running a step again could do a write twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from chats import events, processes
from chats.models import (
    Conversation,
    Effect,
    EntryKind,
    EntryRole,
    Lane,
    Step,
    Turn,
    TurnState,
)
from chats.quoting import conch_words
from chats.runtime.chats import entry_append
from chats.runtime.lanes import lane_lock
from chats.runtime.turns import turn_end_locked
from chats.toolsets import MCP_PREFIX

ERR_COMMAND_ENDED_AFTER_RESTART = (
    "Conch stopped while this command ran. After the restart, Conch ended what the "
    "command had left running; it was not run again."
)
ERR_COMMAND_GONE_AT_RESTART = (
    "Conch stopped while this command ran, and the command had ended with it; it was not run again."
)
ERR_COMMAND_ELSEWHERE = (
    "Conch stopped while this command ran on another computer ({host}); it may still be "
    "running there, and it was not run again."
)
ERR_WRITE_CUT_OFF = "Conch stopped while this step ran; it was not run again."


def turn_claim(*, worker: str, limit: int, lanes: Iterable[str] | None = None) -> list[int]:
    """Claim up to ``limit`` runnable turns for ``worker``. Each turn is claimed once.

    On PostgreSQL ``skip_locked`` lets workers pass each other's candidates;
    the conditional update is what makes a claim exclusive on every database.
    """
    if limit <= 0:
        return []
    lease = timezone.now() + timedelta(seconds=settings.CONCH_TURN_LEASE_SECONDS)
    claimed: list[int] = []
    with transaction.atomic():
        candidates = Turn.objects.filter(
            state=TurnState.RUNNING, ended_at__isnull=True, claimed_by=""
        )
        if lanes is not None:
            candidates = candidates.filter(lane__in=list(lanes))
        found = list(
            candidates.select_for_update(skip_locked=True)
            .order_by("started_at", "pk")
            .values_list("pk", "lane")[: limit * 2]
        )
        cron_room = 0
        if any(lane == Lane.CRON for _, lane in found):
            lane_lock(Lane.CRON)  # counted by one runner at a time, each seeing the last's claims
            cron_room = (
                settings.CONCH_CRON_LANE
                - Turn.objects.filter(
                    lane=Lane.CRON, ended_at__isnull=True, state=TurnState.RUNNING
                )
                .exclude(claimed_by="")
                .count()
            )
        for pk, lane in found:
            if len(claimed) >= limit:
                break
            if lane == Lane.CRON:
                if cron_room <= 0:
                    continue
                cron_room -= 1
            got = Turn.objects.filter(pk=pk, claimed_by="", state=TurnState.RUNNING).update(
                claimed_by=worker, lease_until=lease
            )
            if got:
                claimed.append(pk)
    return claimed


def turn_claim_one(*, turn_id: int, worker: str) -> bool:
    """Claim one particular runnable turn; False if it isn't runnable or is someone else's.

    The conditional update is what makes the claim exclusive, as in ``turn_claim``.
    """
    lease = timezone.now() + timedelta(seconds=settings.CONCH_TURN_LEASE_SECONDS)
    return bool(
        Turn.objects.filter(
            pk=turn_id, claimed_by="", state=TurnState.RUNNING, ended_at__isnull=True
        ).update(claimed_by=worker, lease_until=lease)
    )


def turn_renew_lease(*, turn_id: int, worker: str) -> bool:
    lease = timezone.now() + timedelta(seconds=settings.CONCH_TURN_LEASE_SECONDS)
    return bool(Turn.objects.filter(pk=turn_id, claimed_by=worker).update(lease_until=lease))


def turn_renew_leases(*, turn_ids: list[int], worker: str) -> int:
    """Renew every lease this worker holds among ``turn_ids``: one query."""
    lease = timezone.now() + timedelta(seconds=settings.CONCH_TURN_LEASE_SECONDS)
    return Turn.objects.filter(pk__in=turn_ids, claimed_by=worker).update(lease_until=lease)


def turn_release(*, turn_id: int, worker: str) -> None:
    Turn.objects.filter(pk=turn_id, claimed_by=worker, state=TurnState.RUNNING).update(
        claimed_by="", lease_until=None
    )


def turns_recover(*, orphaned_only: bool = False) -> list[Turn]:
    """Find replies that were running when their runner died, and pick them up or end them.

    With ``orphaned_only`` (a worker among others) only turns whose lease ran
    out count; at a lone server's start every claimed turn is an orphan.
    Each becomes ``recovery_pending`` first, so it never reads as finished,
    then is resumed, unless a write step was cut off mid-run: that one is
    marked interrupted, since running it again could do a write twice.
    """
    now = timezone.now()
    claimed = Turn.objects.filter(ended_at__isnull=True, state=TurnState.RUNNING).exclude(
        claimed_by=""
    )
    if orphaned_only:
        claimed = claimed.filter(lease_until__lt=now)
    for pk in list(claimed.values_list("pk", flat=True)):
        Turn.objects.filter(pk=pk, ended_at__isnull=True, state=TurnState.RUNNING).exclude(
            claimed_by=""
        ).update(state=TurnState.RECOVERY_PENDING, claimed_by="", lease_until=None)
    recovered = []
    for turn in Turn.objects.filter(
        state=TurnState.RECOVERY_PENDING, ended_at__isnull=True
    ).select_related("conversation"):
        recovered.append(_recover_one(turn))
    return recovered


def _cut_off_command_end(step: Step) -> str:
    """End what a cut-off command left running, if it is still ours; the step's error."""
    found = processes.group_end_recorded(step.process_group, step.process_mark)
    if found == processes.ENDED:
        return ERR_COMMAND_ENDED_AFTER_RESTART
    if found == processes.ELSEWHERE:
        return ERR_COMMAND_ELSEWHERE.format(host=step.process_mark.split(" ")[0])
    if found == processes.GONE:
        return ERR_COMMAND_GONE_AT_RESTART
    return ERR_WRITE_CUT_OFF


def _recover_one(turn: Turn) -> Turn:
    cut_off = turn.steps.filter(ended_at__isnull=True).order_by("-number").first()
    cut_off_error = ERR_WRITE_CUT_OFF
    if cut_off is not None and cut_off.process_group:
        # Outside the transaction: ending a group waits up to its grace.
        cut_off_error = _cut_off_command_end(cut_off)
    with transaction.atomic():
        conversation = Conversation.objects.lock(turn.conversation_id)
        turn = Turn.objects.get(pk=turn.pk)
        if turn.state != TurnState.RECOVERY_PENDING:
            return turn
        # A call to an MCP server's tool is never made twice, whatever the server says of
        # it: its readOnlyHint is only a hint, and the call may have been half done.
        cut_off_mcp = cut_off is not None and cut_off.tool.startswith(MCP_PREFIX)
        if cut_off is not None and (cut_off.effect == Effect.WRITE or cut_off_mcp):
            Step.objects.filter(pk=cut_off.pk).update(ended_at=timezone.now(), error=cut_off_error)
            entry_append(
                conversation=conversation,
                role=EntryRole.CONCH,
                kind=EntryKind.NOTE,
                turn=turn,
                text=conch_words(
                    "Conch restarted while “{tool}” was running. It was not run again, "
                    "so the reply stopped here.",
                    tool=cut_off.tool,
                ),
                data={"recovery": "interrupted"},
            )
            turn_end_locked(
                conversation=conversation,
                turn=turn,
                state=TurnState.INTERRUPTED,
                reason="Conch restarted during a call to an MCP server's tool."
                if cut_off_mcp
                else "Conch restarted during a write step.",
            )
        else:
            if cut_off is not None:
                Step.objects.filter(pk=cut_off.pk).update(
                    ended_at=timezone.now(),
                    error="Conch restarted while this step ran; it is read again.",
                )
                # The engine's state only moves when a step ends, so a read
                # step that was cut off is simply played again.
            Turn.objects.filter(pk=turn.pk).update(
                state=TurnState.RUNNING, claimed_by="", lease_until=None
            )
            entry_append(
                conversation=conversation,
                role=EntryRole.CONCH,
                kind=EntryKind.NOTE,
                turn=turn,
                text="Conch restarted during this reply and picked it up again.",
                data={"recovery": "resumed"},
            )
            events.publish_chat(conversation, events.STATUS, turn=turn.number, recovered=True)
        turn.refresh_from_db()
    return turn
