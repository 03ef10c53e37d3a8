"""The Engine protocol: given what a reply has so far, choose its next action.

An engine never writes to the database or runs a tool itself; the runtime does
both, records the step, and hands the engine's new state back next time. (A
model engine reads its own persona's settings and key, nothing else.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from chats.models import Conversation, Turn
    from chats.tools.registry import Tool


# The kind of a transcript line that is a step, beside the entries' kinds (EntryKind).
STEP = "step"


@dataclass(frozen=True)
class Line:
    """One transcript line as an engine sees it.

    Besides the entries, the transcript holds each step, where it happened:
    ``role="tool", kind=STEP``, its text the tool's result (or its error), its
    data ``{"tool", "args", "step", "error"}``. ``turn`` is the reply's number,
    None for a line outside any reply.
    """

    role: str
    kind: str
    text: str
    data: dict[str, Any] = field(default_factory=dict)
    turn: int | None = None


@dataclass(frozen=True)
class EngineInput:
    conversation: Conversation
    turn: Turn
    system_text: str
    load_transcript: Callable[[], tuple[Line, ...]]
    notes: tuple[str, ...]
    tools: tuple[Tool, ...]
    state: dict[str, Any]
    # Shows the reply's words so far in the page, live; returns False once the
    # reply was stopped, so a model engine can stop generating.
    on_text: Callable[[str], bool] | None = None
    # Set once the reply is stopped: an engine waiting on a model (or between tries)
    # stops waiting at once rather than at its next step.
    halt: threading.Event | None = None
    # Told before a model engine waits to try a call again: how long, and whether the
    # server asked for the wait (a 429's Retry-After), so the page can say so.
    on_wait: Callable[[float, bool], None] | None = None
    # Keeps the chat's recap (its oldest replies, summarized to fit the model's context:
    # ``{"replies", "digest", "text"}``) as ``Conversation.context_recap``, so the next
    # reply, and a restarted server, fold on from it rather than summarize it all again.
    keep_recap: Callable[[dict[str, Any]], None] | None = None


@dataclass(frozen=True)
class ToolCall:
    tool: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Say:
    """Words from the assistant. ``data`` is kept on the entry, for the page
    (``{"connect_model": true}`` shows the link to Connect a model)."""

    text: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Ask:
    """A question to the person: the reply ends needing them."""

    text: str


@dataclass(frozen=True)
class End:
    """The reply ends, with these last words if any. ``data`` is kept on their entry, for
    the page (``{"refusal": true}``: the model refused, in these words)."""

    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fail:
    reason: str


Action = ToolCall | Say | Ask | End | Fail


@dataclass(frozen=True)
class Decision:
    action: Action
    state: dict[str, Any]
    delay: float = 0.0


class Engine(Protocol):
    @property
    def name(self) -> str: ...

    def next_action(self, given: EngineInput) -> Decision: ...


class EngineError(Exception):
    """The engine could not choose; the reply fails with this reason."""
