"""Standing OKs: the person's "approve, and don't ask again in this chat".

A standing OK is for one tool in one chat. For a tool that runs commands it is for how
a command starts instead (:func:`command_start`): the program and its subcommand
(``git status``), so ``git status`` never covers ``git push``. The rules:

- It belongs to one chat (``StandingOk.conversation``) and is never read for another.
- A change of the chat's mode clears the chat's standing OKs (``conversation_set_mode``).
- It is offered, given and honoured only in a chat that is the person's alone and has
  read nothing from outside (:func:`standing_oks_apply`). There the person's own tools
  ask only because of Ask mode, so a standing OK answers that ask and nothing else: an
  ask that the chat's taint or the persona's tools for other people make (``must_ask``)
  still asks, whatever OK was given before the chat changed.
- A command with anything a shell reads as more than one program, or as a program of
  another name (``;``, ``&&``, ``|``, ``$(``, backticks, redirects…), never matches one.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from chats import events
from chats.models import Conversation, StandingOk, Taint
from chats.quoting import scrub_secrets
from chats.tools.registry import RUNNING_A_COMMAND, Tool
from chats.toolsets import has_someone_elses_words

__all__ = [
    "Scope",
    "asks",
    "asks_because_careful",
    "command_start",
    "standing_ok_covers",
    "standing_ok_give_locked",
    "standing_ok_offer",
    "standing_ok_take_back",
    "standing_oks_apply",
    "standing_oks_clear_locked",
    "standing_oks_paused_why",
]

# Whatever lets a shell run a second program, run one named by what it reads or expands,
# or send output elsewhere: a command holding any of these is never covered.
SHELL_SIGNS = frozenset(";&|$`<>(){}\\\n\r")
# A program's name, or a path to it; never an assignment (``FOO=1 cmd``) or an option.
PROGRAM = re.compile(r"[A-Za-z0-9_./@+][A-Za-z0-9_./@+-]*")
# A subcommand or a word like one (``status``, ``test:unit``, ``build``); not a path, an
# option, an assignment or a pattern.
PLAIN_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@+-]*")
# Programs that run another program named in their own words (or read commands): a
# standing OK for one of them covers only the whole command approved.
RUNS_ANOTHER = frozenset(
    {
        "sh", "bash", "zsh", "dash", "ksh", "fish", "csh", "tcsh", "busybox",
        "env", "sudo", "doas", "su", "runuser", "sg", "pkexec",
        "xargs", "parallel", "exec", "eval", "command", "builtin", "source", ".",
        "nohup", "nice", "ionice", "timeout", "time", "watch", "stdbuf", "setsid",
        "chrt", "taskset", "flock", "chroot", "unshare", "nsenter", "firejail", "bwrap",
        "systemd-run", "strace", "ltrace", "gdb", "script", "ssh", "find",
    }
)  # fmt: skip
# Subcommands that run the program named in the next word: the OK names that program too.
RUNS_NEXT = frozenset(
    {
        ("uv", "run"), ("uv", "tool"), ("poetry", "run"), ("pipenv", "run"), ("pdm", "run"),
        ("hatch", "run"), ("pipx", "run"), ("npm", "exec"), ("pnpm", "exec"),
        ("pnpm", "dlx"), ("yarn", "exec"), ("yarn", "dlx"), ("bundle", "exec"),
        ("docker", "exec"), ("docker", "run"), ("podman", "exec"), ("podman", "run"),
        ("kubectl", "exec"), ("cargo", "exec"), ("conda", "run"), ("mise", "exec"),
    }
)  # fmt: skip
COMMAND_CHARS = 1_024  # StandingOk.command's length

ERR_NOT_OFFERED = "“Don't ask again” isn't offered for this: {why}. Approve or deny it this once."
WHY_SOMEONE_ELSES = "someone else's words are in this chat"
WHY_OUTSIDE = "this chat has read something from outside"
WHY_COMMAND = "the command has more than one program in it, or starts with something Conch can't read as a program"


@dataclass(frozen=True)
class Scope:
    """What a standing OK covers: a tool, or for a command tool, its first words."""

    tool: str
    words: tuple[str, ...] = ()  # () is any use of the tool
    whole: bool = False  # the words are the whole command

    @property
    def command(self) -> str:
        return shlex.join(self.words) if self.words else ""

    def for_person(self) -> str:
        """What it covers, in the person's words: the tool, or the command's start."""
        if not self.words:
            return self.tool
        if self.whole:
            return f"the command “{self.command}”"
        return f"commands that start “{self.command}”"


def scope_of(ok: StandingOk) -> Scope:
    words = tuple(shlex.split(ok.command)) if ok.command else ()
    return Scope(tool=ok.tool, words=words, whole=ok.whole)


def _words(command: str) -> list[str] | None:
    """A command's words as the shell reads them, or None if it may run more than one program."""
    if not command or any(sign in SHELL_SIGNS for sign in command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:  # an open quote
        return None
    if not words or not PROGRAM.fullmatch(words[0]):
        return None
    return words


def command_start(command: str) -> tuple[tuple[str, ...], bool] | None:
    """The words a standing OK for ``command`` covers, and whether they are the whole command.

    The program and its subcommand (``git status --short`` → ``git status``); for a
    subcommand that runs another program, that program too (``uv run pytest``). A
    program alone, or one followed by an option or a path, is taken whole (``pytest -q``),
    as is a program that runs whatever its words name (``sudo``, ``sh``). None when the
    command can't have one (:data:`SHELL_SIGNS`).
    """
    words = _words(command)
    if words is None:
        return None
    program = words[0]
    if program.rsplit("/", 1)[-1] in RUNS_ANOTHER or len(words) < 2:
        return tuple(words), True
    if not PLAIN_WORD.fullmatch(words[1]):
        return tuple(words), True
    start = tuple(words[:2])
    if start in RUNS_NEXT:
        if len(words) < 3 or not PLAIN_WORD.fullmatch(words[2]):
            return tuple(words), True
        start = tuple(words[:3])
    return start, False


def _covers(scope: Scope, args: Mapping[str, Any], *, commands: bool) -> bool:
    if not commands:
        return not scope.words
    words = _words(str(args.get("command") or ""))
    if words is None or not scope.words:
        return False
    if scope.whole:
        return tuple(words) == scope.words
    return tuple(words[: len(scope.words)]) == scope.words


def _runs_commands(tool: Tool) -> bool:
    return tool.family == RUNNING_A_COMMAND


def standing_oks_apply(conversation: Conversation) -> bool:
    """Whether standing OKs may be offered and honoured in this chat, as it is now: only
    in one that is the person's alone and has read nothing from outside, where the person's
    own tools ask only because of Ask mode."""
    return not standing_oks_paused_why(conversation)


def standing_oks_paused_why(conversation: Conversation) -> str:
    """Why this chat's standing OKs are not used now, in words; "" when they are."""
    if has_someone_elses_words(conversation):
        return WHY_SOMEONE_ELSES
    if conversation.taint != Taint.NONE:
        return WHY_OUTSIDE
    return ""


def standing_ok_offer(
    conversation: Conversation, tool: Tool, args: Mapping[str, Any]
) -> tuple[Scope | None, str]:
    """The standing OK the person may give for this call, or None and why not.

    A command that holds a key or a password is never kept as one: its words would be.
    """
    why = standing_oks_paused_why(conversation)
    if why:
        return None, why
    if not _runs_commands(tool):
        return Scope(tool=tool.name), ""
    command = str(args.get("command") or "")
    start = command_start(command)
    if start is None or scrub_secrets(command) != command:
        return None, WHY_COMMAND
    words, whole = start
    scope = Scope(tool=tool.name, words=words, whole=whole)
    if len(scope.command) > COMMAND_CHARS:
        return None, WHY_COMMAND
    return scope, ""


def standing_ok_covers(conversation: Conversation, tool: Tool, args: Mapping[str, Any]) -> bool:
    """Whether one of this chat's standing OKs lets this call run without asking.

    Precondition: ``conversation`` read under its row lock, as ``must_ask`` read it.
    """
    if not standing_oks_apply(conversation):
        return False
    commands = _runs_commands(tool)
    return any(
        _covers(scope_of(ok), args, commands=commands)
        for ok in StandingOk.objects.filter(conversation=conversation, tool=tool.name)
    )


def asks(conversation: Conversation, tool: Tool, args: Mapping[str, Any]) -> bool:
    """Whether this call waits for the person's OK in this chat as it is now: the tool
    asks here, and no standing OK answers it.

    Precondition: ``conversation`` read under its row lock.
    """
    return tool.must_ask(conversation) and not standing_ok_covers(conversation, tool, args)


def asks_because_careful(conversation: Conversation, tool: Tool, args: Mapping[str, Any]) -> bool:
    """Whether an ask is the chat's taint's doing: the same call, in the same chat had it
    read nothing from outside and had no one else's words in it, would run without one.

    Precondition: :func:`asks` said it asks, for ``conversation`` read under its row lock.
    """
    if conversation.taint == Taint.NONE:
        return False
    trusted = copy.copy(conversation)
    trusted.taint = Taint.NONE
    return not asks(trusted, tool, args)


def standing_ok_give_locked(*, conversation: Conversation, scope: Scope) -> StandingOk:
    """Keep a standing OK. Precondition: inside ``atomic()`` holding the chat's row lock,
    ``scope`` from :func:`standing_ok_offer` for the chat as read under it."""
    ok, _ = StandingOk.objects.get_or_create(
        conversation=conversation, tool=scope.tool, command=scope.command, whole=scope.whole
    )
    return ok


def standing_ok_take_back(*, conversation: Conversation, ok_id: int) -> None:
    """Take back one of this chat's standing OKs; one already gone (another tab) is no error.

    Only this chat's: an id of another chat's standing OK finds nothing here.
    """
    with transaction.atomic():
        conversation = Conversation.objects.lock(conversation.pk)
        StandingOk.objects.filter(conversation=conversation, pk=ok_id).delete()
        events.publish_chat(conversation)


def standing_oks_clear_locked(*, conversation: Conversation) -> None:
    """Forget every standing OK of the chat. Precondition: holding the chat's row lock."""
    StandingOk.objects.filter(conversation=conversation).delete()
