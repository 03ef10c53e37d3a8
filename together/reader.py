"""Said by itself: another chat in this folder (ADR 0134).

``reader(turn, at_start)`` is asked as each turn starts (the notes go in
front of the message) and at each step after (resource feedback). It speaks
when another of the person's chats, working in the same place,

- is changing files there (it has changed some, or its step edits files);
- runs commands there (said once, softly);
- has changed a file this reply changed too (compared by full path).

Each chat and each shared file is said once per turn, four lines a turn at
most. It costs one read of the open turns and, when it says something, one
write of what it said, whatever the number of chats.
"""

from __future__ import annotations

from dataclasses import dataclass

from chats.models import Turn, TurnState
from chats.runtime.hooks import Note
from chats.runtime.selectors import ChatSnapshot, chats_snapshot
from chats.tools.registry import EDITING_FILES, RUNNING_A_COMMAND
from together.places import same_place, shown_path
from together.quoting import plain, plain_path
from together.visibility import offers_together

LINES_PER_TURN = 4
# Families whose step changes files, even before any file is recorded.
CHANGING_FAMILIES = frozenset({EDITING_FILES, "committing"})
STILL_GOING = frozenset({TurnState.RUNNING, TurnState.RECOVERY_PENDING})


@dataclass(frozen=True)
class _Line:
    key: str  # "chat:<id>" or "file:<path>"
    text: str
    rank: int  # shared files first, then changing, then commands


def _name(other: ChatSnapshot) -> str:
    return f"“{plain(other.title)}” (chat {other.id})"


def _is_yours(snapshot: ChatSnapshot, owner_id: int) -> bool:
    # The snapshot is already the owner's; the rest of is_yours, on the snapshot.
    from together.visibility import NOT_YOURS_ORIGINS

    return snapshot.origin not in NOT_YOURS_ORIGINS and snapshot.taint != "person"


def changing_files_line(other: ChatSnapshot, files: list[str], *, points_to_list: bool) -> str:
    what = (
        f", changing {', '.join(files[:3])}"
        + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        if files
        else ""
    )
    tail = " Use list_chats to see what your other chats are doing." if points_to_list else ""
    return (
        f"[Conch: another of the person's chats is changing files in this folder right now: {_name(other)}{what}. "
        f"Keep to your own files, and never undo its work.{tail}]"
    )


def running_commands_line(other: ChatSnapshot) -> str:
    return (
        f"[Conch: {_name(other)} is running commands in this folder. "
        "If yours would clash, wait for it or say so.]"
    )


def shared_file_line(other: ChatSnapshot, path: str) -> str:
    return (
        f"[Conch: this reply and {_name(other)} have both changed {path}: "
        "read it again before changing it further.]"
    )


def reader(turn: Turn, at_start: bool) -> list[Note]:
    """The notes about other chats for this turn, now. Precondition: ``turn`` was just loaded."""
    me = turn.conversation
    if me.taint == "person" or me.origin in ("peer", "client", "artifact"):
        return []  # a chat with someone else in it is told nothing
    said = dict(turn.notes_said or {})
    said_keys = set(said.get("keys", []))
    budget = LINES_PER_TURN - int(said.get("count", 0))
    if budget <= 0:
        return []
    points_to_list = offers_together(me)
    my_files = set(turn.files_changed or [])
    candidates: list[_Line] = []
    for other in chats_snapshot(owner_id=me.owner_id, working=True):
        reply = other.reply
        if other.pk == me.pk or reply is None or reply.state not in STILL_GOING:
            continue
        if not _is_yours(other, me.owner_id):
            continue  # nothing about a chat that isn't yours reaches anyone
        if not same_place(turn.place, turn.folder, reply.place, reply.folder):
            continue
        for path in reply.files_changed:
            if path in my_files and f"file:{path}" not in said_keys:
                candidates.append(
                    _Line(
                        f"file:{path}",
                        shared_file_line(other, plain_path(shown_path(path, turn.folder))),
                        0,
                    )
                )
        chat_key = f"chat:{other.id}"
        if chat_key in said_keys:
            continue
        if reply.files_changed or reply.family in CHANGING_FAMILIES:
            files = [plain_path(shown_path(p, turn.folder)) for p in reply.files_changed]
            candidates.append(
                _Line(chat_key, changing_files_line(other, files, points_to_list=points_to_list), 1)
            )
        elif reply.family == RUNNING_A_COMMAND:
            candidates.append(_Line(chat_key, running_commands_line(other), 2))
    if not candidates:
        return []
    chosen: list[_Line] = []
    seen: set[str] = set()
    for line in sorted(candidates, key=lambda line: line.rank):
        if line.key in seen or len(chosen) >= budget:
            continue
        seen.add(line.key)
        chosen.append(line)
    said = {"keys": sorted(said_keys | seen), "count": int(said.get("count", 0)) + len(chosen)}
    Turn.objects.filter(pk=turn.pk).update(notes_said=said)
    turn.notes_said = said
    return [Note(line.text, source="together") for line in chosen]
