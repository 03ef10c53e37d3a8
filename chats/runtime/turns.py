"""Replies and tasks: starting, ending, stopping and answering replies; starting tasks when there is room.

Each service takes the chat's row lock (``Conversation.objects.lock``) for its
short transaction; the ``*_locked`` ones expect their caller to hold it.
A reply's ending runs the turn-end hooks (``chats.hooks``) after it commits.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from chats import events, hooks, processes
from chats.limits import LIMITS
from chats.models import (
    Conversation,
    Entry,
    EntryKind,
    EntryRole,
    Lane,
    Mode,
    Origin,
    QueuedInput,
    StartedBy,
    Status,
    Task,
    TaskState,
    Turn,
    TurnState,
    new_chain_id,
)
from chats.quoting import conch_note, not_as_conch, plain_list
from chats.runtime.chats import (
    ConchError,
    conversation_create,
    conversation_title_from_first_message,
    entry_append,
)
from chats.runtime.lanes import lane_lock
from chats.runtime.standing import ERR_NOT_OFFERED, standing_ok_give_locked, standing_ok_offer
from chats.taint import Cause
from chats.tools.registry import get_tool
from conch.rows import model_insert

log = logging.getLogger(__name__)

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
ERR_QUEUED_TAKEN = "Too late to cancel: the reply already took that message."
ERR_QUEUED_GONE = "That message is no longer queued."
ERR_AGAIN_WHILE_OPEN = "Wait for this reply to end, or stop it, before you retry or edit."
ERR_AGAIN_NOT_YOURS = (
    "Only a reply to your own last message can be retried, and only that message edited."
)
ERR_AGAIN_STALE = "That is no longer the last reply: the page has caught up, have a look."
# What a command's step says when the command was ended before it finished.
ERR_COMMAND_STOPPED = "The reply was stopped, so its command was ended."
ERR_COMMAND_REPLY_ENDED = "The reply ended, so its command was ended."
ERR_COMMAND_SHUTDOWN = "Conch was shutting down, so the command was ended."


def lane_for(conversation: Conversation) -> str:
    if conversation.origin == Origin.TASK:
        return Lane.SUBAGENT
    if conversation.origin == Origin.ROUTINE:
        return Lane.CRON
    return Lane.FOREGROUND


def conversation_delete(*, conversation: Conversation) -> None:
    with transaction.atomic():
        conversation = Conversation.objects.lock(conversation.pk)
        for hook in list(hooks.before_delete_hooks):
            hook([conversation])
        open_turn = conversation.turns.filter(ended_at__isnull=True).first()
        if open_turn is not None:
            turn_end_locked(
                conversation=conversation,
                turn=open_turn,
                state=TurnState.STOPPED,
                reason="The chat was deleted.",
            )
        owner_id, public_id = conversation.owner_id, conversation.public_id
        conversation.delete()
        events.publish(events.CONVERSATION_DELETED, owner_id=owner_id, conversation_id=public_id)


# ---------------------------------------------------------------------------
# Starting replies


def message_send(
    *, conversation: Conversation, text: str, said_by: dict[str, str] | None = None
) -> Turn | QueuedInput:
    """The person's message: it starts a reply, or waits for the running one to end.

    A message during a running reply is queued for the next, never lost.
    ``said_by`` (``{"name": "alice", "app": "telegram"}``) is who wrote it on a chat
    app, kept on its entry for the page; the owner's own messages have none.
    """
    if not (text or "").strip():
        raise ConchError(ERR_EMPTY_MESSAGE)
    with transaction.atomic():
        conversation = Conversation.objects.lock(conversation.pk)
        return message_send_locked(conversation=conversation, text=text, said_by=said_by)


def message_send_locked(
    *,
    conversation: Conversation,
    text: str,
    said_by: dict[str, str] | None = None,
    reply_running: bool | None = None,
) -> Turn | QueuedInput:
    """:func:`message_send`, for a caller that holds the chat's row lock already.

    Precondition: inside ``atomic()`` holding the chat's row lock, ``conversation`` read
    under it (the gateway's session lookup takes it, with the one query it makes anyway).
    ``reply_running``: whether a reply of the chat's is open, if the caller read it under
    that lock (a reply starts and ends only under it); None, and it is asked here.
    """
    text = (text or "").strip()
    if not text:
        raise ConchError(ERR_EMPTY_MESSAGE)
    conversation_title_from_first_message(conversation=conversation, text=text)
    if reply_running is None:
        reply_running = conversation.turns.filter(ended_at__isnull=True).exists()
    if reply_running:
        queued = model_insert(QueuedInput(conversation=conversation, text=text))
        events.publish_chat(conversation, queued=True)
        return queued
    # Messages still queued (their reply was stopped) go first, so none is lost.
    earlier = queued_inputs_take(conversation=conversation)
    text = "\n\n".join([*earlier, text])
    # Words that waited may be someone else's: the page names a sender only when one wrote it all.
    data = {"said_by": said_by} if said_by and not earlier else None
    return _turn_start_locked(conversation, started_by=StartedBy.PERSON, text=text, data=data)


def again_refusal(turn: Turn | None, prompt: Entry | None) -> str:
    """Why the person may not retry ``turn`` or edit its prompt; "" when they may.

    Only the chat's last reply, ended, that the person's own message started on this
    page: words from a chat app's sender, another chat or a routine are not theirs to
    rewrite, and a reply still open is stopped first.
    """
    if turn is None or turn.replaced_by is not None:
        return ERR_AGAIN_STALE
    if turn.ended_at is None:
        return ERR_AGAIN_WHILE_OPEN
    if (
        turn.started_by != StartedBy.PERSON
        or prompt is None
        or prompt.role != EntryRole.PERSON
        or prompt.data.get("said_by")
    ):
        return ERR_AGAIN_NOT_YOURS
    return ""


def reply_again(*, conversation: Conversation, turn_number: int, text: str | None = None) -> Turn:
    """Retry the chat's last reply (``text`` None), or resend its prompt edited to ``text``.

    The replaced reply stays on the page as an earlier version (``Turn.replaced_by``) and
    leaves the model's transcript. What it did to files stays done, so the model is told.
    ``turn_number`` is the reply the person's page showed as the last: a page behind the
    chat (another tab sent a message meanwhile) is refused, never applied to another reply.
    """
    with transaction.atomic():
        conversation = Conversation.objects.lock(conversation.pk)
        if conversation.turns.filter(ended_at__isnull=True).exists():
            raise ConchError(ERR_AGAIN_WHILE_OPEN)
        last = conversation.turns.order_by("-number").first()
        if last is None or last.number != turn_number:
            raise ConchError(ERR_AGAIN_STALE)
        prompt = last.entries.filter(role=EntryRole.PERSON).order_by("seq").first()
        refusal = again_refusal(last, prompt)
        if refusal:
            raise ConchError(refusal)
        assert prompt is not None  # again_refusal said so
        words = prompt.text if text is None else (text or "").strip()
        if not words:
            raise ConchError(ERR_EMPTY_MESSAGE)
        if last.files_changed:
            entry_append(
                conversation=conversation,
                role=EntryRole.CONCH,
                kind=EntryKind.NOTE,
                text=conch_note(
                    "the person replaced your earlier reply to this message. That reply had "
                    "changed {files}, and those changes are still there.",
                    files=plain_list(last.files_changed),
                ),
            )
        how = "retry" if text is None else "edit"
        turn = _turn_start_locked(
            conversation,
            started_by=StartedBy.PERSON,
            text=words,
            data={"again": {"of": last.number, "how": how}},
        )
        Turn.objects.filter(pk=last.pk).update(replaced_by=turn.number)
        return turn


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
        conversation = Conversation.objects.lock(conversation.pk)
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
    events.publish_chat(conversation, events.STATUS, turn=turn.number)  # wakes the runner
    return turn


# ---------------------------------------------------------------------------
# Ending and stopping


def turn_end_locked(
    *, conversation: Conversation, turn: Turn, state: str, reason: str = ""
) -> None:
    """End the reply. Precondition: inside ``atomic()`` holding the chat's row lock."""
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
    events.publish_chat(conversation, events.STATUS, turn=turn.number, ended=state)
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
    """Start the next reply with the person's queued messages, if any.

    Asked first without the chat's lock, as most replies end with nothing queued: this
    runs after the ended reply's commit, so a message queued before it is there to see,
    and one that comes later finds no reply running and starts its own."""
    if not QueuedInput.objects.filter(
        conversation_id=conversation_id, taken_at__isnull=True
    ).exists():
        return None
    with transaction.atomic():
        conversation = Conversation.objects.lock(conversation_id)
        if conversation.turns.filter(ended_at__isnull=True).exists():
            return None
        texts = queued_inputs_take(conversation=conversation)
        if not texts:
            return None
        return _turn_start_locked(
            conversation, started_by=StartedBy.PERSON, text="\n\n".join(texts)
        )


def queued_inputs_take(*, conversation: Conversation) -> list[str]:
    """Mark the chat's queued messages taken; their texts, oldest first.

    Precondition: inside ``atomic()`` holding the chat's row lock.
    """
    queued = list(conversation.queued_inputs.filter(taken_at__isnull=True))
    QueuedInput.objects.filter(pk__in=[q.pk for q in queued]).update(taken_at=timezone.now())
    return [q.text for q in queued]


def queued_input_cancel(*, conversation: Conversation, queued_id: int) -> None:
    """Take back one of the person's queued messages, if no reply has taken it yet.

    Raises ConchError with what became of it: a reply took it (its words are in the
    transcript now), or it is no longer queued here (cancelled from another tab).
    """
    with transaction.atomic():
        conversation = Conversation.objects.lock(conversation.pk)
        queued = conversation.queued_inputs.filter(pk=queued_id).first()
        if queued is None:
            raise ConchError(ERR_QUEUED_GONE)
        if queued.taken_at is not None:
            raise ConchError(ERR_QUEUED_TAKEN)
        queued.delete()
        events.publish_chat(conversation, queued=False)


def turn_end(*, turn: Turn, state: str, reason: str = "") -> None:
    with transaction.atomic():
        conversation = Conversation.objects.lock(turn.conversation_id)
        current = Turn.objects.get(pk=turn.pk)
        if current.ended_at is not None:
            return
        turn_end_locked(conversation=conversation, turn=current, state=state, reason=reason)


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
        conversation = Conversation.objects.lock(conversation.pk)
        turn = conversation.turns.filter(ended_at__isnull=True).first()
        if turn is None:
            return None
        why = reason or ("You stopped it." if by == "person" else f"Stopped by {by}.")
        turn_end_locked(conversation=conversation, turn=turn, state=TurnState.STOPPED, reason=why)
        entry_append(
            conversation=conversation,
            role=EntryRole.CONCH,
            kind=EntryKind.NOTE,
            turn=turn,
            text=note or f"Stopped: {why}",
            data={"stopped_by": by},
        )
        return turn


def turn_approve(*, turn: Turn, always: bool = False) -> Turn:
    """The person's OK for the request the reply waits on. ``always``: and don't ask again
    in this chat for this tool, or for a command, for how it starts (chats/runtime/standing.py)."""
    return _answer_pending(turn, answer=ANSWER_ALWAYS if always else ANSWER_APPROVED)


def turn_deny(*, turn: Turn, reason: str = "") -> Turn:
    """The person's no, with their reason if they gave one: the model reads it as the step's result."""
    reason = (reason or "").strip()
    if len(reason) > LIMITS.deny_reason_chars:
        raise ConchError(ERR_REASON_TOO_LONG)
    return _answer_pending(turn, answer=ANSWER_DENIED, reason=reason)


ANSWER_APPROVED, ANSWER_ALWAYS, ANSWER_DENIED = "approved", "always", "denied"
# Each press, as the transcript keeps it for the person (a card: the model never reads it).
SAID_APPROVED = "You approved"
SAID_ALWAYS = "You approved and won't be asked again for {what} in this chat"
SAID_DENIED = "You denied it"
SAID_DENIED_BECAUSE = "You denied: {reason}"
ANSWER_CARD = "answer"
ERR_REASON_TOO_LONG = f"A reason is at most {LIMITS.deny_reason_chars:,} characters."


def _answer_pending(turn: Turn, *, answer: str, reason: str = "") -> Turn:
    with transaction.atomic():
        conversation = Conversation.objects.lock(turn.conversation_id)
        turn = Turn.objects.get(pk=turn.pk)
        if (
            turn.state != TurnState.NEEDS_YOU
            or not turn.pending_action
            or turn.ended_at is not None
        ):
            raise ConchError(ERR_NOTHING_TO_APPROVE)
        said = SAID_APPROVED
        if answer == ANSWER_ALWAYS:
            tool = get_tool(turn.pending_action["tool"], conversation.agent)
            scope, why = standing_ok_offer(conversation, tool, turn.pending_action["raw_args"])
            if scope is None:
                raise ConchError(ERR_NOT_OFFERED.format(why=why))
            standing_ok_give_locked(conversation=conversation, scope=scope)
            said = SAID_ALWAYS.format(what=scope.for_person())
        elif answer == ANSWER_DENIED:
            said = SAID_DENIED_BECAUSE.format(reason=reason) if reason else SAID_DENIED
        pending = {
            **turn.pending_action,
            "answer": ANSWER_DENIED if answer == ANSWER_DENIED else ANSWER_APPROVED,
            "reason": reason,
        }
        Turn.objects.filter(pk=turn.pk).update(
            state=TurnState.RUNNING, pending_action=pending, claimed_by=""
        )
        turn.state, turn.pending_action = TurnState.RUNNING, pending
        entry_append(
            conversation=conversation,
            role=EntryRole.CONCH,
            kind=EntryKind.CARD,
            turn=turn,
            text=said,
            data={"card": ANSWER_CARD, "answer": answer, "tool": pending["tool"]},
        )
        conversation.status = Status.WORKING
        conversation.save(update_fields=["status", "updated_at"])
        events.publish_chat(conversation, events.STATUS, turn=turn.number, answer=pending["answer"])
    return turn


# ---------------------------------------------------------------------------
# Tasks and room


def task_start(
    *, parent: Conversation, title: str, prompt: str = "", script: list | None = None
) -> Task:
    title = (title or "").strip()[: LIMITS.title_chars]
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
            taint_cause=Cause.parent(parent),
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
        lane_lock(Lane.SUBAGENT)  # another process's room-making commits first, or waits
        running = Task.objects.filter(state=TaskState.RUNNING).count()
        room = settings.CONCH_SUBAGENT_LANE - running
        waiting = list(
            # of=("self",): the task's chat and parent are joined in, and on PostgreSQL FOR
            # UPDATE can't reach the nullable side of that outer join.
            Task.objects.select_for_update(skip_locked=True, of=("self",))
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
                chat = Conversation.objects.lock(task.chat.pk)
                _turn_start_locked(
                    chat,
                    started_by=StartedBy.TASK,
                    # The prompt is the starting chat's words, which Conch passes on; it
                    # never opens Conch's own frame.
                    text=not_as_conch(task.prompt or task.title),
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
