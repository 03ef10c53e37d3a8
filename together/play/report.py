"""What a play did, read off the run's records into the report (rendered by render.py).

Paths are written relative to the run's root and the temporary folder's name
never shows; ids are whatever the records hold (``m_1``, ``chain_1``, ``t_1``
inside ``counted_ids()``) and no time is printed, so a report is the same
bytes every run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chats import events
from chats.models import Conversation, EntryKind, TaintRise, Turn, TurnState
from chats.timeline import chat_timeline
from together.messages import CHAT_MESSAGE
from together.models import Chain, ChainPair, ChatMessage, Wait
from together.play.presses import arrived

if TYPE_CHECKING:
    from together.play.actions import PlayRunner
from together.play.scenario import Scenario

SHOWN_FILE_LIMIT = 4_000


class RunPaths:
    """Writes paths relative to the run's root; the temporary folder's name never shows."""

    def __init__(self, root: Path):
        real = os.path.realpath(root)
        self.root = real
        outer = os.path.dirname(real)
        self.replacements: list[tuple[str, str]] = []
        for base in dict.fromkeys([real, str(root)]):
            self.replacements += [(base + "/", ""), (base, ".")]
        for base in dict.fromkeys([outer, os.path.dirname(str(root))]):
            self.replacements.append((base, "<run>"))

    def text(self, value: str) -> str:
        for old, new in self.replacements:
            value = value.replace(old, new)
        return value

    def path(self, value: str) -> str:
        if value == self.root:
            return "."
        if value.startswith(self.root + "/"):
            return value[len(self.root) + 1 :]
        return self.text(value)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value


EVENT_FIELDS = (
    "status",
    "turn",
    "step",
    "family",
    "files",
    "ended",
    "asks",
    "answer",
    "queued",
    "task",
    "state",
    "taint",
    "recovered",
    "message_id",
)


@dataclass
class _Timeline:
    """What the ticks say, read off the events: when each reply started, and each message's states."""

    reply_ticks: dict[tuple[str | None, int], int | None] = field(default_factory=dict)
    message_history: dict[str, list[dict]] = field(default_factory=dict)

    @classmethod
    def of(cls, seen: list[tuple[int | None, events.Event]]) -> _Timeline:
        timeline = cls()
        for tick, event in sorted(seen, key=lambda pair: pair[1].seq):
            data = event.data
            if event.type == events.STATUS and "turn" in data and "ended" not in data:
                timeline.reply_ticks.setdefault((event.conversation_id, data["turn"]), tick)
            if event.type == CHAT_MESSAGE and data.get("message_id"):
                history = timeline.message_history.setdefault(data["message_id"], [])
                # Both sides hear of each change; a state is listed once, when it began.
                if not history or history[-1]["state"] != data.get("state"):
                    history.append({"tick": tick, "state": data.get("state")})
        return timeline


def report_make(
    scenario: Scenario,
    *,
    root: Path,
    ticks: int,
    seen: list[tuple[int | None, events.Event]],
    error: str,
    presses: dict[str, list[dict]],
    runner: PlayRunner | None = None,
) -> dict:
    """The report of a play that ended after ``ticks``, from the records and the events ``seen``,
    with what each reply's engine was given (``runner.inputs``) and what the runner did."""
    paths = RunPaths(root)
    names = {spec.public_id: spec.name for spec in scenario.chats}
    persons = {spec.public_id: spec.person for spec in scenario.chats}
    timeline = _Timeline.of(seen)
    by_chat: dict[str | None, list[dict]] = {}
    for _, event in sorted(seen, key=lambda pair: pair[1].seq):
        data = {k: paths.value(event.data[k]) for k in EVENT_FIELDS if k in event.data}
        if "files" in data:
            data["files"] = [paths.path(p) for p in event.data["files"]]
        by_chat.setdefault(event.conversation_id, []).append(
            {"seq": event.seq, "type": event.type, "chat": event.conversation_id, "data": data}
        )
    chats = Conversation.objects.all()
    order = {spec.public_id: i for i, spec in enumerate(scenario.chats)}
    ordered = sorted(chats, key=lambda c: (order.get(c.public_id, len(order)), c.pk))
    reports = []
    for chat in ordered:
        shown = _chat_report(
            chat, names.get(chat.public_id, chat.public_id), paths, by_chat, timeline
        )
        for reply in shown["replies"]:
            given = runner.inputs.for_report(chat.public_id, reply["number"]) if runner else []
            reply["inputs"] = paths.value(given)
        shown["person"] = persons.get(chat.public_id, "owner")
        shown["presses"] = presses.get(chat.public_id, [])
        shown["messages"] = [
            {**paths.value(row), "history": timeline.message_history.get(row["id"], [])}
            for row in chat_messages(chat)
        ]
        shown["waits"] = paths.value(chat_waits(chat))
        reports.append(shown)
    known = {chat.public_id for chat in ordered}
    other = [e for key, found in by_chat.items() if key not in known for e in found]
    report: dict[str, Any] = {
        "description": scenario.description,
        "ticks": ticks,
        "chats": reports,
        "chains": paths.value(chains()),
        "other_events": sorted(other, key=lambda e: e["seq"]),
        "deleted": [spec.public_id for spec in scenario.chats if spec.public_id not in known],
        "runner": {
            "alive": runner.alive if runner else True,
            "kills": runner.killed if runner else [],
            "restarts": runner.restarts if runner else [],
            "sweeps": runner.sweeps_run if runner else [],
            "clock_moved_seconds": int(runner.moved.total_seconds()) if runner else 0,
        },
        "files_after": _files_after(Path(paths.root), paths),
    }
    if error:
        report["error"] = error
    return report


def _chat_report(
    chat: Conversation,
    name: str,
    paths: RunPaths,
    by_chat: dict[str | None, list[dict]],
    timeline: _Timeline,
) -> dict:
    entries = list(chat.entries.select_related("turn").order_by("seq"))
    replies = []
    for turn in chat.turns.prefetch_related("steps").order_by("number"):
        pending = turn.pending_action or {}
        replies.append(
            {
                "number": turn.number,
                "tick": timeline.reply_ticks.get((chat.public_id, turn.number)),
                "state": turn.state,
                "started_by": turn.started_by,
                "chain": turn.chain_id,
                "lane": turn.lane,
                "end_reason": paths.text(turn.end_reason),
                "waiting_for": (
                    {"tool": pending["tool"], "args": paths.value(pending.get("args", {}))}
                    if turn.state == TurnState.NEEDS_YOU and pending.get("tool")
                    else None
                ),
                "files_changed": [paths.path(p) for p in turn.files_changed],
                "steps": [
                    {
                        "number": step.number,
                        "tool": step.tool,
                        "family": step.family,
                        "effect": step.effect,
                        "args": paths.value(step.args),
                        "result": paths.text(step.result),
                        "error": paths.text(step.error),
                        "files": [paths.path(p) for p in step.files],
                    }
                    for step in sorted(turn.steps.all(), key=lambda s: s.number)
                ],
            }
        )

    def line(entry) -> dict:
        return {
            "reply": entry.turn.number if entry.turn else None,
            "role": entry.role,
            "kind": entry.kind,
            "text": paths.text(entry.text),
        }

    return {
        "name": name,
        "id": chat.public_id,
        "title": chat.title,
        "session_key": chat.session_key,
        "folder": paths.path(chat.folder),
        "origin": chat.origin,
        "origin_channel": chat.origin_channel,
        "mode": chat.mode,
        "inbound": chat.effective_inbound,
        "taint": chat.taint,
        "status": chat.status,
        "transcript": [line(e) for e in entries],
        "replies": replies,
        "notes": [line(e) for e in entries if e.kind == EntryKind.NOTE],
        "cards": [line(e) for e in entries if e.kind == EntryKind.CARD],
        "events": by_chat.get(chat.public_id, []),
        "trust": trust_timeline(chat, paths),
    }


def trust_timeline(chat: Conversation, paths: RunPaths) -> list[dict[str, Any]]:
    """The chat's trust timeline as its person reads it on the chat's page
    (``chats.timeline.chat_timeline``): each rise of its taint in the page's own words,
    the reply and step that carried it in, and the chats its care came from (``from``),
    each with why it was careful in turn, back to where it began. No time is printed
    and chats are named by their ids in the play, so a report is the same every run."""
    timeline = chat_timeline(chat, viewer_id=chat.owner_id)
    rise_ids = {row.id for row in timeline.rows}
    rise_ids |= {hop.rise_id for row in timeline.rows for hop in row.path}
    rises = TaintRise.objects.select_related("turn", "step").in_bulk(rise_ids)
    return [
        {
            "before": row.before,
            "after": row.after,
            **_carried(rises[row.id]),
            "said": paths.text(row.did.text),
            "from": [
                {
                    "chat": hop.chat.public_id,
                    "title": hop.chat.title,
                    **_carried(rises[hop.rise_id]),
                    "had": paths.text(hop.had.text),
                }
                for hop in row.path
            ],
            **({"goes_on": paths.text(row.path_goes_on.text)} if row.path_goes_on else {}),
        }
        for row in timeline.rows
    ]


def _carried(rise: TaintRise) -> dict[str, Any]:
    """The rise's cause, and the reply and step of its chat that carried it in."""
    return {
        "cause": rise.cause,
        "reply": rise.turn.number if rise.turn else None,
        "step": rise.step.number if rise.step else None,
    }


def _files_after(root: Path, paths: RunPaths) -> dict[str, str]:
    shown: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(filenames):
            full = os.path.join(dirpath, filename)
            data = Path(full).read_bytes()
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = f"({len(data)} bytes, not text)"
            if len(text) > SHOWN_FILE_LIMIT:
                text = text[:SHOWN_FILE_LIMIT] + f"\n… ({len(text)} characters)"
            shown[paths.path(full)] = paths.text(text)
    return dict(sorted(shown.items()))


def _reply_number(turn_pk: int | None, numbers: dict[int, int]) -> int | None:
    return numbers.get(turn_pk) if turn_pk is not None else None


def chat_messages(chat: Conversation) -> list[dict[str, Any]]:
    """The chat's ``chat.message`` cards, in its transcript's order, each with its message as it is now.

    ``number`` is the message's place among those that came to this chat (the
    number a press names); it is None on the sending side.
    """
    cards = list(
        chat.entries.filter(kind=EntryKind.CARD, data__card="chat.message").order_by("seq")
    )
    ids = [card.data.get("message_id") for card in cards]
    messages = {m.message_id: m for m in ChatMessage.objects.filter(message_id__in=ids)}
    numbers = {m.message_id: n for n, m in enumerate(arrived(chat), start=1)}
    turns = dict(
        Turn.objects.filter(
            pk__in=[m.read_in_turn_id for m in messages.values() if m.read_in_turn_id]
        ).values_list("pk", "number")
    )
    rows = []
    for card in cards:
        message = messages.get(card.data.get("message_id"))
        if message is None:
            continue
        to = card.data.get("side") == "to"
        rows.append(
            {
                "id": message.message_id,
                "side": "to" if to else "from",
                "number": None if to else numbers.get(message.message_id),
                "chat": message.receiver_public_id if to else message.sender_public_id,
                "title": message.receiver_title if to else message.sender_title,
                "card": card.text,
                "text": message.text,
                "start_reply": message.start_reply,
                "chain": message.chain_id,
                "state": message.state,
                "reason": message.reason,
                "passed_on": message.passed_on_at is not None,
                "read_in_reply": _reply_number(message.read_in_turn_id, turns),
            }
        )
    return rows


def chat_waits(chat: Conversation) -> list[dict[str, Any]]:
    """The chat's waits (``wait_for``), oldest first: what for, and how each ended."""
    return [
        {
            "kind": wait.kind,
            "target": wait.target_public_id,
            "title": wait.target_title,
            "chain": wait.chain_id,
            "state": wait.state,
            "headline": wait.outcome.get("headline", ""),
            "bare": bool(wait.outcome.get("bare", False)),
        }
        for wait in Wait.objects.filter(waiter=chat).order_by("pk")
    ]


def _chain_order(chain_id: str) -> tuple[int, str]:
    return (len(chain_id), chain_id)  # chain_2 before chain_10


def chains() -> list[dict[str, Any]]:
    """Every chain that sent a message: its counts against MESSAGE_LIMITS, and each pair's."""
    ids = dict(Conversation.objects.values_list("pk", "public_id"))
    pairs: dict[str, list[dict[str, Any]]] = {}
    for pair in ChainPair.objects.order_by("pk"):
        if pair.count:
            pairs.setdefault(pair.chain_id, []).append(
                {
                    "from": ids.get(pair.sender_pk, "(deleted)"),
                    "to": ids.get(pair.receiver_pk, "(deleted)"),
                    "count": pair.count,
                }
            )
    return [
        {
            "id": chain.id,
            "messages": chain.messages,
            "replies_started": chain.replies_started,
            "pairs": pairs.get(chain.id, []),
        }
        for chain in sorted(Chain.objects.all(), key=lambda c: _chain_order(c.id))
    ]
