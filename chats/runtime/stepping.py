"""Stepping a reply: one action of the engine at a time, each tool call a step.

:func:`turn_advance` is called by whoever holds the turn's claim (the runner,
``chats.runtime.claims``). No transaction is held while the engine chooses or
a tool runs; what a step did is written under the chat's row lock after.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from chats import events, hooks, personas, processes, roots
from chats.engines import engine_for
from chats.engines.base import STEP, Ask, End, EngineError, EngineInput, Fail, Line, Say, ToolCall
from chats.engines.scripted import validate_script
from chats.limits import LIMITS
from chats.models import (
    Conversation,
    Effect,
    Entry,
    EntryKind,
    EntryRole,
    Mode,
    Status,
    Step,
    Task,
    Turn,
    TurnState,
)
from chats.quoting import known_secrets, scrub_secrets
from chats.refusals import (
    IN_PLAN_MODE_NOW,
    NOT_OFFERED,
    NOT_OFFERED_NOW,
    SAID_NO,
    SAID_NO_BECAUSE,
)
from chats.runtime.chats import ConchError, entry_append
from chats.runtime.standing import asks, asks_because_careful
from chats.runtime.turns import (
    ERR_COMMAND_REPLY_ENDED,
    ERR_COMMAND_STOPPED,
    task_start,
    turn_end,
    turn_end_locked,
)
from chats.timeline import careful_rise
from chats.tools.diffs import PREVIEW_FAILS
from chats.tools.registry import (
    FOLDER_FAMILIES,
    Tool,
    ToolContext,
    ToolError,
    get_tool,
    tools_offered,
    validate_args,
)
from chats.toolsets import ToolSet, tool_set_for

log = logging.getLogger(__name__)

ERR_REPLY_ENDED_FIRST = "The reply had already ended, so this step did nothing."

CONCH_SYSTEM = (
    "You are an assistant working in Conch, in the folder this chat works in. "
    "Use the tools you are offered; say plainly what you changed."
)


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
        A reply the person replaced (a retry, an edited message) is left out, with its
        prompt and steps: the page keeps it as an earlier version, the model reads the new one.
        """
        numbers: dict[int, int] = {}
        replaced: set[int] = set()
        for pk, number, replaced_by in conversation.turns.values_list(
            "pk", "number", "replaced_by"
        ):
            numbers[pk] = number
            if replaced_by is not None:
                replaced.add(pk)
        steps = [
            (
                s.started_at,
                Line(
                    role=EntryRole.TOOL,
                    kind=STEP,
                    text=s.error or s.result,
                    data={"tool": s.tool, "args": s.args, "step": s.number, "error": bool(s.error)},
                    turn=numbers.get(s.turn_id),
                ),
            )
            for s in Step.objects.filter(turn__conversation=conversation)
            .exclude(turn_id__in=replaced)
            .order_by("started_at", "turn_id", "number")
        ]
        lines: list[Line] = []
        i = 0
        for e in conversation.entries.exclude(turn_id__in=replaced).order_by("seq"):
            while i < len(steps) and steps[i][0] <= e.created_at:
                lines.append(steps[i][1])
                i += 1
            turn = numbers.get(e.turn_id) if e.turn_id else None
            lines.append(Line(role=e.role, kind=e.kind, text=e.text, data=e.data, turn=turn))
        lines.extend(line for _, line in steps[i:])
        return tuple(lines)

    return load


def _recap_keeper(conversation: Conversation):
    def keep(recap: dict[str, Any]) -> None:
        """The chat's recap, kept where its next reply (and a restarted server) finds it.
        No ``save()``: nothing the page shows changed."""
        Conversation.objects.filter(pk=conversation.pk).update(context_recap=recap)

    return keep


class _TextStreamer:
    """What a model engine calls with the reply's words so far: a ``reply.text`` event.

    Nothing is stored while the words come: they are an entry once the engine has
    chosen its action. If the reply is stopped first, the words so far are kept
    (:func:`_stopped_words_keep`). Returns False once the reply is no longer this
    worker's to run, as ``halt`` says: set at once by a Stop in this process, and by
    :func:`_halt_for`'s look at the database within HALT_POLL seconds otherwise, so a
    chunk costs no query of its own. Each chunk's words are published as the newest
    of the reply's (``newest_of``): while an earlier event of the reply still waits
    for the channel layer, these words go in its place, and take no number of their own.
    """

    def __init__(self, turn: Turn, halt: threading.Event) -> None:
        self.turn = turn
        self.halt = halt
        self.latest = ""  # the words so far, whole
        self.key = f"reply-text:{turn.pk}"

    def __call__(self, text: str) -> bool:
        if self.halt.is_set():
            return False
        self.latest = text
        self._publish({"text": self._shown(text)})
        return True

    def _shown(self, text: str) -> str:
        if len(text) > LIMITS.stream_chars:
            return "…" + text[-LIMITS.stream_chars :]
        return text

    def _publish(self, data: dict[str, Any]) -> None:
        turn = self.turn
        events.publish(
            events.REPLY_TEXT,
            owner_id=turn.conversation.owner_id,
            conversation_id=turn.conversation.public_id,
            data={"turn": turn.number, **data},
            newest_of=self.key,
        )

    def waiting(self, seconds: float, asked: bool) -> None:
        """The engine waits to try the model again: the page says so, and for how long."""
        self._publish({"text": self._shown(self.latest), "wait": wait_words(seconds, asked=asked)})


def wait_words(seconds: float, *, asked: bool) -> str:
    """ "The model asked us to wait 4 s.", in the person's words, for a wait between tries."""
    shown = f"{seconds:.0f}" if seconds >= 10 or seconds == int(seconds) else f"{seconds:.1f}"
    if asked:
        return f"The model asked us to wait {shown} s. Conch tries again then."
    return f"The model didn't answer properly. Conch tries again in {shown} s."


def _stopped_words_keep(turn: Turn, words: str) -> bool:
    """Keep the words a stopped reply had written, as its reply so far, marked stopped.

    They go where the reply stood, just before the chat's "Stopped: …" note (which the
    Stop wrote while the words were still coming), so the transcript reads in order and
    the model, at the next message, reads what it had said. Once per reply. Returns
    whether the reply was stopped (and the words, if any, kept).
    """
    with transaction.atomic():
        conversation = Conversation.objects.lock(turn.conversation_id)
        current = Turn.objects.get(pk=turn.pk)
        if current.state != TurnState.STOPPED:
            return False
        words = words.strip()
        entries = Entry.objects.filter(conversation=conversation, turn=current)
        if not words or entries.filter(data__stopped=True).exists():
            return True
        last = entries.order_by("-seq").first()
        if last is not None and last.kind == EntryKind.NOTE and "stopped_by" in last.data:
            note_text, note_data = last.text, last.data
            last.role, last.kind, last.text = EntryRole.ASSISTANT, EntryKind.MESSAGE, words
            last.data = {"stopped": True}
            last.save(update_fields=["role", "kind", "text", "data"])
            entry_append(
                conversation=conversation,
                role=EntryRole.CONCH,
                kind=EntryKind.NOTE,
                turn=current,
                text=note_text,
                data=note_data,
            )
        else:
            entry_append(
                conversation=conversation,
                role=EntryRole.ASSISTANT,
                text=words,
                turn=current,
                data={"stopped": True},
            )
        events.publish_chat(conversation, turn=current.number)
    return True


def _gather_notes(turn: Turn, at_start: bool) -> list[str]:
    notes: list[str] = []
    for provider in list(hooks.note_providers):
        notes.extend(note.text for note in provider(turn, at_start))
    return notes


def _notes_waiting(turn: Turn, at_start: bool) -> bool:
    """Whether some provider may have something to take in now (one that can't say may)."""
    for waiting in list(hooks.note_providers.values()):
        if waiting is None or waiting(turn, at_start):
            return True
    return False


def _take_in(turn: Turn, at_start: bool) -> list[str]:
    """Every intake at this boundary (messages, the reader's lines) and the notes carrying
    it, in one transaction under the chat's lock: a message is never marked read, nor its
    sender's taint carried, without its words written into the chat.

    Most steps have nothing to take in, and the providers say so first, with no lock and
    no transaction (on SQLite, no turn of its one writer). What comes after they looked is
    taken in at the next step, as it would be had it come after this one's transaction.
    """
    if not _notes_waiting(turn, at_start):
        return []
    with transaction.atomic():
        conversation = Conversation.objects.lock(turn.conversation_id)
        notes = _gather_notes(turn, at_start)
        if notes:
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
    notes = _take_in(turn, at_start)
    # Taint comes before the first action: the engine, the tools offered and each tool's
    # must_ask see the chat as its intake left it, never as this step found it.
    conversation = Conversation.objects.select_related("agent", "owner").get(pk=conversation.pk)
    turn.conversation = conversation
    engine_state = {**turn.engine_state, "started": True}
    # The persona may have been taken from this chat's account since: it answers no more.
    refused = personas.persona_refusal(conversation.owner, conversation.agent)
    if refused:
        turn_end(turn=turn, state=TurnState.FAILED, reason=refused)
        return Advance(False, "fail")
    with _halt_for(turn.pk, worker) as halt:
        streamer = _TextStreamer(turn, halt)
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
                    on_text=streamer,
                    halt=halt,
                    on_wait=streamer.waiting,
                    keep_recap=_recap_keeper(conversation),
                )
            )
        except EngineError as exc:
            if streamer.latest and _stopped_words_keep(turn, streamer.latest):
                return Advance(False)
            turn_end(turn=turn, state=TurnState.FAILED, reason=str(exc))
            return Advance(False, "fail")
        if streamer.latest and not _still_mine(turn.pk, worker):
            _stopped_words_keep(turn, streamer.latest)
            return Advance(False)
        if decision.delay and honour_delays:
            halt.wait(decision.delay)  # a Stop ends the pause
    new_state = {**decision.state, "started": True}
    action = decision.action

    if isinstance(action, ToolCall):
        return _play_tool(turn, worker, action, new_state)
    if isinstance(action, Say):
        with transaction.atomic():
            conversation = Conversation.objects.lock(conversation.pk)
            if not _still_mine(turn.pk, worker):
                return Advance(False)
            entry_append(
                conversation=conversation,
                role=EntryRole.ASSISTANT,
                text=action.text,
                turn=turn,
                data=action.data,
            )
            Turn.objects.filter(pk=turn.pk).update(engine_state=new_state)
            events.publish_chat(conversation, turn=turn.number)
        return Advance(True, "say")
    if isinstance(action, Ask):
        with transaction.atomic():
            conversation = Conversation.objects.lock(conversation.pk)
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
            turn_end_locked(
                conversation=conversation,
                turn=turn,
                state=TurnState.NEEDS_YOU,
                reason="It asked you a question.",
            )
        return Advance(False, "ask")
    if isinstance(action, Fail):
        turn_end(turn=turn, state=TurnState.FAILED, reason=action.reason)
        return Advance(False, "fail")
    if isinstance(action, End):
        with transaction.atomic():
            conversation = Conversation.objects.lock(conversation.pk)
            if not _still_mine(turn.pk, worker):
                return Advance(False)
            if action.text:
                entry_append(
                    conversation=conversation,
                    role=EntryRole.ASSISTANT,
                    text=action.text,
                    turn=turn,
                    data=action.data,
                )
            Turn.objects.filter(pk=turn.pk).update(engine_state=new_state)
            turn_end_locked(conversation=conversation, turn=turn, state=TurnState.COMPLETED)
        return Advance(False, "end")
    raise EngineError(f"Unknown action {action!r}")


def _uses_folder(tool: Tool) -> bool:
    """Whether a tool reads, writes or runs in the chat's folder."""
    return tool.family in FOLDER_FAMILIES or tool.in_folder


HALT_POLL = 1.0  # how often a wait looks whether another process stopped the reply


@contextmanager
def _halt_for(turn_pk: int, worker: str) -> Iterator[threading.Event]:
    """The event an engine's waits end on: set by a Stop in this process at once (through
    ``processes.commands_stop``), and by one in another process within HALT_POLL seconds."""
    done = threading.Event()
    with processes.wait_watched(turn_id=turn_pk, worker=worker) as halt:

        def look() -> None:
            try:
                while not done.wait(HALT_POLL) and not halt.is_set():
                    try:
                        row = (
                            Turn.objects.filter(pk=turn_pk)
                            .values_list("state", "claimed_by")
                            .first()
                        )
                    except DatabaseError:
                        continue  # a blip must not end a reply: look again next time
                    if row is not None and (row[0] != TurnState.RUNNING or row[1] != worker):
                        halt.set()
            finally:
                connection.close()

        watcher = threading.Thread(target=look, name="conch-halt", daemon=True)
        watcher.start()
        try:
            yield halt
        finally:
            done.set()
            watcher.join(timeout=5)


def _still_mine(turn_pk: int, worker: str) -> bool:
    return Turn.objects.filter(
        pk=turn_pk, state=TurnState.RUNNING, ended_at__isnull=True, claimed_by=worker
    ).exists()


def _play_tool(turn: Turn, worker: str, call: ToolCall, new_state: dict[str, Any]) -> Advance:
    # The chat as it is now: someone else's words may have come in since the reply began.
    conversation = Conversation.objects.select_related("agent").get(pk=turn.conversation_id)
    try:
        tool = get_tool(call.tool, conversation.agent)
        refused = tool_set_for(conversation).refusal(tool.name, uses_folder=_uses_folder(tool))
        if refused:
            raise ToolError(refused)
        if tool not in tools_offered(conversation):
            raise ToolError(NOT_OFFERED.for_model(tool=call.tool))
        args = validate_args(tool, call.args)
    except ToolError as exc:
        _record_refused_step(turn, worker, call, str(exc), new_state)
        return Advance(True, "tool")

    with transaction.atomic():
        # must_ask reads the chat as it is now: a wait's wake or a message may have tainted
        # it in another process since this step began.
        conversation = Conversation.objects.lock(conversation.pk)
        # A standing OK answers only an ask of Ask mode in a chat that is the person's alone.
        if asks(conversation, tool, args):
            preview = _preview(turn, conversation, tool, args)
            if not _still_mine(turn.pk, worker):
                return Advance(False)
            pending = {
                "tool": tool.name,
                "args": _scrub_args(args),
                "state_after": new_state,
                "raw_args": args,
                "preview": preview,
            }
            if asks_because_careful(conversation, tool, args):
                # The ask names the rise that made it careful, as the chat was when it asked.
                pending["careful"] = {"rise": careful_rise(conversation)}
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
            events.publish_chat(conversation, events.STATUS, turn=turn.number, asks=tool.name)
            return Advance(False, "needs_you")
    _run_step(turn, worker, tool, args, new_state)
    return Advance(True, "tool")


def _preview(turn: Turn, conversation: Conversation, tool: Tool, args: dict[str, Any]) -> dict:
    """What the tool would do, for the person to see before their OK; {} if it can't say.

    Read where the step would run, as the step would read it (beneath its folder).
    """
    if tool.preview is None:
        return {}
    folder = tool_set_for(conversation).folder or turn.folder
    ctx = ToolContext(conversation=conversation, turn=turn, folder=folder)
    try:
        return tool.preview(ctx, args)
    except ToolError as exc:
        known = known_secrets(conversation.agent)
        return {"kind": PREVIEW_FAILS, "text": scrub_secrets(str(exc), known=known)}
    except OSError as exc:  # a file that can't be read now: the step says so if it runs
        return {"kind": PREVIEW_FAILS, "text": f"It can't be shown: {exc.strerror or exc}."}


def _play_answered(turn: Turn, worker: str, pending: dict[str, Any]) -> Advance:
    try:
        tool = get_tool(pending["tool"], turn.conversation.agent)
    except ToolError as exc:  # a server's tool gone since the ask: refused in words
        _record_refused_step(
            turn,
            worker,
            ToolCall(pending["tool"], pending["raw_args"]),
            str(exc),
            pending["state_after"],
            clear_pending=True,
        )
        return Advance(True, "tool")
    state_after = pending["state_after"]
    if pending["answer"] == "approved":
        _run_step(turn, worker, tool, pending["raw_args"], state_after, clear_pending=True)
    else:
        reason = str(pending.get("reason") or "")
        _record_refused_step(
            turn,
            worker,
            ToolCall(tool.name, pending["raw_args"]),
            SAID_NO_BECAUSE.for_model(reason=reason) if reason else SAID_NO.for_model(),
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
        tool = get_tool(call.tool, turn.conversation.agent)
        family, effect = tool.family, tool.effect
    except ToolError:
        family, effect = "", Effect.READ
    with transaction.atomic():
        conversation = Conversation.objects.lock(turn.conversation_id)
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
        events.publish_chat(conversation, turn=turn.number)


def _refusal_now(
    conversation: Conversation, toolset: ToolSet, tool: Tool, folder: str, *, approved: bool
) -> str:
    """Why ``tool`` may not run in this chat, in ``folder``, as it is now, or "".

    An approved step is looked at again as a new call would be: the person's OK was
    for the chat as it was, so a switch to Plan mode, a tool set that no longer has
    the tool, or someone else's words coming in each refuse it (ADR 0134). A tool that
    uses the folder runs only beneath the folders the chat's account may use (chats/roots.py).
    """
    uses_folder = _uses_folder(tool)
    refused = toolset.refusal(tool.name, uses_folder=uses_folder)
    if not refused and uses_folder:
        refused = roots.folder_refusal(conversation.owner, folder)
    if refused or tool in tools_offered(conversation):
        return refused
    if not approved:
        return NOT_OFFERED.for_model(tool=tool.name)
    if conversation.mode == Mode.PLAN and tool.effect == Effect.WRITE:
        return IN_PLAN_MODE_NOW.for_model(tool=tool.name)
    return NOT_OFFERED_NOW.for_model(tool=tool.name)


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
        conversation = Conversation.objects.lock(conversation.pk)
        if not _still_mine(turn.pk, worker):
            return
        # Checked again under the chat's lock: a tool asked for, or approved, before
        # the chat changed is refused in words, never run.
        toolset = tool_set_for(conversation)
        # A chat with other people works in the persona's own folder, never the owner's.
        folder = toolset.folder or turn.folder
        refused = _refusal_now(conversation, toolset, tool, folder, approved=clear_pending)
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
        events.publish_chat(conversation, turn=turn.number, step=step.number, family=tool.family)

    ctx = ToolContext(
        conversation=conversation,
        turn=turn,
        folder=folder,
        step_id=step.pk,
        worker=worker,
        interrupted=lambda: _command_interrupted(turn.pk, worker),
        start_task=_task_starter(conversation),
        sandbox_required=toolset.sandbox_required,
    )
    error = ""
    result_text = ""
    try:
        if refused:
            raise ToolError(refused)
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
            conversation = Conversation.objects.lock(conversation.pk)
        except Conversation.DoesNotExist:
            return  # the chat was deleted while the tool ran (its command was ended)
        current = Turn.objects.get(pk=turn.pk)
        still_mine = current.state == TurnState.RUNNING and current.claimed_by == worker
        if ctx.at_step_end is not None and not error:
            if still_mine:
                result_text, error = _step_end_writes(ctx, known)
            else:
                result_text, error = "", ERR_REPLY_ENDED_FIRST
        Step.objects.filter(pk=step.pk).update(
            result=result_text[: LIMITS.tool_result_chars],
            error=error[: LIMITS.tool_result_chars],
            files=changed,
            changes=ctx.changes,
            ended_at=timezone.now(),
        )
        files = list(current.files_changed)
        files.extend(path for path in changed if path not in files)
        update: dict[str, Any] = {
            "files_changed": files,
            "step_family": "",
            "step_started_at": None,
        }
        if still_mine:
            update["engine_state"] = new_state
            if clear_pending:
                update["pending_action"] = None
        Turn.objects.filter(pk=turn.pk).update(**update)
        if ctx.let_go and still_mine:
            # The reply lets go of its turn (wait_for): it ends here and carries on when woken.
            current.files_changed = files
            turn_end_locked(
                conversation=conversation,
                turn=current,
                state=TurnState.COMPLETED,
                reason=ctx.let_go,
            )
        events.publish_chat(conversation, turn=turn.number, step=step.number, files=changed)


def _step_end_writes(ctx: ToolContext, known) -> tuple[str, str]:
    """Run a tool's writes that commit with the step's end (``ToolContext.at_step_end``).

    Precondition: inside the step's last transaction, holding the chat's lock. A
    refusal rolls back only what the writes did (a savepoint) and lets nothing go.
    """
    assert ctx.at_step_end is not None, "only a tool that set at_step_end has writes to make"
    try:
        with transaction.atomic():
            done = ctx.at_step_end()
    except ToolError as exc:
        ctx.let_go = ""
        return "", scrub_secrets(str(exc), known=known)
    return scrub_secrets(done.text, known=known), ""


def _task_starter(parent: Conversation):
    """``ToolContext.start_task`` for a step of ``parent``'s reply."""

    def start(*, title: str, prompt: str = "", script: list | None = None) -> Task:
        if script is not None:
            validate_script(script, where="script")  # ScriptError, a ValueError
        try:
            return task_start(parent=parent, title=title, prompt=prompt, script=script)
        except ConchError as exc:
            raise ToolError(str(exc)) from None

    return start


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
