"""``wait_for`` another chat or a task, watched without calling a model (ADR 0134).

The waiting reply lets go of its turn. The wait is a stored :class:`WaitSpec`
(a ``Wait`` row), so it survives a restart. It is looked at when the other
chat's reply ends (in whichever process ends it), when this process sees an
event about it, and every 30 seconds in case a change went unsaid. A look is
cheap while the other chat works: its record, never its log; its last reply
is read once, when it stops.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, Q
from django.utils import timezone

from chats import events
from chats.limits import LIMITS, MESSAGE_LIMITS
from chats.models import (
    TASK_GOING_STATES,
    Conversation,
    EntryKind,
    EntryRole,
    StartedBy,
    Status,
    Taint,
    Task,
    TaskState,
    Turn,
    TurnState,
)
from chats.quoting import NOTHING, Said, conch_note, conch_words, fence, plain, plain_id
from chats.runtime.chats import ConchError, entry_append
from chats.runtime.turns import turn_start
from chats.taint import Cause, taint_raise
from together.messages import ERR_NO_SUCH_CHAT, chain_spent_q
from together.models import ChatMessage, MessageState, Wait, WaitKind, WaitState
from together.visibility import is_yours, offers_together

log = logging.getLogger(__name__)

WAITING = "waiting"  # the family of wait_for: together adds it when ready (together.apps)

LOOK_EVERY = 30.0

ERR_NO_SUCH_TASK = "There is no task {id} among this chat's tasks."
ERR_WAIT_BACK = (
    "“{title}” (chat {id}) is waiting for this chat. Waiting back would only wake each in turn; "
    "finish your part instead."
)
ERR_WAIT_CYCLE = (
    "“{title}” (chat {id}) already waits, through {through}, for this chat. Waiting "
    "for it would close a circle of {n} chats, each waiting for the next, none ever done; "
    "finish your part instead."
)
ERR_SELF = "A chat can't wait for itself."
ERR_TOO_MANY = "This chat is already waiting for {n} things, the most a chat may wait for."

# Conch's words for how a chat's reply or a task ended, for inside its frame.
ENDED_WORDS = {
    TurnState.COMPLETED: conch_words("finished its reply"),
    TurnState.STOPPED: conch_words("was stopped before its reply finished"),
    TurnState.INTERRUPTED: conch_words("was stopped before its reply finished"),
    TurnState.NEEDS_YOU: conch_words("needs you"),
    TurnState.FAILED: conch_words("didn't finish its reply"),
}
TASK_ENDED_WORDS = {
    TaskState.DONE: conch_words("is done"),
    TaskState.UNVERIFIED: conch_words("finished, unverified"),
    TaskState.FAILED: conch_words("failed"),
    TaskState.STOPPED: conch_words("was stopped"),
    TaskState.INTERRUPTED: conch_words("was interrupted"),
}
NEEDS_YOU = ENDED_WORDS[TurnState.NEEDS_YOU]


@dataclass(frozen=True)
class WaitSpec:
    """What a wait is for, as it is stored: a chat or a task, by id."""

    kind: str
    id: str


# ---------------------------------------------------------------------------
# Still working?


def still_working_q(chat: OuterRef) -> Q:
    """A reply running or pending recovery, a message on its way in, a task still waiting for room,
    or a wait of its own: each means the chat will carry on by itself, so it isn't done.

    A filter on the chat ``chat`` refers to, so one query answers it for one chat or for
    every wait of a look at once (:func:`waits_check`).
    """
    replying = Turn.objects.filter(
        conversation=chat,
        ended_at__isnull=True,
        state__in=[TurnState.RUNNING, TurnState.RECOVERY_PENDING],
    )
    # A message whose chain has started all its replies starts none: it isn't on its way in.
    coming_in = ChatMessage.objects.filter(
        receiver=chat, state=MessageState.WAITING, start_reply=True
    ).exclude(chain_spent_q())
    tasks = Task.objects.filter(chat=chat, state__in=[TaskState.QUEUED, TaskState.WAITING_FOR_ROOM])
    waiting = Wait.objects.filter(waiter=chat, state=WaitState.WAITING)
    return Q(Exists(replying)) | Q(Exists(coming_in)) | Q(Exists(tasks)) | Q(Exists(waiting))


def chat_still_working(chat: Conversation) -> bool:
    """:func:`still_working_q` for one chat in hand: one query."""
    return Conversation.objects.filter(pk=chat.pk).filter(still_working_q(OuterRef("pk"))).exists()


def task_still_going(task: Task) -> bool:
    """A task waiting for room or for the person's OK is still going."""
    return task.state in TASK_GOING_STATES


# ---------------------------------------------------------------------------
# Starting a wait


@dataclass(frozen=True)
class WaitAnswer:
    text: str
    let_go: bool
    wait: Wait | None = None


def wait_for(
    *, waiter: Conversation, turn: Turn, kind: str, target_id: str, step_id: int | None = None
) -> WaitAnswer:
    """Wait for a chat of yours or a task of this chat's. Two waits for the same id are one.

    One transaction, holding the waiter's lock and then its owner's: the waits one
    person's chats begin are begun one at a time, so two chats can't close a cycle at
    the same moment (:func:`cycle_through`). The runtime calls this in the step's last
    transaction, so the wait commits with the reply letting go (``ToolContext.at_step_end``).
    """
    with transaction.atomic():
        waiter = Conversation.objects.lock(waiter.pk)
        get_user_model().objects.select_for_update().filter(pk=waiter.owner_id).exists()
        answer = _wait_begin(
            waiter=waiter, turn=turn, kind=kind, target_id=target_id, step_id=step_id
        )
        if answer.wait is not None:
            # The target may have finished between the look and this commit: look again after it.
            wait_pk = answer.wait.pk
            transaction.on_commit(lambda: _look_again(wait_pk))
    return answer


def _look_again(wait_pk: int) -> None:
    wait = (
        Wait.objects.filter(pk=wait_pk, state=WaitState.WAITING)
        .select_related("waiter", "target_chat", "target_task")
        .first()
    )
    if wait is not None and _done(wait):
        wake(wait=wait)


def _wait_begin(
    *, waiter: Conversation, turn: Turn, kind: str, target_id: str, step_id: int | None
) -> WaitAnswer:
    """Precondition: inside ``wait_for``'s transaction, holding its locks. A target done
    already is answered at once, by this reply's step: the timeline names that step."""
    if kind == WaitKind.CHAT:
        target = _find_chat(waiter, target_id)
        title, public_id = target.title, target.public_id
        cycle = cycle_through(waiter=waiter, target_pk=target.pk)
        if cycle is not None:
            raise ConchError(_cycle_refusal(target, cycle))
        if not chat_still_working(target):
            return WaitAnswer(
                _chat_outcome_text(
                    waiter, target, bare=False, taint_first=True, turn=turn, step=step_id
                ),
                let_go=False,
            )
        fields: dict[str, Any] = {"target_chat": target}
    elif kind == WaitKind.TASK:
        task = (
            Task.objects.filter(public_id=target_id, parent=waiter).select_related("chat").first()
        )
        if task is None:
            raise ConchError(ERR_NO_SUCH_TASK.format(id=plain_id(target_id)))
        title, public_id = task.title, task.public_id
        if not task_still_going(task):
            return WaitAnswer(
                _task_outcome_text(
                    waiter, task, bare=False, taint_first=True, turn=turn, step=step_id
                ),
                let_go=False,
            )
        fields = {"target_task": task}
    else:
        raise ConchError("kind must be 'chat' or 'task'.")

    existing = Wait.objects.filter(
        waiter=waiter, kind=kind, target_public_id=public_id, state=WaitState.WAITING
    ).first()
    if existing is not None:
        return WaitAnswer(
            f"Already waiting for “{plain(title)}” ({public_id}); that is the same wait.",
            True,
            existing,
        )
    if (
        Wait.objects.filter(waiter=waiter, state=WaitState.WAITING).count()
        >= MESSAGE_LIMITS.waiting_per_chat
    ):
        raise ConchError(ERR_TOO_MANY.format(n=MESSAGE_LIMITS.waiting_per_chat))
    try:
        with transaction.atomic():
            wait = Wait.objects.create(
                waiter=waiter,
                kind=kind,
                target_public_id=public_id,
                target_title=title,
                chain_id=turn.chain_id,
                waiter_taint_at_start=waiter.taint,
                **fields,
            )
            entry_append(
                conversation=waiter,
                role=EntryRole.CONCH,
                kind=EntryKind.CARD,
                turn=turn,
                text=f"Waiting for “{plain(title)}”",
                data={"card": "wait", "wait": wait.pk, "kind": kind, "target": public_id},
            )
            events.publish(
                events.CONVERSATION_UPDATED,
                owner_id=waiter.owner_id,
                conversation_id=waiter.public_id,
                data={"waiting_for": public_id},
            )
    except IntegrityError:  # the same wait, made a moment ago
        wait = Wait.objects.get(
            waiter=waiter, kind=kind, target_public_id=public_id, state=WaitState.WAITING
        )
        return WaitAnswer(
            f"Already waiting for “{plain(title)}” ({public_id}); that is the same wait.",
            True,
            wait,
        )
    what = "chat" if kind == WaitKind.CHAT else "task"
    return WaitAnswer(
        f"Waiting for the {what} “{plain(title)}” ({public_id}). This reply ends now; "
        "a new one starts when it's done, with how it ended.",
        let_go=True,
        wait=wait,
    )


def cycle_through(*, waiter: Conversation, target_pk: int) -> list[int] | None:
    """The chats (pks, from the target on) through which ``target`` already waits for
    ``waiter``, or None: a wait for it would close that cycle, of any length. A wait for a task counts as a wait for the task's chat.

    One query: every wait still waiting among the owner's chats.
    """
    edges: dict[int, set[int]] = {}
    rows = Wait.objects.filter(state=WaitState.WAITING, waiter__owner_id=waiter.owner_id)
    for source, chat, task_chat in rows.values_list(
        "waiter_id", "target_chat_id", "target_task__chat_id"
    ):
        for to in (chat, task_chat):
            if to is not None:
                edges.setdefault(source, set()).add(to)
    came_from: dict[int, int | None] = {target_pk: None}
    frontier = [target_pk]
    while frontier:
        following = []
        for pk in frontier:
            for to in sorted(edges.get(pk, ())):
                if to == waiter.pk:
                    path = [pk]
                    back = came_from[pk]
                    while back is not None:
                        path.append(back)
                        back = came_from[back]
                    return list(reversed(path))
                if to not in came_from:
                    came_from[to] = pk
                    following.append(to)
        frontier = following
    return None


def _cycle_refusal(target: Conversation, cycle: list[int]) -> str:
    if len(cycle) == 1:
        return ERR_WAIT_BACK.format(title=plain(target.title), id=target.public_id)
    ids = dict(Conversation.objects.filter(pk__in=cycle).values_list("pk", "public_id"))
    through = " and ".join(f"chat {ids.get(pk, '?')}" for pk in cycle[1:])
    return ERR_WAIT_CYCLE.format(
        title=plain(target.title), id=target.public_id, through=through, n=len(cycle) + 1
    )


def _find_chat(waiter: Conversation, chat_id: str) -> Conversation:
    if not offers_together(waiter):
        raise ConchError(ERR_NO_SUCH_CHAT.format(id=plain_id(chat_id)))
    if chat_id == waiter.public_id:
        raise ConchError(ERR_SELF)
    target = Conversation.objects.filter(public_id=chat_id).first()
    if target is None or not is_yours(target, owner_id=waiter.owner_id):
        raise ConchError(ERR_NO_SUCH_CHAT.format(id=plain_id(chat_id)))
    return target


# ---------------------------------------------------------------------------
# What the waking turn hears


def last_reply_of(chat: Conversation) -> str:
    """The latest finished turn's reply: its assistant words, in order."""
    turn = chat.turns.filter(ended_at__isnull=False).order_by("-number").first()
    if turn is None:
        return ""
    words = turn.entries.filter(role=EntryRole.ASSISTANT, kind=EntryKind.MESSAGE).order_by("seq")
    return "\n\n".join(words.values_list("text", flat=True))


def _carry_taint(waiter: Conversation, source: Conversation, cause: Cause) -> None:
    """A chat that read something from outside taints the one that waits for it, before it reads."""
    if source.taint != Taint.NONE:
        taint_raise(conversation=waiter, taint=Taint.UNTRUSTED, cause=cause)


def how_it_ended(target: Conversation) -> Said:
    if target.status == Status.NEEDS_YOU:
        return NEEDS_YOU
    last = target.turns.filter(ended_at__isnull=False).order_by("-number").first()
    if last is None:
        return conch_words("has no replies yet")
    return ENDED_WORDS.get(TurnState(last.state), conch_words("stopped working"))


def _chat_outcome_text(
    waiter: Conversation,
    target: Conversation,
    *,
    bare: bool,
    taint_first: bool,
    turn: Turn | None = None,
    step: int | None = None,
) -> str:
    ended = how_it_ended(target)
    lines = [
        conch_note(
            "“{title}” {ended}. (chat {chat}, which this chat was waiting for){tell}",
            title=target.title,
            ended=ended,
            chat=plain_id(target.public_id),
            tell=conch_words(" Tell the person that it needs them.")
            if ended == NEEDS_YOU
            else NOTHING,
        )
    ]
    unread = ChatMessage.objects.filter(receiver=target, state=MessageState.WAITING).count()
    if unread:
        lines.append(
            conch_note(
                "{n} from other chats {wait} for it, unread until its next reply.",
                n=conch_words("1 message" if unread == 1 else f"{unread} messages"),
                wait=conch_words("waits" if unread == 1 else "wait"),
            )
        )
    if taint_first:
        _carry_taint(waiter, target, Cause.wait(target, turn=turn, step=step))
    if not bare:
        reply = last_reply_of(target)
        if reply:
            lines.append(
                fence(
                    "chat-reply",
                    reply,
                    limit=LIMITS.last_reply_chars,
                    attrs={"chat": target.public_id},
                )
            )
    return "\n".join(lines)


def _task_outcome_text(
    waiter: Conversation,
    task: Task,
    *,
    bare: bool,
    taint_first: bool,
    turn: Turn | None = None,
    step: int | None = None,
) -> str:
    ended = TASK_ENDED_WORDS.get(TaskState(task.state), plain(task.get_state_display()))
    lines = [
        conch_note(
            "the task “{title}” ({task}) {ended}.",
            title=task.title,
            task=plain_id(task.public_id),
            ended=ended,
        )
    ]
    if taint_first and task.chat is not None:
        _carry_taint(
            waiter, task.chat, Cause.task(task.chat, task_id=task.public_id, turn=turn, step=step)
        )
    if not bare:
        words = task.result if task.state == TaskState.DONE else (task.reason or task.result)
        if words:
            lines.append(
                fence(
                    "task-result",
                    words,
                    limit=LIMITS.last_reply_chars,
                    attrs={"task": task.public_id},
                )
            )
    return "\n".join(lines)


def headline(wait: Wait, ended: str) -> str:
    return f"“{plain(wait.target_title)}” {ended}"


# ---------------------------------------------------------------------------
# Waking


def waits_check(*, chat_pk: int | None = None, task_pk: int | None = None) -> list[Wait]:
    """Look at the waits on this chat or task (or every wait), and wake those whose target is done.

    The look is one query whatever the number of waits: each wait comes with its waiter,
    its target and whether that target still works (:func:`still_working_q`). Only a wait
    to wake costs more, in :func:`wake`.
    """
    waits = (
        Wait.objects.filter(state=WaitState.WAITING)
        .select_related("waiter", "target_chat", "target_task")
        .annotate(
            target_working=ExpressionWrapper(
                still_working_q(OuterRef("target_chat_id")), output_field=BooleanField()
            )
        )
    )
    if chat_pk is not None:
        waits = waits.filter(_on_chat(chat_pk))
    elif task_pk is not None:
        waits = waits.filter(target_task_id=task_pk)
    woken: list[Wait] = []
    for wait in list(waits):
        if _done(wait, target_working=wait.target_working) and wake(wait=wait):
            woken.append(wait)
    return woken


def _done(wait: Wait, *, target_working: bool | None = None) -> bool:
    """Whether the wait's target is done; ``target_working`` if the look already knows."""
    if wait.kind == WaitKind.CHAT:
        if wait.target_chat is None or not _still_yours(wait):
            return True
        if target_working is None:
            target_working = chat_still_working(wait.target_chat)
        return not target_working
    return wait.target_task is None or not task_still_going(wait.target_task)


def _still_yours(wait: Wait) -> bool:
    """The chat waited for is still one the waiter may know about (``is_yours``), checked
    again at each look and at wake, as messages are before they are read."""
    target = wait.target_chat
    return target is not None and is_yours(target, owner_id=wait.waiter.owner_id)


def wake(*, wait: Wait) -> bool:
    """Wake the waiting chat once: taint it first, then start its turn with what it hears.

    One transaction, holding the waiter's row as ``wait_for`` takes it: the wait is woken
    exactly when what it woke (the reply, or the note a busy chat reads at its next step)
    is written. A process that dies half-way leaves the wait waiting, and the next look
    wakes it; marked woken on its own first, it was lost for good.
    """
    with transaction.atomic():
        waiter = (
            Conversation.objects.locked().select_related("agent").filter(pk=wait.waiter_id).first()
        )
        if waiter is None:
            return False  # deleted meanwhile, and its waits with it
        if not Wait.objects.filter(pk=wait.pk, state=WaitState.WAITING).update(
            state=WaitState.WOKEN, woken_at=timezone.now()
        ):
            return False  # someone else woke it
        _wake_locked(wait, waiter)
    return True


def _wake_locked(wait: Wait, waiter: Conversation) -> None:
    """Precondition: inside ``atomic()`` holding the waiter's row lock, the wait just woken."""
    # Someone else's words came in since it began waiting: it hears how the other ended, never what it said.
    bare = waiter.taint == Taint.PERSON and wait.waiter_taint_at_start != Taint.PERSON
    target = (
        Conversation.objects.filter(pk=wait.target_chat_id).first()
        if wait.kind == WaitKind.CHAT and wait.target_chat_id
        else None
    )
    if wait.kind == WaitKind.CHAT:
        if target is None:
            text = conch_note(
                "“{title}” ({chat}), which this chat was waiting for, was deleted.",
                title=wait.target_title,
                chat=plain_id(wait.target_public_id),
            )
            ended = "was deleted"
        elif not is_yours(target, owner_id=waiter.owner_id):
            # Someone else's words came into it: nothing about it reaches anyone, not its
            # ending, not its last reply. The waiter hears only that, and the wait's end.
            text = conch_note(
                "“{title}” ({chat}), which this chat was waiting for, is no longer a chat it "
                "may look at, so nothing about how it ended or what it said is passed on.",
                title=wait.target_title,
                chat=plain_id(wait.target_public_id),
            )
            ended = "can't be looked at any more"
            bare = True
        else:
            text = _chat_outcome_text(waiter, target, bare=bare, taint_first=True)
            ended = how_it_ended(target)
    else:
        task = (
            Task.objects.filter(pk=wait.target_task_id).select_related("chat").first()
            if wait.target_task_id is not None
            else None
        )
        if task is None:
            text = conch_note(
                "the task “{title}” ({task}) is gone.",
                title=wait.target_title,
                task=plain_id(wait.target_public_id),
            )
            ended = "is gone"
        else:
            text = _task_outcome_text(waiter, task, bare=bare, taint_first=True)
            ended = TASK_ENDED_WORDS.get(TaskState(task.state), task.state)
    Wait.objects.filter(pk=wait.pk).update(
        outcome={"headline": headline(wait, ended), "bare": bare}
    )
    waiter.refresh_from_db()
    data = {"wait": wait.pk, "woken_by": wait.target_public_id, "headline": headline(wait, ended)}
    try:
        turn_start(
            conversation=waiter,
            started_by=StartedBy.WAIT,
            chain_id=wait.chain_id,
            text=text,
            role=EntryRole.CONCH,
            data=data,
        )
    except ConchError:
        # It's busy (the person wrote meanwhile): it reads this at its next step.
        entry_append(
            conversation=waiter,
            role=EntryRole.CONCH,
            kind=EntryKind.NOTE,
            text=text,
            data=data,
        )
        events.publish(
            events.CONVERSATION_UPDATED,
            owner_id=waiter.owner_id,
            conversation_id=waiter.public_id,
        )


def after_turn_end(turn: Turn) -> None:
    """Every reply's end comes here: most chats have no one waiting for them, and for those
    one plain indexed query answers, not the look (a few ms of building it, a reply's
    largest single cost when nothing waits, and it holds SQLite's writer meanwhile)."""
    if waits_on(chat_pk=turn.conversation_id):
        waits_check(chat_pk=turn.conversation_id)


def waits_on(*, chat_pk: int) -> bool:
    """Whether a wait still waits for this chat, or for one of its tasks."""
    return Wait.objects.filter(_on_chat(chat_pk), state=WaitState.WAITING).exists()


def _on_chat(chat_pk: int) -> Q:
    """A wait's target is this chat, or one of its tasks."""
    tasks = Task.objects.filter(chat_id=chat_pk).values("pk")
    return Q(target_chat_id=chat_pk) | Q(target_task_id__in=tasks)


def on_event(event: events.Event) -> None:
    """Events nudge the look at once; the 30-second sweep catches anything unsaid.

    Most events are about chats and tasks no one waits for: for those it costs one
    query, on the ``wait_target`` index, whatever the number of waits. A deleted chat's
    waits are woken by :func:`on_delete`, a batch at a time, not here event by event.
    """
    if event.type == events.TASK_CHANGED and event.data.get("task"):
        task_id = event.data["task"]
        if not waited_for(task_id):
            return
        task = Task.objects.filter(public_id=task_id).values_list("pk", flat=True).first()
        if task:
            waits_check(task_pk=task)
        return
    if event.type not in (events.STATUS, events.TASK_CHANGED):
        return
    if not event.conversation_id or not waited_for(event.conversation_id):
        return
    chat = (
        Conversation.objects.filter(public_id=event.conversation_id)
        .values_list("pk", flat=True)
        .first()
    )
    if chat is not None:  # else it was deleted meanwhile, and on_delete woke its waits
        waits_check(chat_pk=chat)


def on_delete(chats: list[Conversation]) -> None:
    """Chats about to be deleted: once the delete commits, wake what waits for them (each
    hears the chat was deleted). One query for the whole batch, found by the waits'
    ``target_chat``; maintenance deletes thousands of chats, so never one per chat."""
    waiting = list(
        Wait.objects.filter(
            target_chat__in=[chat.pk for chat in chats], state=WaitState.WAITING
        ).values_list("pk", flat=True)
    )
    if waiting:
        transaction.on_commit(lambda: _wake_deleted(waiting))


def _wake_deleted(wait_pks: list[int]) -> None:
    for wait in Wait.objects.filter(pk__in=wait_pks, state=WaitState.WAITING).select_related(
        "waiter"
    ):
        wake(wait=wait)


def waited_for(public_id: str) -> bool:
    """Whether some wait still waits for this chat or task (by id): one indexed query."""
    return Wait.objects.filter(target_public_id=public_id, state=WaitState.WAITING).exists()


def chats_waiting(pks: list[int]) -> set[int]:
    """Of these chats, those with a live wait: each carries on by itself when woken, so it
    is never idle (maintenance's in-use check)."""
    return set(
        Wait.objects.filter(waiter_id__in=pks, state=WaitState.WAITING).values_list(
            "waiter_id", flat=True
        )
    )


def sweep() -> None:
    waits_check()
