"""Workspace tools that really work, confined to the chat's folder."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from django.conf import settings

from chats.tools.registry import (
    EDITING_FILES,
    READING_FILES,
    RUNNING_A_COMMAND,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    register,
)

READ_LIMIT = 200_000
LIST_LIMIT = 500
# After a timed-out command's group is killed, how long to collect what it printed.
AFTER_KILL_SECONDS = 2.0
STDERR_LABEL = "stderr:\n"


def confine(folder: str, path: str) -> Path:
    """The real path of ``path`` inside ``folder``, or a ToolError if it escapes.

    Links are followed before the check, so a symlink that points outside is
    refused just as ``..`` is.
    """
    if not isinstance(path, str) or not path.strip():
        raise ToolError("The path is empty.")
    if "\x00" in path:
        raise ToolError("The path contains a NUL character.")
    try:
        os.fsencode(path)
    except UnicodeError:
        raise ToolError(f"{path!r} is not a path this computer can name.") from None
    root = Path(os.path.realpath(folder))
    candidate = Path(path)
    joined = candidate if candidate.is_absolute() else root / candidate
    real = Path(os.path.realpath(joined))
    if real != root and root not in real.parents:
        raise ToolError(f"{path!r} is outside this chat's folder ({folder}).")
    return real


def relative(folder: str, real: Path) -> str:
    root = Path(os.path.realpath(folder))
    return str(real.relative_to(root)) if real != root else "."


def _read_file(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    real = confine(ctx.folder, args["path"])
    if not real.exists():
        raise ToolError(f"{args['path']!r} does not exist.")
    if real.is_dir():
        raise ToolError(f"{args['path']!r} is a folder; use list_files.")
    if not real.is_file():  # a pipe or a device would hang the reply, or never end
        raise ToolError(f"{args['path']!r} is not a regular file.")
    with real.open("rb") as fh:
        data = fh.read(READ_LIMIT + 1)
    text = data[:READ_LIMIT].decode("utf-8", errors="replace")
    if len(data) > READ_LIMIT:
        text += f"\n… (cut at {READ_LIMIT} bytes)"
    return ToolResult(text)


def _write(ctx: ToolContext, real: Path, content: str) -> None:
    real.parent.mkdir(parents=True, exist_ok=True)
    real.write_text(content, encoding="utf-8")
    ctx.files_changed.append(str(real))


def _write_file(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    real = confine(ctx.folder, args["path"])
    if real.is_dir():
        raise ToolError(f"{args['path']!r} is a folder.")
    existed = real.exists()
    if existed and not real.is_file():
        raise ToolError(f"{args['path']!r} is not a regular file.")
    _write(ctx, real, args["content"])
    verb = "Replaced" if existed else "Created"
    return ToolResult(
        f"{verb} {relative(ctx.folder, real)} ({len(args['content'])} characters).", (str(real),)
    )


def _edit_file(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    real = confine(ctx.folder, args["path"])
    if not real.is_file():
        raise ToolError(f"{args['path']!r} does not exist; use write_file to create it.")
    text = real.read_text(encoding="utf-8", errors="replace")
    old, new = args["old"], args["new"]
    count = text.count(old)
    if count == 0:
        raise ToolError(f"The text to replace was not found in {args['path']!r}.")
    if count > 1 and not args.get("all"):
        raise ToolError(
            f"The text to replace appears {count} times in {args['path']!r}; "
            "give more context or set all to true."
        )
    updated = text.replace(old, new) if args.get("all") else text.replace(old, new, 1)
    _write(ctx, real, updated)
    return ToolResult(
        f"Edited {relative(ctx.folder, real)} ({count if args.get('all') else 1} change).",
        (str(real),),
    )


def _list_files(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    real = confine(ctx.folder, args.get("path") or ".")
    if not real.is_dir():
        raise ToolError(f"{args.get('path')!r} is not a folder.")
    names = []
    for entry in sorted(real.iterdir(), key=lambda p: p.name):
        names.append(entry.name + ("/" if entry.is_dir() else ""))
        if len(names) >= LIST_LIMIT:
            names.append(f"… (first {LIST_LIMIT} shown)")
            break
    return ToolResult("\n".join(names) if names else "(empty)")


def _cut(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: its head and its tail, and what was cut."""
    if len(text) <= limit:
        return text
    # The longest the note can be, so the head, the note and the tail fit in the limit.
    keep = max(limit - len(f"\n… ({len(text)} characters cut) …\n"), 0)
    head = keep // 2
    tail = keep - head
    note = f"\n… ({len(text) - keep} characters cut) …\n"
    return text[:head] + note + (text[-tail:] if tail else "")


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the command and everything it started (its own session, so its own group)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _run_command(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    timeout = min(
        float(args.get("timeout") or settings.CONCH_COMMAND_TIMEOUT), settings.CONCH_COMMAND_TIMEOUT
    )
    limit = settings.CONCH_COMMAND_OUTPUT_LIMIT
    folder = os.path.realpath(ctx.folder)
    if not os.path.isdir(folder):
        raise ToolError(f"This chat's folder ({ctx.folder}) does not exist.")
    process = subprocess.Popen(  # noqa: S602 - running the person's command is this tool's job
        args["command"],
        shell=True,
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # Killing only the shell would leave what it started running, unseen.
        _kill_group(process)
        try:
            out, _ = process.communicate(timeout=AFTER_KILL_SECONDS)
        except subprocess.TimeoutExpired as exc:  # something left the group and holds the pipe
            out = exc.stdout or ""
            for pipe in (process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()
            process.wait()
        if isinstance(out, bytes):
            out = out.decode("utf-8", errors="replace")
        message = f"The command did not finish within {timeout:g} s and was stopped."
        if out:
            message += "\n" + _cut(out, max(limit - len(message) - 1, 0))
        raise ToolError(message) from None
    header = f"exit status {process.returncode}"
    # The whole result fits in the limit: stderr gets up to half when both are long.
    budget = max(limit - len(header) - 2 - len(STDERR_LABEL), 0)
    err_budget = min(len(stderr), budget // 2) if stdout else budget
    parts = [header]
    if stdout:
        parts.append(_cut(stdout, budget - err_budget))
    if stderr:
        parts.append(STDERR_LABEL + _cut(stderr, err_budget))
    return ToolResult("\n".join(parts))


def _path_schema(
    extra: dict[str, Any] | None = None, required: tuple[str, ...] = ("path",)
) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "path": {"type": "string", "minLength": 1, "description": "Relative to the chat's folder."}
    }
    properties.update(extra or {})
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


READ_FILE = register(
    Tool(
        name="read_file",
        description="Read a text file in this chat's folder.",
        schema=_path_schema(),
        family=READING_FILES,
        effect="read",
        run=_read_file,
    )
)
WRITE_FILE = register(
    Tool(
        name="write_file",
        description="Create or replace a file in this chat's folder.",
        schema=_path_schema({"content": {"type": "string"}}, ("path", "content")),
        family=EDITING_FILES,
        effect="write",
        run=_write_file,
        asks_in_ask_mode=True,
    )
)
EDIT_FILE = register(
    Tool(
        name="edit_file",
        description="Replace text in a file in this chat's folder.",
        schema=_path_schema(
            {
                "old": {"type": "string", "minLength": 1},
                "new": {"type": "string"},
                "all": {"type": "boolean"},
            },
            ("path", "old", "new"),
        ),
        family=EDITING_FILES,
        effect="write",
        run=_edit_file,
        asks_in_ask_mode=True,
    )
)
LIST_FILES = register(
    Tool(
        name="list_files",
        description="List a folder inside this chat's folder.",
        schema=_path_schema(required=()),
        family=READING_FILES,
        effect="read",
        run=_list_files,
    )
)
RUN_COMMAND = register(
    Tool(
        name="run_command",
        description="Run a shell command in this chat's folder, with a timeout.",
        schema={
            "type": "object",
            "properties": {
                "command": {"type": "string", "minLength": 1},
                "timeout": {"type": "number", "minimum": 0.1},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
        family=RUNNING_A_COMMAND,
        effect="write",
        run=_run_command,
        asks_in_ask_mode=True,
    )
)
