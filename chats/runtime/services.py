"""Writes: starting, stepping, stopping and ending replies; chats and tasks.

Services are keyword-only and named ``<entity>_<action>``. Each keeps its
transactions short: never across a model call, a tool, a command or a sleep.
Events are published inside the transaction and sent after it commits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Max
from django.utils import timezone

from chats import events, processes
from chats.engines import engine_for
from chats.engines.base import Ask, End, EngineError, EngineInput, Fail, Line, Say, ToolCall
from chats.models import (
    TAINT_ORDER,
    Agent,
    Conversation,
    Effect,
    Entry,
    EntryKind,
    EntryRole,
    Lane,
    Mode,
    Origin,
    QueuedInput,
    StartedBy,
    Status,
    Step,
    Taint,
    Task,
    TaskState,
    Turn,
    TurnState,
    new_chain_id,
)
from chats.runtime import hooks
from chats.secrets import known_secrets, scrub_secrets
from chats.tools.registry import ToolContext, ToolError, get_tool, tools_offered, validate_args

log = logging.getLogger(__name__)

RESULT_LIMIT = 4_000
STREAM_LIMIT = 20_000  # the most of a reply's live words one event carries
CONCH_SYSTEM = (
    "You are an assistant working in Conch, in the folder this chat works in. "
    "Use the tools you are offered; say plainly what you changed."
)

STATUS_AFTER = {
    TurnState.COMPLETED: Status.IDLE,
    TurnState.NEEDS_YOU: Status.NEEDS_YOU,
    TurnState.STOPPED: Status.STOPPED,
    TurnState.FAILED: Status.IDLE,
    TurnState.INTERRUPTED: Status.STOPPED,
}

TASK_STATE_AFTER = {
    TurnState.COMPLETED: TaskState.DONE,
    TurnState.NEEDS_YOU: TaskState.UNVERIFIED,
    TurnState.STOPPED: TaskState.STOPPED,
    TurnState.FAILED: TaskState.FAILED,
    TurnState.INTERRUPTED: TaskState.INTERRUPTED,
}

ERR_TURN_NOT_RUNNING = "That reply isn't running."
ERR_NOTHING_TO_APPROVE = "That reply isn't waiting for your OK."
ERR_EMPTY_MESSAGE = "A message needs some words."
# What a command's step says when the command was ended before it finished.
ERR_COMMAND_STOPPED = "The reply was stopped, so its command was ended."
ERR_COMMAND_REPLY_ENDED = "The reply ended, so its command was ended."
ERR_COMMAND_SHUTDOWN = "Conch was shutting down, so the command was ended."
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


class ConchError(Exception):
    """A refusal a person or a tool can read; views turn it into a 400."""


# ---------------------------------------------------------------------------
# Small pieces used by several services


def default_agent() -> Agent:
    agent = Agent.objects.filter(is_default=True).first()
    if agent is None:
        workspace = Path(settings.CONCH_WORKSPACE)
        workspace.mkdir(parents=True, exist_ok=True)
        agent, _ = Agent.objects.get_or_create(
            slug="main", defaults={"name": "Conch", "workspace": str(workspace), "is_default": True}
        )
    return agent


def entry_append(
    *,
    conversation: Conversation,
    role: str,
    text: str,
    kind: str = EntryKind.MESSAGE,
    turn: Turn | None = None,
    data: dict[str, Any] | None = None,
) -> Entry:
    """Append one transcript line. Call inside ``atomic()``; the chat's row lock orders them."""
    last = Entry.objects.filter(conversation=conversation).aggregate(m=Max("seq"))["m"] or 0
    return Entry.objects.create(
        conversation=conversation,
        turn=turn,
        seq=last + 1,
        role=role,
        kind=kind,
        text=text,
        data=data or {},
    )


def _lock_chat(conversation_id: int) -> Conversation:
    # of=("self",): locking the joined agent row too would serialise every chat of a
    # persona across runners, and deadlock on PostgreSQL with a commit's deferred FK check.
    return (
        Conversation.objects.select_for_update(of=("self",))
        .select_related("agent")
        .get(pk=conversation_id)
    )


def _publish_chat(
    conversation: Conversation, event_type: str = events.CONVERSATION_UPDATED, **data: Any
) -> None:
    events.publish(
        event_type,
        owner_id=conversation.owner_id,
        conversation_id=conversation.public_id,
        data={"status": conversation.status, **data},
    )


def lane_for(conversation: Conversation) -> str:
    if conversation.origin == Origin.TASK:
        return Lane.SUBAGENT
    if conversation.origin == Origin.ROUTINE:
        return Lane.CRON
    return Lane.FOREGROUND


def taint_raise(*, conversation: Conversation, taint: str, why: str = "") -> bool:
    """Raise a chat's taint; it only ever grows. Returns whether it changed.

    Written with a conditional update so two raisers can't lower each other.
    """
    if TAINT_ORDER[Taint(taint)] <= TAINT_ORDER[Taint(conversation.taint)]:
        return False
    lower = [t for t, rank in TAINT_ORDER.items() if rank < TAINT_ORDER[Taint(taint)]]
    with transaction.atomic():
        changed = Conversation.objects.filter(pk=conversation.pk, taint__in=lower).update(
            taint=taint
        )
        if changed:
            conversation.taint = taint
            _publish_chat(conversation, taint=taint, why=why)
    return bool(changed)


# ---------------------------------------------------------------------------
# Chats


def conversation_create(
    *,
    owner,
    title: str,
    folder: str | None = None,
    agent: Agent | None = None,
    origin: str = Origin.OWN,
    origin_channel: str = "",
    mode: str = Mode.AUTO,
    inbound: str = "",
    script: list | None = None,
    parent: Conversation | None = None,
    taint: str = Taint.NONE,
    place: str = "local",
    session_key: str | None = None,
    public_id: str | None = None,
) -> Conversation:
    title = (title or "").strip()
    if not title:
        raise ConchError("A chat needs a title.")
    if len(title) > 120:
        raise ConchError("A chat's title is at most 120 characters.")
    agent = agent or default_agent()
    folder = folder or agent.workspace
    with transaction.atomic():
        conversation = Conversation.objects.create(
            owner=owner,
            agent=agent,
            title=title,
            folder=str(folder),
            origin=origin,
            origin_channel=origin_channel,
            mode=mode,
            inbound=inbound,
            script=script or [],
            parent=parent,
            taint=taint,
            place=place,
            session_key=session_key,
            **({"public_id": public_id} if public_id else {}),
        )
        _publish_chat(conversation)
    return conversation


def conversation_rename(*, conversation: Conversation, title: str) -> Conversation:
    title = (title or "").strip()
    if not title or len(title) > 120:
        raise ConchError("A chat's title must be 1 to 120 characters.")
    with transaction.atomic():
        conversation = _lock_chat(conversation.pk)
        conversation.title = title
        conversation.save(update_fields=["title", "updated_at"])
        _publish_chat(conversation)
    return conversation


def conversation_set_mode(*, conversation: Conversation, mode: str) -> Conversation:
    if mode not in Mode.values:
        raise ConchError(f"The mode must be one of: {', '.join(Mode.values)}.")
    with transaction.atomic():
        conversation = _lock_chat(conversation.pk)
        conversation.mode = mode
        conversation.save(update_fields=["mode", "updated_at"])
        _publish_chat(conversation)
    return conversation


def conversation_archive(*, conversation: Conversation, archived: bool = True) -> Conversation:
    with transaction.atomic():
        conversation = _lock_chat(conversation.pk)
        conversation.archived = archived
        conversation.save(update_fields=["archived", "updated_at"])
        _publish_chat(conversation)
    return conversation


def conversation_delete(*, conversation: Conversation) -> None:
    with transaction.atomic():
        conversation = _lock_chat(conversation.pk)
        for hook in list(hooks.before_delete_hooks):
            hook([conversation])
        open_turn = conversation.turns.filter(ended_at__isnull=True).first()
        if open_turn is not None:
            _turn_end_locked(conversation, open_turn, TurnState.STOPPED, "The chat was deleted.")
        owner_id, public_id = conversation.owner_id, conversation.public_id
        conversation.delete()
        events.publish(events.CONVERSATION_DELETED, owner_id=owner_id, conversation_id=public_id)


# ---------------------------------------------------------------------------
# Starting replies


def message_send(*, conversation: Conversation, text: str) -> Turn | QueuedInput:
    """The person's message: it starts a reply, or waits for the running one to end.

    A message during a running reply is queued for the next, never lost.
    """
    text = (text or "").strip()
    if not text:
        raise ConchError(ERR_EMPTY_MESSAGE)
    with transaction.atomic():
        conversation = _lock_chat(conversation.pk)
        if conversation.turns.filter(ended_at__isnull=True).exists():
            queued = QueuedInput.objects.create(conversation=conversation, text=text)
            _publish_chat(conversation, queued=True)
            return queued
        # Messages still queued (their reply was stopped) go first, so none is lost.
        text = "\n\n".join([*_queued_take_locked(conversation), text])
        return _turn_start_locked(conversation, started_by=StartedBy.PERSON, text=text)


def turn_start(
    *,
    conversation: Conversation,
    started_by: str,
    text: str = "",
    chain_id: str = "",
    unwatched: bool = False,
    role: str = EntryRole.PERSON,
    data: dict[str, Any] | None = None,
) -> Turn:
    """Start a reply. Raises ConchError if one is already open."""
    with transaction.atomic():
        conversation = _lock_chat(conversation.pk)
        if conversation.turns.filter(ended_at__isnull=True).exists():
            raise ConchError("That chat is already working on a reply.")
        return _turn_start_locked(
            conversation,
            started_by=started_by,
            text=text,
            chain_id=chain_id,
            unwatched=unwatched,
            role=role,
            data=data,
        )


def _turn_start_locked(
    conversation: Conversation,
    *,
    started_by: str,
    text: str = "",
    chain_id: str = "",
    unwatched: bool = False,
    role: str = EntryRole.PERSON,
    data: dict[str, Any] | None = None,
) -> Turn:
    """Precondition: inside ``atomic()`` holding the chat's row lock, with no open turn."""
    number = (conversation.turns.aggregate(m=Max("number"))["m"] or 0) + 1
    if started_by == StartedBy.PERSON or not chain_id:
        # A reply the person's own message started begins a chain of its own.
        chain_id = chain_id if started_by != StartedBy.PERSON and chain_id else new_chain_id()
    now = timezone.now()
    turn = Turn.objects.create(
        conversation=conversation,
        number=number,
        started_by=started_by,
        lane=lane_for(conversation),
        chain_id=chain_id,
        folder=conversation.folder,
        place=conversation.place,
        started_at=now,
        unwatched=unwatched,
    )
    if text:
        entry_append(conversation=conversation, role=role, text=text, turn=turn, data=data)
    conversation.status = Status.WORKING
    conversation.last_interaction_at = now
    conversation.save(update_fields=["status", "last_interaction_at", "updated_at"])
    _publish_chat(conversation, events.STATUS, turn=turn.number)
    events.publish(
        events.TURN_RUNNABLE, owner_id=conversation.owner_id, conversation_id=conversation.public_id
    )
    return turn


# ---------------------------------------------------------------------------
# Ending and stopping


def _turn_end_locked(conversation: Conversation, turn: Turn, state: str, reason: str = "") -> None:
    """Precondition: inside ``atomic()`` holding the chat's row lock."""
    now = timezone.now()
    Turn.objects.filter(pk=turn.pk).update(
        state=state,
        ended_at=now,
        end_reason=reason,
        step_family="",
        step_started_at=None,
        browser_open=False,  # a page read in this reply is open only until it ends
        claimed_by="",
        lease_until=None,
        pending_action=None if state != TurnState.NEEDS_YOU else turn.pending_action,
    )
    turn.state, turn.ended_at, turn.end_reason = state, now, reason
    conversation.status = STATUS_AFTER[TurnState(state)]
    conversation.last_interaction_at = now
    conversation.save(update_fields=["status", "last_interaction_at", "updated_at"])
    _publish_chat(conversation, events.STATUS, turn=turn.number, ended=state)
    task = Task.objects.filter(chat=conversation).first()
    # Only the reply the task started ends it: a person's reply in a task chat still
    # waiting for room is not the task's.
    if task is not None and task.state == TaskState.RUNNING:
        task.state = TASK_STATE_AFTER[TurnState(state)]
        task.ended_at = now
        if state == TurnState.COMPLETED:
            last = conversation.entries.filter(
                role=EntryRole.ASSISTANT, kind=EntryKind.MESSAGE
            ).last()
            task.result = last.text if last else ""
        else:
            task.reason = reason or f"The task's reply ended: {TurnState(state).label}."
        task.save(update_fields=["state", "ended_at", "result", "reason"])
        events.publish(
            events.TASK_CHANGED,
            owner_id=conversation.owner_id,
            conversation_id=task.parent.public_id,
            data={"task": task.public_id, "state": task.state},
        )
    ended = turn
    transaction.on_commit(lambda: _after_turn_end(ended))


def _after_turn_end(turn: Turn) -> None:
    # A command the reply was running in this process ends with it; a runner in
    # another process sees the ending at its next look (``_command_interrupted``).
    processes.commands_stop(
        turn_id=turn.pk,
        reason=ERR_COMMAND_STOPPED if turn.state == TurnState.STOPPED else ERR_COMMAND_REPLY_ENDED,
    )
    for hook in list(hooks.turn_end_hooks):
        try:
            hook(turn)
        except Exception:
            log.exception("turn-end hook failed for %s", turn)
    # This runs after the commit, in whoever committed: a failure here must not
    # reach them. The runner's sweeps start queued tasks and replies it missed.
    try:
        if turn.conversation.origin == Origin.TASK:
            tasks_make_room()
        if turn.state != TurnState.STOPPED:
            _take_queued_inputs(turn.conversation_id)
    except Exception:
        log.exception("starting what waited for %s failed", turn)


def _take_queued_inputs(conversation_id: int) -> Turn | None:
    """Start the next reply with the person's queued messages, if any."""
    with transaction.atomic():
        conversation = _lock_chat(conversation_id)
        if conversation.turns.filter(ended_at__isnull=True).exists():
            return None
        texts = _queued_take_locked(conversation)
        if not texts:
            return None
        return _turn_start_locked(
            conversation, started_by=StartedBy.PERSON, text="\n\n".join(texts)
        )


def _queued_take_locked(conversation: Conversation) -> list[str]:
    """Mark the chat's queued messages taken; their texts, oldest first. Hold the chat's lock."""
    queued = list(conversation.queued_inputs.filter(taken_at__isnull=True))
    QueuedInput.objects.filter(pk__in=[q.pk for q in queued]).update(taken_at=timezone.now())
    return [q.text for q in queued]


def turn_end(*, turn: Turn, state: str, reason: str = "") -> None:
    with transaction.atomic():
        conversation = _lock_chat(turn.conversation_id)
        current = Turn.objects.get(pk=turn.pk)
        if current.ended_at is not None:
            return
        _turn_end_locked(conversation, current, state, reason)


def conversation_stop(
    *, conversation: Conversation, by: str = "person", reason: str = "", note: str = ""
) -> Turn | None:
    """Stop a chat's open reply. Returns the stopped turn, or None if nothing was open.

    The runner notices at its next step boundary. A command the reply is
    running is ended, with everything it started (SIGTERM, then SIGKILL after a
    short grace), and its step records that; any other step already running
    finishes and is recorded, since its files really changed. ``note`` is what
    the chat's transcript says about it (by default, "Stopped: <reason>").
    """
    with transaction.atomic():
        conversation = _lock_chat(conversation.pk)
        turn = conversation.turns.filter(ended_at__isnull=True).first()
        if turn is None:
            return None
        why = reason or ("You stopped it." if by == "person" else f"Stopped by {by}.")
        _turn_end_locked(conversation, turn, TurnState.STOPPED, why)
        entry_append(
            conversation=conversation,
            role=EntryRole.CONCH,
            kind=EntryKind.NOTE,
            turn=turn,
            text=note or f"Stopped: {why}",
            data={"stopped_by": by},
        )
        return turn


def turn_approve(*, turn: Turn) -> Turn:
    return _answer_pending(turn, approved=True)


def turn_deny(*, turn: Turn) -> Turn:
    return _answer_pending(turn, approved=False)


def _answer_pending(turn: Turn, *, approved: bool) -> Turn:
    with transaction.atomic():
        conversation = _lock_chat(turn.conversation_id)
        turn = Turn.objects.get(pk=turn.pk)
        if (
            turn.state != TurnState.NEEDS_YOU
            or not turn.pending_action
            or turn.ended_at is not None
        ):
            raise ConchError(ERR_NOTHING_TO_APPROVE)
        pending = {**turn.pending_action, "answer": "approved" if approved else "denied"}
        Turn.objects.filter(pk=turn.pk).update(
            state=TurnState.RUNNING, pending_action=pending, claimed_by=""
        )
        turn.state, turn.pending_action = TurnState.RUNNING, pending
        conversation.status = Status.WORKING
        conversation.save(update_fields=["status", "updated_at"])
        _publish_chat(conversation, events.STATUS, turn=turn.number, answer=pending["answer"])
        events.publish(
            events.TURN_RUNNABLE,
            owner_id=conversation.owner_id,
            conversation_id=conversation.public_id,
        )
    return turn


# ---------------------------------------------------------------------------
# Stepping


@dataclass
class Advance:
    """What one call of :func:`turn_advance` did."""

    more: bool
    action: str = ""


def system_text_for(conversation: Conversation) -> str:
    """Static for the life of a session: it never mentions other chats' comings and goings."""
    parts = [CONCH_SYSTEM]
    if conversation.agent.system_text:
        parts.append(conversation.agent.system_text)
    parts.extend(text for _, text in hooks.system_sections)
    return "\n\n".join(parts)


def _transcript_loader(conversation: Conversation):
    def load() -> tuple[Line, ...]:
        """The entries in order and, where each happened, every step with its result.

        A step goes before the first entry written after it started, as the page shows it.
        """
        numbers = dict(conversation.turns.values_list("pk", "number"))
        steps = [
            (
                s.started_at,
                Line(
                    role=EntryRole.TOOL,
                    kind="step",
                    text=s.error or s.result,
                    data={"tool": s.tool, "args": s.args, "step": s.number, "error": bool(s.error)},
                    turn=numbers.get(s.turn_id),
                ),
            )
            for s in Step.objects.filter(turn__conversation=conversation).order_by(
                "started_at", "turn_id", "number"
            )
        ]
        lines: list[Line] = []
        i = 0
        for e in conversation.entries.order_by("seq"):
            while i < len(steps) and steps[i][0] <= e.created_at:
                lines.append(steps[i][1])
                i += 1
            turn = numbers.get(e.turn_id)
            lines.append(Line(role=e.role, kind=e.kind, text=e.text, data=e.data, turn=turn))
        lines.extend(line for _, line in steps[i:])
        return tuple(lines)

    return load


def _text_streamer(turn: Turn, worker: str):
    """What a model engine calls with the reply's words so far: a ``reply.text`` event.

    Nothing is stored: the words are an entry once the engine has chosen its
    action. Returns False once the reply is no longer this worker's to run.
    """

    def push(text: str) -> bool:
        if not _still_mine(turn.pk, worker):
            return False
        if len(text) > STREAM_LIMIT:
            text = "…" + text[-STREAM_LIMIT:]
        events.publish(
            events.REPLY_TEXT,
            owner_id=turn.conversation.owner_id,
            conversation_id=turn.conversation.public_id,
            data={"turn": turn.number, "text": text},
        )
        return True

    return push


def _gather_notes(turn: Turn, at_start: bool) -> list[str]:
    notes: list[str] = []
    for provider in list(hooks.note_providers):
        notes.extend(note.text for note in provider(turn, at_start))
    return notes


def _scrub_args(args: Any) -> Any:
    """A step's arguments as they are stored and shown: keys and passwords out, long text cut."""
    if isinstance(args, dict):
        return {key: _scrub_args(value) for key, value in args.items()}
    if isinstance(args, list):
        return [_scrub_args(value) for value in args]
    if isinstance(args, str):
        value = scrub_secrets(args)
        return value if len(value) <= 2_000 else value[:2_000] + f"… ({len(value)} characters)"
    return args


def turn_advance(*, turn_id: int, worker: str, honour_delays: bool = True) -> Advance:
    """Play one action of a claimed, running turn. Returns whether there is more to do.

    Precondition: ``worker`` holds the turn's claim. No transaction is held
    while the engine chooses or the tool runs.
    """
    turn = (
        Turn.objects.select_related("conversation", "conversation__agent")
        .filter(pk=turn_id)
        .first()
    )
    if turn is None:  # its chat was deleted
        return Advance(False)
    if turn.state != TurnState.RUNNING or turn.ended_at is not None or turn.claimed_by != worker:
        return Advance(False)
    conversation = turn.conversation

    pending = turn.pending_action or {}
    if pending.get("answer"):
        return _play_answered(turn, worker, pending)

    at_start = not turn.engine_state.get("started")
    if at_start:
        for hook in list(hooks.turn_start_hooks):
            hook(turn)
        conversation.refresh_from_db()
    notes = _gather_notes(turn, at_start)
    if notes:
        with transaction.atomic():
            _lock_chat(conversation.pk)
            step_number = turn.steps.count()
            for text in notes:
                entry_append(
                    conversation=conversation,
                    role=EntryRole.CONCH,
                    kind=EntryKind.NOTE,
                    turn=turn,
                    text=text,
                    data={"at": "start" if at_start else "step", "step": step_number},
                )
    engine_state = {**turn.engine_state, "started": True}
    try:
        engine = engine_for(conversation.agent)
        decision = engine.next_action(
            EngineInput(
                conversation=conversation,
                turn=turn,
                system_text=system_text_for(conversation),
                load_transcript=_transcript_loader(conversation),
                notes=tuple(notes),
                tools=tuple(tools_offered(conversation)),
                state=engine_state,
                on_text=_text_streamer(turn, worker),
            )
        )
    except EngineError as exc:
        turn_end(turn=turn, state=TurnState.FAILED, reason=str(exc))
        return Advance(False, "fail")
    if decision.delay and honour_delays:
        time.sleep(decision.delay)
    new_state = {**decision.state, "started": True}
    action = decision.action

    if isinstance(action, ToolCall):
        return _play_tool(turn, worker, action, new_state)
    if isinstance(action, Say):
        with transaction.atomic():
            conversation = _lock_chat(conversation.pk)
            if not _still_mine(turn.pk, worker):
                return Advance(False)
            entry_append(
                conversation=conversation, role=EntryRole.ASSISTANT, text=action.text, turn=turn
            )
            Turn.objects.filter(pk=turn.pk).update(engine_state=new_state)
            _publish_chat(conversation, turn=turn.number)
        return Advance(True, "say")
    if isinstance(action, Ask):
        with transaction.atomic():
            conversation = _lock_chat(conversation.pk)
            if not _still_mine(turn.pk, worker):
                return Advance(False)
            entry_append(
                conversation=conversation,
                role=EntryRole.ASSISTANT,
                text=action.text,
                turn=turn,
                data={"question": True},
            )
            Turn.objects.filter(pk=turn.pk).update(engine_state=new_state)
            _turn_end_locked(conversation, turn, TurnState.NEEDS_YOU, "It asked you a question.")
        return Advance(False, "ask")
    if isinstance(action, Fail):
        turn_end(turn=turn, state=TurnState.FAILED, reason=action.reason)
        return Advance(False, "fail")
    if isinstance(action, End):
        with transaction.atomic():
            conversation = _lock_chat(conversation.pk)
            if not _still_mine(turn.pk, worker):
                return Advance(False)
            if action.text:
                entry_append(
                    conversation=conversation, role=EntryRole.ASSISTANT, text=action.text, turn=turn
                )
            Turn.objects.filter(pk=turn.pk).update(engine_state=new_state)
            _turn_end_locked(conversation, turn, TurnState.COMPLETED)
        return Advance(False, "end")
    raise EngineError(f"Unknown action {action!r}")


def _still_mine(turn_pk: int, worker: str) -> bool:
    return Turn.objects.filter(
        pk=turn_pk, state=TurnState.RUNNING, ended_at__isnull=True, claimed_by=worker
    ).exists()


def _play_tool(turn: Turn, worker: str, call: ToolCall, new_state: dict[str, Any]) -> Advance:
    conversation = turn.conversation
    try:
        tool = get_tool(call.tool)
        if tool not in tools_offered(conversation):
            raise ToolError(f"The tool {call.tool!r} isn't offered to this chat.")
        args = validate_args(tool, call.args)
    except ToolError as exc:
        _record_refused_step(turn, worker, call, str(exc), new_state)
        return Advance(True, "tool")

    if tool.must_ask(conversation):
        with transaction.atomic():
            conversation = _lock_chat(conversation.pk)
            if not _still_mine(turn.pk, worker):
                return Advance(False)
            pending = {
                "tool": tool.name,
                "args": _scrub_args(args),
                "state_after": new_state,
                "raw_args": args,
            }
            Turn.objects.filter(pk=turn.pk).update(
                state=TurnState.NEEDS_YOU,
                pending_action=pending,
                claimed_by="",
                lease_until=None,
                step_family="",
                step_started_at=None,
            )
            conversation.status = Status.NEEDS_YOU
            conversation.save(update_fields=["status", "updated_at"])
            _publish_chat(conversation, events.STATUS, turn=turn.number, asks=tool.name)
        return Advance(False, "needs_you")
    _run_step(turn, worker, tool, args, new_state)
    return Advance(True, "tool")


def _play_answered(turn: Turn, worker: str, pending: dict[str, Any]) -> Advance:
    tool = get_tool(pending["tool"])
    state_after = pending["state_after"]
    if pending["answer"] == "approved":
        _run_step(turn, worker, tool, pending["raw_args"], state_after, clear_pending=True)
    else:
        _record_refused_step(
            turn,
            worker,
            ToolCall(tool.name, pending["raw_args"]),
            "The person said no to this.",
            state_after,
            clear_pending=True,
        )
    return Advance(True, "tool")


def _record_refused_step(
    turn: Turn,
    worker: str,
    call: ToolCall,
    error: str,
    new_state: dict[str, Any],
    *,
    clear_pending: bool = False,
) -> None:
    try:
        tool = get_tool(call.tool)
        family, effect = tool.family, tool.effect
    except ToolError:
        family, effect = "", Effect.READ
    with transaction.atomic():
        conversation = _lock_chat(turn.conversation_id)
        if not _still_mine(turn.pk, worker):
            return
        now = timezone.now()
        Step.objects.create(
            turn=turn,
            number=turn.steps.count() + 1,
            tool=call.tool,
            family=family,
            effect=effect,
            args=_scrub_args(call.args if isinstance(call.args, dict) else {}),
            error=error,
            started_at=now,
            ended_at=now,
        )
        update: dict[str, Any] = {"engine_state": new_state}
        if clear_pending:
            update["pending_action"] = None
        Turn.objects.filter(pk=turn.pk).update(**update)
        _publish_chat(conversation, turn=turn.number)


def _run_step(
    turn: Turn,
    worker: str,
    tool,
    args: dict[str, Any],
    new_state: dict[str, Any],
    *,
    clear_pending: bool = False,
) -> None:
    conversation = turn.conversation
    with transaction.atomic():
        conversation = _lock_chat(conversation.pk)
        if not _still_mine(turn.pk, worker):
            return
        now = timezone.now()
        step = Step.objects.create(
            turn=turn,
            number=turn.steps.count() + 1,
            tool=tool.name,
            family=tool.family,
            effect=tool.effect,
            args=_scrub_args(args),
            started_at=now,
        )
        Turn.objects.filter(pk=turn.pk).update(step_family=tool.family, step_started_at=now)
        _publish_chat(conversation, turn=turn.number, step=step.number, family=tool.family)

    ctx = ToolContext(
        conversation=conversation,
        turn=turn,
        folder=turn.folder,
        step_id=step.pk,
        worker=worker,
        interrupted=lambda: _command_interrupted(turn.pk, worker),
    )
    error = ""
    result_text = ""
    try:
        result = tool.run(ctx, args)
        result_text = result.text
    except ToolError as exc:
        error = str(exc)
    except Exception as exc:  # a tool's bug is the reply's problem, never the runner's
        log.exception("tool %s failed", tool.name)
        error = f"The tool failed: {exc.__class__.__name__}: {exc}"
    changed = list(dict.fromkeys(ctx.files_changed))
    # What is stored is what the model reads next and what other chats may quote:
    # keys and passwords go before it is kept (and before it is cut).
    known = known_secrets(conversation.agent)
    result_text = scrub_secrets(result_text, known=known)
    error = scrub_secrets(error, known=known)

    with transaction.atomic():
        try:
            conversation = _lock_chat(conversation.pk)
        except Conversation.DoesNotExist:
            return  # the chat was deleted while the tool ran (its command was ended)
        Step.objects.filter(pk=step.pk).update(
            result=result_text[:RESULT_LIMIT],
            error=error[:RESULT_LIMIT],
            files=changed,
            ended_at=timezone.now(),
        )
        current = Turn.objects.get(pk=turn.pk)
        files = list(current.files_changed)
        files.extend(path for path in changed if path not in files)
        update: dict[str, Any] = {
            "files_changed": files,
            "step_family": "",
            "step_started_at": None,
        }
        if current.state == TurnState.RUNNING and current.claimed_by == worker:
            update["engine_state"] = new_state
            if clear_pending:
                update["pending_action"] = None
        Turn.objects.filter(pk=turn.pk).update(**update)
        if ctx.let_go and current.state == TurnState.RUNNING and current.claimed_by == worker:
            # The reply lets go of its turn (wait_for): it ends here and carries on when woken.
            current.files_changed = files
            _turn_end_locked(conversation, current, TurnState.COMPLETED, ctx.let_go)
        _publish_chat(conversation, turn=turn.number, step=step.number, files=changed)


def _command_interrupted(turn_pk: int, worker: str) -> str:
    """Why a command this worker runs for the turn must end now, or "" if it may go on.

    Asked every half second while a command runs: a Stop pressed in another
    server process changes only the database.
    """
    try:
        row = Turn.objects.filter(pk=turn_pk).values_list("state", "claimed_by").first()
    except DatabaseError:  # a blip must not end a long command: look again next time
        log.warning("could not look whether turn %s still runs", turn_pk, exc_info=True)
        return ""
    if row is None:
        return ERR_COMMAND_REPLY_ENDED  # the chat was deleted
    state, claimed_by = row
    if state == TurnState.STOPPED:
        return ERR_COMMAND_STOPPED
    if state != TurnState.RUNNING or claimed_by != worker:
        return ERR_COMMAND_REPLY_ENDED
    return ""


def step_record_command(
    *, step_id: int, process_group: int, process_mark: str, sandboxed: bool
) -> None:
    """Write down a command's process group as it starts, so a restart can find it."""
    Step.objects.filter(pk=step_id).update(
        process_group=process_group, process_mark=process_mark, sandboxed=sandboxed
    )


# ---------------------------------------------------------------------------
# Claims, leases and recovery


def turn_claim(*, worker: str, limit: int, lanes: Iterable[str] | None = None) -> list[int]:
    """Claim up to ``limit`` runnable turns for ``worker``. Each turn is claimed once.

    On PostgreSQL ``skip_locked`` lets workers pass each other's candidates;
    the conditional update is what makes a claim exclusive on every database.
    """
    if limit <= 0:
        return []
    lease = timezone.now() + timezone.timedelta(seconds=settings.CONCH_TURN_LEASE_SECONDS)
    claimed: list[int] = []
    with transaction.atomic():
        candidates = Turn.objects.filter(
            state=TurnState.RUNNING, ended_at__isnull=True, claimed_by=""
        )
        if lanes is not None:
            candidates = candidates.filter(lane__in=list(lanes))
        ids = list(
            candidates.select_for_update(skip_locked=True)
            .order_by("started_at", "pk")
            .values_list("pk", flat=True)[: limit * 2]
        )
        cron_room = (
            settings.CONCH_CRON_LANE
            - Turn.objects.filter(lane=Lane.CRON, ended_at__isnull=True, state=TurnState.RUNNING)
            .exclude(claimed_by="")
            .count()
        )
        for pk in ids:
            if len(claimed) >= limit:
                break
            lane = Turn.objects.filter(pk=pk).values_list("lane", flat=True).first()
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
    lease = timezone.now() + timezone.timedelta(seconds=settings.CONCH_TURN_LEASE_SECONDS)
    return bool(
        Turn.objects.filter(
            pk=turn_id, claimed_by="", state=TurnState.RUNNING, ended_at__isnull=True
        ).update(claimed_by=worker, lease_until=lease)
    )


def turn_renew_lease(*, turn_id: int, worker: str) -> bool:
    lease = timezone.now() + timezone.timedelta(seconds=settings.CONCH_TURN_LEASE_SECONDS)
    return bool(Turn.objects.filter(pk=turn_id, claimed_by=worker).update(lease_until=lease))


def turn_renew_leases(*, turn_ids: list[int], worker: str) -> int:
    """Renew every lease this worker holds among ``turn_ids``: one query."""
    lease = timezone.now() + timezone.timedelta(seconds=settings.CONCH_TURN_LEASE_SECONDS)
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
        conversation = _lock_chat(turn.conversation_id)
        turn = Turn.objects.get(pk=turn.pk)
        if turn.state != TurnState.RECOVERY_PENDING:
            return turn
        if cut_off is not None and cut_off.effect == Effect.WRITE:
            Step.objects.filter(pk=cut_off.pk).update(ended_at=timezone.now(), error=cut_off_error)
            entry_append(
                conversation=conversation,
                role=EntryRole.CONCH,
                kind=EntryKind.NOTE,
                turn=turn,
                text=f"Conch restarted while “{cut_off.tool}” was running. It was not run again, "
                "so the reply stopped here.",
                data={"recovery": "interrupted"},
            )
            _turn_end_locked(
                conversation, turn, TurnState.INTERRUPTED, "Conch restarted during a write step."
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
            _publish_chat(conversation, events.STATUS, turn=turn.number, recovered=True)
            events.publish(
                events.TURN_RUNNABLE,
                owner_id=conversation.owner_id,
                conversation_id=conversation.public_id,
            )
        turn.refresh_from_db()
    return turn


# ---------------------------------------------------------------------------
# Tasks and room


def task_start(
    *, parent: Conversation, title: str, prompt: str = "", script: list | None = None
) -> Task:
    title = (title or "").strip()[:120]
    if not title:
        raise ConchError("A task needs a title.")
    with transaction.atomic():
        chat = conversation_create(
            owner=parent.owner,
            title=title,
            folder=parent.folder,
            agent=parent.agent,
            origin=Origin.TASK,
            mode=parent.mode if parent.mode != Mode.PLAN else Mode.ASK,
            script=script,
            parent=parent,
            taint=parent.taint,
            place=parent.place,
        )
        task = Task.objects.create(parent=parent, chat=chat, title=title, prompt=prompt)
        events.publish(
            events.TASK_CHANGED,
            owner_id=parent.owner_id,
            conversation_id=parent.public_id,
            data={"task": task.public_id, "state": task.state},
        )
    tasks_make_room()
    task.refresh_from_db()
    return task


def tasks_make_room() -> list[Task]:
    """Start queued tasks while the subagent lane has room; the rest wait for room."""
    started: list[Task] = []
    with transaction.atomic():
        running = Task.objects.select_for_update().filter(state=TaskState.RUNNING).count()
        room = settings.CONCH_SUBAGENT_LANE - running
        waiting = list(
            Task.objects.select_for_update(skip_locked=True)
            .filter(state__in=[TaskState.QUEUED, TaskState.WAITING_FOR_ROOM])
            .select_related("chat", "parent")
            .order_by("created_at", "pk")
        )
        for task in waiting:
            if task.chat is None:
                continue
            if room > 0 and task.chat.turns.filter(ended_at__isnull=True).exists():
                # Someone is talking with the task's chat; it starts when that reply ends.
                continue
            if room > 0:
                room -= 1
                task.state = TaskState.RUNNING
                task.started_at = timezone.now()
                task.save(update_fields=["state", "started_at"])
                parent_turn = task.parent.turns.order_by("-number").first()
                chat = _lock_chat(task.chat.pk)
                _turn_start_locked(
                    chat,
                    started_by=StartedBy.TASK,
                    text=task.prompt or task.title,
                    chain_id=parent_turn.chain_id if parent_turn else "",
                    role=EntryRole.CONCH,
                )
                started.append(task)
            elif task.state != TaskState.WAITING_FOR_ROOM:
                task.state = TaskState.WAITING_FOR_ROOM
                task.save(update_fields=["state"])
            else:
                continue
            events.publish(
                events.TASK_CHANGED,
                owner_id=task.parent.owner_id,
                conversation_id=task.parent.public_id,
                data={"task": task.public_id, "state": task.state},
            )
    return started
