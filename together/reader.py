"""Said by itself: another chat in this folder (ADR 0134).

``reader(turn, at_start)`` is asked as each turn starts (the notes go in
front of the message) and at each step after (resource feedback). It speaks
when another of the person's chats, working in the same place,

- is changing files there (it has changed some, or its step edits files);
- runs commands there (said once, softly);
- has changed a file this reply changed too (compared by full path).

Each chat and each shared file is said once per turn, four lines a turn at
most. It costs one read of the open turns and, when it says something, one
write of what it said, whatever the number of chats. ``reader_waiting`` is the
same read with nothing written: the step asks it first, outside any transaction,
and takes the chat's lock only when there is something to say.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chats.hooks import Note
from chats.limits import LIMITS
from chats.models import Taint, Turn, TurnState
from chats.quoting import NOTHING, Said, conch_note, conch_words, named, plain_list, plain_path
from chats.runtime.selectors import WorkingPlace, working_places
from chats.tools.registry import EDITING_FILES, RUNNING_A_COMMAND
from together.places import same_place, shown_path
from together.visibility import NOT_YOURS_ORIGINS, offers_together

# Families whose step changes files, even before any file is recorded.
CHANGING_FAMILIES = frozenset({EDITING_FILES, "committing"})
STILL_GOING = frozenset({TurnState.RUNNING, TurnState.RECOVERY_PENDING})


@dataclass(frozen=True)
class _Line:
    key: str  # "chat:<id>" or "file:<path>"
    rank: int  # shared files first, then changing, then commands
    text: Callable[[], str]  # made only for the lines that are said


def _files_words(files: list[str]) -> Said:
    """What another chat is changing, as Conch says it: each name plain, the joining words Conch's."""
    if not files:
        return NOTHING
    names = plain_list(files[:3], limit=LIMITS.name_chars)
    more = conch_words(" and {n} more", n=len(files) - 3) if len(files) > 3 else NOTHING
    return conch_words(", changing {names}{more}", names=names, more=more)


def changing_files_line(other: WorkingPlace, files: list[str], *, points_to_list: bool) -> str:
    return conch_note(
        "another of the person's chats is changing files in this folder right now: "
        "{name}{what}. Keep to your own files, and never undo its work.{tail}",
        name=named(other.title, other.id),
        what=_files_words(files),
        tail=conch_words(" Use list_chats to see what your other chats are doing.")
        if points_to_list
        else NOTHING,
    )


def running_commands_line(other: WorkingPlace) -> str:
    return conch_note(
        "{name} is running commands in this folder. If yours would clash, wait for it or say so.",
        name=named(other.title, other.id),
    )


def shared_file_line(other: WorkingPlace, path: str) -> str:
    return conch_note(
        "this reply and {name} have both changed {path}: read it again before changing it further.",
        name=named(other.title, other.id),
        path=plain_path(path),
    )


def reader(turn: Turn, at_start: bool) -> list[Note]:
    """The notes about other chats for this turn, now. Precondition: ``turn`` was just loaded."""
    chosen, said_keys, said_count = _chosen(turn)
    if not chosen:
        return []
    said = {
        "keys": sorted(said_keys | {line.key for line in chosen}),
        "count": said_count + len(chosen),
    }
    Turn.objects.filter(pk=turn.pk).update(notes_said=said)
    turn.notes_said = said
    return [Note(line.text(), source="together") for line in chosen]


def reader_waiting(turn: Turn, at_start: bool) -> bool:
    """Whether :func:`reader` has a line to say now: its look, with nothing written."""
    return bool(_chosen(turn)[0])


def _chosen(turn: Turn) -> tuple[list[_Line], set[str], int]:
    """The lines to say now, what this turn has said already, and how many lines."""
    me = turn.conversation
    if me.taint == Taint.PERSON or me.origin in NOT_YOURS_ORIGINS:
        return [], set(), 0  # a chat with someone else in it is told nothing
    said = dict(turn.notes_said or {})
    said_keys = set(said.get("keys", []))
    said_count = int(said.get("count", 0))
    budget = LIMITS.reader_lines_per_turn - said_count
    if budget <= 0:
        return [], said_keys, said_count
    points_to_list = offers_together(me)
    my_files = set(turn.files_changed or [])
    candidates: list[_Line] = []
    for other in working_places(owner_id=me.owner_id):
        if other.pk == me.pk or other.state not in STILL_GOING:
            continue
        if other.origin in NOT_YOURS_ORIGINS or other.taint == Taint.PERSON:
            continue  # nothing about a chat that isn't yours reaches anyone
        chat_key = f"chat:{other.id}"
        changing = bool(other.files_changed) or other.family in CHANGING_FAMILIES
        shared = [p for p in other.files_changed if p in my_files and f"file:{p}" not in said_keys]
        commands = other.family == RUNNING_A_COMMAND
        if not shared and (chat_key in said_keys or not (changing or commands)):
            continue
        if not same_place(turn.place, turn.folder, other.place, other.folder):
            continue
        for path in shared:
            candidates.append(_Line(f"file:{path}", 0, _shared(other, path, turn.folder)))
        if chat_key in said_keys:
            continue
        if changing:
            candidates.append(_Line(chat_key, 1, _changing(other, turn.folder, points_to_list)))
        elif commands:
            candidates.append(_Line(chat_key, 2, _commands(other)))
    chosen: list[_Line] = []
    seen: set[str] = set()
    for line in sorted(candidates, key=lambda line: line.rank):
        if line.key in seen or len(chosen) >= budget:
            continue
        seen.add(line.key)
        chosen.append(line)
    return chosen, said_keys, said_count


def _shared(other: WorkingPlace, path: str, folder: str) -> Callable[[], str]:
    return lambda: shared_file_line(other, shown_path(path, folder))


def _changing(other: WorkingPlace, folder: str, points_to_list: bool) -> Callable[[], str]:
    files = other.files_changed
    return lambda: changing_files_line(
        other, [shown_path(p, folder) for p in files], points_to_list=points_to_list
    )


def _commands(other: WorkingPlace) -> Callable[[], str]:
    return lambda: running_commands_line(other)
