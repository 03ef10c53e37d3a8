"""The transcript as Chat Completions messages, by the mapping in the package's docstring,
and the context budget's arithmetic.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chats.engines.base import (
    STEP,
    Line,
)
from chats.engines.openai_compat.config import CHARS_PER_TOKEN, CUT_EVERY, MESSAGE_OVERHEAD
from chats.models import EntryKind, EntryRole
from chats.quoting import conch_note, is_conch_note, not_as_conch

if TYPE_CHECKING:
    from chats.tools.registry import Tool

RECAP_FRAME = conch_note("the earlier part of this chat, summarized to fit the model's context:")
FOREIGN_FRAME = conch_note("passed on by Conch; the person didn't write this:")
EMPTY_START = conch_note("a new reply started, with nothing new to read.")


def passed_on(text: str, frame: str = FOREIGN_FRAME) -> str:
    """Words Conch passes on without having written them (a recap a model wrote, say):
    after ``frame``, with nothing in them speaking as Conch."""
    return f"{frame}\n{not_as_conch((text or '').strip())}"


def conch_framed(text: str) -> str:
    """Conch's words as the model reads them: a note in Conch's frame stays as it is; any
    other words Conch wrote down go after :data:`FOREIGN_FRAME`."""
    text = (text or "").strip()
    return text if is_conch_note(text) else passed_on(text)


def tool_call_id(turn: int | None, step: int) -> str:
    """The id a step's call is sent back under: nine letters or digits, the same every time.

    Mistral's API and vLLM's ``--tokenizer-mode mistral`` refuse any other id
    (mistral-common's ``ToolCall`` validates ``^[a-zA-Z0-9]{9}$``).
    """
    return hashlib.sha256(f"{turn or 0}:{step}".encode()).hexdigest()[:9]


def _step_result(line: Line) -> str:
    if line.data.get("error"):
        return f"Error: {line.text}"
    return line.text or "(no output)"


def split_replies(lines: Iterable[Line]) -> list[list[Line]]:
    """The transcript cut at each reply's first line; a line outside any reply stays
    with the reply it was written during or after."""
    replies: list[list[Line]] = []
    seen: set[int] = set()
    for line in lines:
        if not replies or (line.turn is not None and line.turn not in seen):
            replies.append([])
            if line.turn is not None:
                seen.add(line.turn)
        replies[-1].append(line)
    return replies


class _Messages:
    """Builds Chat Completions messages from transcript lines, by the mapping above."""

    def __init__(
        self,
        system_text: str | None,
        *,
        held: Sequence[str] = (),
        carry: Carry | None = None,
    ) -> None:
        self.out: list[dict[str, Any]] = []
        if system_text is not None:
            self.out.append({"role": "system", "content": system_text})
        self.held: list[str] = list(held)
        self.carry = carry
        self.carried = 0  # steps of the carry's reply seen so far

    def reply(self, lines: list[Line]) -> None:
        turn = lines[0].turn if lines else None
        rest = list(lines)
        if turn is not None:
            prompt = None
            first = rest[0]
            if first.kind == EntryKind.MESSAGE and first.role in (
                EntryRole.PERSON,
                EntryRole.CONCH,
            ):
                prompt = rest.pop(0)
            start_notes = [
                line
                for line in rest
                if line.turn == turn
                and line.kind == EntryKind.NOTE
                and line.data.get("at") == "start"
            ]
            rest = [line for line in rest if line not in start_notes]
            parts = [*self.held, *(conch_framed(n.text) for n in start_notes)]
            if prompt is not None:
                parts.append(
                    prompt.text if prompt.role == EntryRole.PERSON else conch_framed(prompt.text)
                )
            self.held = []
            self.out.append({"role": "user", "content": "\n\n".join(parts) or EMPTY_START})
        for line in rest:
            self.line(line)

    def _carry_back(self, line: Line, message: dict[str, Any], call: dict[str, Any]) -> None:
        """What the server asked to have back with its own calls, within the reply that made
        them: DeepSeek's ``reasoning_content`` and Gemini's ``thought_signature``."""
        if self.carry is None or line.turn != self.carry.turn:
            return
        index, self.carried = self.carried, self.carried + 1
        if index >= len(self.carry.calls):
            return
        kept = self.carry.calls[index]
        if kept.get("extra_content"):
            call["extra_content"] = kept["extra_content"]
        field_name = kept.get("reasoning_field")
        if field_name and field_name not in message:
            message[field_name] = kept.get("reasoning") or ""

    def line(self, line: Line) -> None:
        last = self.out[-1] if self.out else None
        if line.kind == EntryKind.CARD:
            return
        if line.kind == STEP:
            call = {
                "id": tool_call_id(line.turn, int(line.data.get("step") or 0)),
                "type": "function",
                "function": {
                    "name": line.data.get("tool", ""),
                    "arguments": json.dumps(
                        line.data.get("args") or {}, ensure_ascii=False, sort_keys=True
                    ),
                },
            }
            if last and last["role"] == "assistant" and not last.get("tool_calls"):
                last["tool_calls"] = [call]
            else:
                self.out.append({"role": "assistant", "content": None, "tool_calls": [call]})
            self._carry_back(line, self.out[-1], call)
            content = "\n\n".join([_step_result(line), *self.held])
            self.held = []
            self.out.append({"role": "tool", "tool_call_id": call["id"], "content": content})
            return
        if line.role == EntryRole.ASSISTANT:
            if last and last["role"] == "assistant" and not last.get("tool_calls"):
                last["content"] = f"{last['content']}\n\n{line.text}"
            else:
                self.out.append({"role": "assistant", "content": line.text})
            return
        if line.role == EntryRole.PERSON:
            parts = [*self.held, line.text]
            self.held = []
            self.out.append({"role": "user", "content": "\n\n".join(parts)})
            return
        # Conch's words (notes, a recap, words it passed on): beside the last tool
        # result if that is where the transcript stands, else held for the next place.
        text = (
            passed_on(line.text, RECAP_FRAME)
            if line.kind == EntryKind.RECAP
            else conch_framed(line.text)
        )
        if last and last["role"] == "tool":
            last["content"] = f"{last['content']}\n\n{text}"
        else:
            self.held.append(text)


@dataclass(frozen=True)
class Carry:
    """What goes back with the calls of the reply being written, in the order they were made:
    each ``{"reasoning_field", "reasoning", "extra_content"}`` (see ``_carried``)."""

    turn: int
    calls: tuple[dict[str, Any], ...]


def messages_for(
    system_text: str, lines: Iterable[Line], *, recap: str = "", carry: Carry | None = None
) -> list[dict[str, Any]]:
    """The request's messages for these transcript lines (see the module's mapping)."""
    builder = _Messages(
        system_text, held=[passed_on(recap, RECAP_FRAME)] if recap else (), carry=carry
    )
    for reply in split_replies(lines):
        builder.reply(reply)
    return alternate(builder.out)


def alternate(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two user messages in a row (a reply that failed before the model said anything) become
    one: Gemma's and Mistral's chat templates raise "roles must alternate" otherwise."""
    out: list[dict[str, Any]] = []
    for message in messages:
        last = out[-1] if out else None
        if last and last["role"] == message["role"] == "user":
            out[-1] = {**last, "content": f"{last['content']}\n\n{message['content']}"}
        else:
            out.append(message)
    return out


def estimate_tokens(messages: Iterable[dict[str, Any]]) -> int:
    total = 0
    for message in messages:
        chars = len(message.get("content") or "")
        for call in message.get("tool_calls") or ():
            chars += len(call["function"]["name"]) + len(call["function"]["arguments"]) + 16
        total += MESSAGE_OVERHEAD + chars // CHARS_PER_TOKEN
    return total


def function_specs(tools: Iterable[Tool]) -> list[dict[str, Any]]:
    """The tools as a request offers them."""
    return [{"type": "function", "function": t.as_function_spec()} for t in tools]


def request_tokens(system: str, tools: list[dict[str, Any]]) -> int:
    """What every request of a chat sends before its transcript: the system text and the
    tools' schemas (``function_specs``)."""
    return (
        estimate_tokens([{"role": "system", "content": system}])
        + len(json.dumps(tools)) // CHARS_PER_TOKEN
    )


def _reply_tokens(lines: list[Line]) -> int:
    builder = _Messages(None)
    builder.reply(lines)
    return estimate_tokens(builder.out) + len("\n\n".join(builder.held)) // CHARS_PER_TOKEN


def choose_cut(sizes: Sequence[int], room: int) -> int | None:
    """How many of the oldest replies to fold into the recap so the rest fits ``room``.

    The cut is a multiple of CUT_EVERY (or all but the last reply), the smallest
    that fits, so it stays put while the chat grows. None: not even the last fits.
    """
    last = len(sizes) - 1
    candidates = [*range(CUT_EVERY, last, CUT_EVERY), *([last] if last >= 1 else [])]
    for cut in candidates:
        if sum(sizes[cut:]) <= room:
            return cut
    return None
