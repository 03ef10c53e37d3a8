"""Filters that say things the way a person reads them: ``~/src/app``, ``40 s``, ``Telegram``.

Every filter returns plain text; Django's autoescape does the rest. None of
them marks anything safe.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import PurePosixPath

from django import template
from django.utils import timezone

from chats import diffview, regions
from chats.diffview import DiffView
from chats.limits import LIMITS
from chats.mcp.servers import USING_MCP
from chats.models import Origin
from chats.runtime import selectors
from chats.tools.registry import ToolError, abilities, get_tool, tools_offered
from chats.toolsets import MCP_PREFIX, ToolSet, tool_set_for

register = template.Library()

ORIGIN_WORDS = {
    Origin.OWN: "you",
    Origin.CHAT_APP: "a chat app",
    Origin.ROUTINE: "a routine",
    Origin.TASK: "a task",
    Origin.PEER: "an outside agent",
    Origin.CLIENT: "another app",
    Origin.ARTIFACT: "an artifact",
}

# The argument that says what a step worked on, in the order we look for it.
SUBJECT_ARGS = ("path", "command", "pattern", "chat", "task", "url", "title")


def _home() -> PurePosixPath:
    from pathlib import Path

    return PurePosixPath(str(Path.home()))


def _under(path: PurePosixPath, folder: PurePosixPath) -> str | None:
    try:
        return str(path.relative_to(folder))
    except ValueError:
        return None


@register.filter
def tildify(path: str) -> str:
    """``/home/ann/src/app`` → ``~/src/app``: the folder as a person reads it."""
    if not path:
        return ""
    home = _home()
    rest = _under(PurePosixPath(path), home)
    if rest is None:
        return str(path)
    return "~" if rest == "." else f"~/{rest}"


@register.filter
def folder_tail(path: str, parts: int = 2) -> str:
    """A folder as a chat list shows it: its last parts, the ones that tell chats apart
    (``/home/ann/work/projects/conch`` → ``…/projects/conch``); a short one whole
    (``~/app``). The whole path is the element's title."""
    shown = tildify(path)
    if not shown:
        return ""
    pieces = [piece for piece in shown.split("/") if piece]
    if len(pieces) <= parts + 1:
        return shown
    return "…/" + "/".join(pieces[-parts:])


@register.filter
def relpath(path: str, folder: str) -> str:
    """A changed file, relative to the chat's folder; outside it, with ``~`` for home."""
    if not path:
        return ""
    if folder:
        rest = _under(PurePosixPath(path), PurePosixPath(folder))
        if rest is not None and rest != ".":
            return rest
    return tildify(path)


@register.filter
def seconds_since(moment: datetime | None) -> int:
    if moment is None:
        return 0
    return max(0, int((timezone.now() - moment).total_seconds()))


@register.filter
def duration(seconds: int | float | None) -> str:
    """``40 s``, ``3 min``, ``1 h 5 min``: short, and the same as conch.js writes it."""
    seconds = int(seconds or 0)
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


@register.filter
def took(turn) -> str:
    """How long an ended reply took; nothing for one under a second."""
    if turn is None or turn.ended_at is None:
        return ""
    seconds = (turn.ended_at - turn.started_at).total_seconds()
    return duration(seconds) if seconds >= 1 else ""


@register.filter
def origin_label(chat) -> str:
    """Where a chat came from: the chat app's name if it has one."""
    if chat.origin_channel:
        return str(chat.origin_channel).title()
    return ORIGIN_WORDS.get(chat.origin, str(chat.origin))


@register.filter
def step_subject(args: dict | None) -> str:
    """What a step worked on: its path, its command…; empty if it has none."""
    if not isinstance(args, dict):
        return ""
    for name in SUBJECT_ARGS:
        value = args.get(name)
        if isinstance(value, str) and value:
            limit = LIMITS.name_chars
            return value if len(value) <= limit else value[: limit - 1] + "…"
    return ""


@register.filter
def tool_family(name: str) -> str:
    if str(name).startswith(MCP_PREFIX):  # a persona's own tool, from its MCP server
        return USING_MCP
    try:
        return get_tool(name).family
    except ToolError:
        return ""


@register.filter
def row_badge(row):
    """The badge for a sidebar row (a ``ChatSnapshot``)."""
    return regions.row_badge(row)


@register.filter
def row_sort_key(row) -> str:
    """Where a sidebar row goes in the list (``data-sort``), for a row pushed alone."""
    return selectors.row_sort_key(row)


@register.filter
def tool_set(chat) -> ToolSet:
    """The tool set this chat has now (its persona's for you, or for other people), with why."""
    return tool_set_for(chat)


@register.filter
def tool_words(chat) -> str:
    """What the chat's tools let it do, in a sentence for its header: "It can read files,
    edit files and run commands." Read from what it is offered now (its set, its mode)."""
    can = abilities(tools_offered(chat))
    said = f"It can {_joined(can)}." if can else "It answers in words only: it has no tools."
    if tool_set_for(chat).for_strangers:
        said = (
            "Someone else's words are in this chat, so it has only the tools you give other "
            f"people. {said}"
        )
    return said


def _joined(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


@register.filter
def diff_view(change: dict) -> DiffView:
    """A change's lines, numbered and coloured, in both layouts (chats/diffview.py); words stay text."""
    return diffview.diff_view(change)


@register.filter
def file_chips(step) -> list[tuple[str, int]]:
    """A step's changed files as (full path, number of its shown change or 0)."""
    shown = {change.get("file"): n for n, change in enumerate(step.changes or (), 1)}
    return [(path, shown.get(path, 0)) for path in step.files or ()]
