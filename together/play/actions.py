"""A scenario's ``actions``: the runner killed and restarted, the clock moved, the person's
presses and changes to a chat, someone else's words (format: docs/scenarios.md).

Each goes through the service the real thing calls: ``turn_approve``/``turn_deny`` for
the Approve and Deny buttons, ``conversation_delete``, ``conversation_set_mode``,
``inbound_set``, ``someone_elses_words_came`` then ``message_send`` as a chat app's
group does, ``turns_recover`` and ``tasks_make_room`` as a runner does when it starts.

A kill is what a crash leaves: the play's one runner holds the reply's claim and lease,
the step it was in is written as started and never ended (``cut: before``: the tool never
ran; ``after``: it ran, its result was never written; ``intake``: the runner dies while the
reply takes in what came to it, after every note provider ran and before their notes are
written, raising out of the intake's transaction as a crash would), and nothing is played
until a ``restart``. The clock is the play's own (``time_machine``): it runs as the real one does
and moves forward at a ``clock`` action; sweeps (waits' 30-second look, the gateway's
maintenance, ...) run when their period has passed on it, and all of them once when a
runner starts, as a real runner's first loop runs them.

:class:`ModelInputs` records what each reply's engine was given at each action: the
messages an OpenAI-compatible model would be sent (``messages_for``), so a report can
prove what a chat saw.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone

from chats import hooks
from chats.engines import engine_for, register_engine
from chats.engines.base import Decision, Engine, EngineInput, ToolCall
from chats.engines.openai_compat import messages_for
from chats.models import Agent, Conversation
from chats.runtime.chats import ConchError, conversation_set_mode, someone_elses_words_came
from chats.runtime.claims import turn_claim_one, turns_recover
from chats.runtime.stepping import turn_advance
from chats.runtime.turns import (
    conversation_delete,
    message_send,
    tasks_make_room,
    turn_approve,
    turn_deny,
)
from chats.tools.registry import ToolError, get_tool, register
from together.messages import inbound_set
from together.play.scenario import (
    ActionBase,
    Approve,
    Clock,
    Delete,
    Deny,
    Kill,
    Restart,
    SetInbound,
    SetMode,
    SomeoneElse,
)

SECOND_PERSON = "second"
BACKGROUND_PREFIX = "conch-gateway-"  # the gateway's sweeps run their work on such threads

ERR_ACTION_FAILED = "actions[{index}] at tick {at} ({do} on chat {chat!r}): {why}"
ERR_NOTHING_TO_KILL = "it has no reply running to kill."
ERR_DEAD_CHAT = "the chat was deleted."


class RunnerKilled(BaseException):
    """The runner died here. A BaseException, so nothing the runtime catches stops it."""


def second_persona(person, root) -> Agent:
    """The second person's own persona, as the owner gives one in the admin."""
    agent, _ = Agent.objects.get_or_create(
        slug=SECOND_PERSON, defaults={"name": "Second", "workspace": str(root), "owner": person}
    )
    return agent


def second_person():
    """Someone else with an account on the same Conch: none of the owner's chats are theirs."""
    User = get_user_model()
    person = User.objects.filter(username=SECOND_PERSON).first()
    if person is None:
        person = User(username=SECOND_PERSON, is_staff=False, is_superuser=False)
        person.set_unusable_password()
        person.save()
    return person


# ---------------------------------------------------------------------------
# What each reply saw


@dataclass
class _Seen:
    tick: int | None
    action: int
    messages: list[dict[str, Any]]


@dataclass
class ModelInputs:
    """An engine around the play's own: records each action's input, and arms a kill."""

    inner: Engine
    tick: int | None = None
    seen: dict[tuple[str, int], list[_Seen]] = field(default_factory=dict)
    killing: tuple[int, str] | None = None  # (the turn's pk, "before" or "after")
    swapped: list[Any] = field(default_factory=list)  # tools to put back after a kill

    @property
    def name(self) -> str:
        return self.inner.name

    def next_action(self, given: EngineInput) -> Decision:
        messages = messages_for(given.system_text, given.load_transcript())
        key = (given.conversation.public_id, given.turn.number)
        seen = self.seen.setdefault(key, [])
        seen.append(_Seen(self.tick, len(seen) + 1, messages))
        decision = self.inner.next_action(given)
        if self.killing and self.killing[0] == given.turn.pk:
            cut = self.killing[1]
            if isinstance(decision.action, ToolCall):
                self._cut_tool(decision.action.tool, cut)
            elif cut == "before":
                raise RunnerKilled  # the action was chosen; nothing of it was written
        return decision

    def _cut_tool(self, name: str, cut: str) -> None:
        """The tool's next run is where the runner dies: before it runs, or after."""
        try:
            tool = get_tool(name)
        except ToolError:  # an unknown tool is refused as a step: nothing runs to cut
            return
        real = tool.run

        def run(ctx, args):
            if cut == "before":
                raise RunnerKilled
            real(ctx, args)
            raise RunnerKilled

        self.swapped.append(tool)
        register(dataclasses.replace(tool, run=run))

    def restore(self) -> None:
        while self.swapped:
            register(self.swapped.pop())

    def for_report(self, chat: str, turn: int) -> list[dict[str, Any]]:
        return [
            {"tick": s.tick, "action": s.action, "messages": s.messages}
            for s in self.seen.get((chat, turn), [])
        ]


@contextmanager
def inputs_recorded(agent: Agent) -> Iterator[ModelInputs]:
    """The engine of the play's chats (the scripted one) wrapped, for the length of the play."""
    inner = engine_for(agent)
    recorder = ModelInputs(inner)
    register_engine(recorder)
    try:
        yield recorder
    finally:
        recorder.restore()
        register_engine(inner)


# ---------------------------------------------------------------------------
# The runner, the clock and the sweeps


@dataclass
class PlayRunner:
    """The play's one runner: alive or killed, its sweeps run on the play's clock."""

    inputs: ModelInputs
    traveller: Any = None  # time_machine's, once the clock has moved
    coordinates: Any = None
    alive: bool = True
    moved: dt.timedelta = dt.timedelta(0)  # how far the play's clock has moved
    last_sweep: dict[str, dt.timedelta] = field(default_factory=dict)
    killed: list[dict[str, Any]] = field(default_factory=list)
    restarts: list[dict[str, Any]] = field(default_factory=list)
    sweeps_run: list[dict[str, Any]] = field(default_factory=list)

    def clock_move(self, by: dt.timedelta, tick: int) -> None:
        if self.traveller is None:
            import time_machine  # only a play whose clock moves needs it (and it loads pytest)

            self.traveller = time_machine.travel(timezone.now(), tick=True)
            self.coordinates = self.traveller.start()
        self.coordinates.shift(by)
        self.moved += by
        for sweep in list(hooks.sweeps):
            since = self.moved - self.last_sweep.get(sweep.name, dt.timedelta(0))
            if since.total_seconds() >= sweep.every:
                self._sweep(sweep, tick)

    def stop(self) -> None:
        if self.traveller is not None:
            self.traveller.stop()
            self.traveller = None

    def restart(self, tick: int) -> None:
        """A fresh runner starts: recovery as a lone runner does, room for tasks, every sweep."""
        recovered = turns_recover()
        tasks_make_room()
        self.alive = True
        self.restarts.append(
            {
                "tick": tick,
                "recovered": [
                    {"chat": t.conversation.public_id, "reply": t.number, "state": t.state}
                    for t in recovered
                ],
            }
        )
        for sweep in list(hooks.sweeps):
            self._sweep(sweep, tick)

    def _sweep(self, sweep: hooks.Sweep, tick: int) -> None:
        self.last_sweep[sweep.name] = self.moved
        sweep.run()
        # The gateway's sweeps do their work on threads of their own: a play waits for them.
        for thread in threading.enumerate():
            if (
                thread.name.startswith(BACKGROUND_PREFIX)
                and thread is not threading.current_thread()
            ):
                thread.join()
        self.sweeps_run.append({"tick": tick, "sweep": sweep.name})

    def kill_during(self, *, turn_id: int, cut: str, worker: str) -> None:
        """Play one action of the reply with the runner dying in it (see the module)."""
        if not turn_claim_one(turn_id=turn_id, worker=worker):
            return
        if cut == CUT_INTAKE:
            hooks.add_note_provider(_dies_at_intake)
        else:
            self.inputs.killing = (turn_id, cut)
        try:
            # An action that returns (words, a question) was written whole; the runner
            # dies before it lets the reply go, so its claim and lease stay.
            turn_advance(turn_id=turn_id, worker=worker, honour_delays=False)
        except RunnerKilled:
            pass
        finally:
            hooks.note_providers.pop(_dies_at_intake, None)
            self.inputs.killing = None
            self.inputs.restore()
        self.alive = False


CUT_INTAKE = "intake"


def _dies_at_intake(turn, at_start: bool) -> list:
    """The last note provider while a ``cut: intake`` kill is armed: every intake before it
    (messages marked read, taint carried) has run, and no note of theirs is written yet."""
    raise RunnerKilled


def action_do(
    action: ActionBase, *, index: int, chats: dict[str, Conversation], runner: PlayRunner, tick: int
) -> str:
    """Do one of the scenario's actions (not a kill, which the play arms); why it failed, or ""."""
    if isinstance(action, Restart):
        runner.restart(tick)
        return ""
    if isinstance(action, Clock):
        runner.clock_move(action.by, tick)
        return ""
    chat = chats[action.chat]  # type: ignore[attr-defined]
    if not Conversation.objects.filter(pk=chat.pk).exists():
        return _failed(action, index, ERR_DEAD_CHAT)
    try:
        if isinstance(action, Delete):
            conversation_delete(conversation=chat)
        elif isinstance(action, Approve | Deny):
            turn = chat.turns.filter(ended_at__isnull=True).first()
            if turn is None:
                raise ConchError("it has no reply waiting for the person's OK.")
            (turn_approve if isinstance(action, Approve) else turn_deny)(turn=turn)
        elif isinstance(action, SetMode):
            conversation_set_mode(conversation=chat, mode=action.mode)
        elif isinstance(action, SetInbound):
            inbound_set(conversation=chat, inbound=action.inbound)
        elif isinstance(action, SomeoneElse):
            chat = someone_elses_words_came(conversation=chat, who=action.who)
            message_send(conversation=chat, text=action.text)
    except ConchError as exc:
        return _failed(action, index, str(exc))
    return ""


def kill_target(
    action: Kill, *, index: int, chats: dict[str, Conversation], runnable: dict
) -> tuple[int | None, str]:
    """The reply a kill cuts: the chat's runnable reply at this tick, or why there is none."""
    chat = chats[action.chat]
    if chat.pk not in runnable:
        return None, _failed(action, index, ERR_NOTHING_TO_KILL)
    return runnable[chat.pk], ""


def _failed(action: ActionBase, index: int, why: str) -> str:
    return ERR_ACTION_FAILED.format(
        index=index,
        at=action.at,
        do=getattr(action, "do", ""),  # every action names what it does
        chat=getattr(action, "chat", ""),
        why=why,
    )
