"""Workspace tools that really work, confined to the chat's folder."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

from django.conf import settings

from chats import processes
from chats.limits import LIMITS, size_words
from chats.models import Effect, Step
from chats.quoting import file_name, known_secrets, scrub_secrets
from chats.taint import Cause, taint_outside
from chats.tools import diffs, reaper, sandbox
from chats.tools.beneath import makedirs_beneath, open_beneath, open_folder
from chats.tools.output import Output
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

# After a command's group is ended, how long to collect what it printed.
AFTER_KILL_SECONDS = 2.0
# How often a running command looks whether its reply was stopped in another process.
LOOK_EVERY_SECONDS = 0.5
STDERR_LABEL = "stderr:\n"
ERR_FLOODED = "The command printed more than {size} and was stopped."
ERR_OUTSIDE = "{path!r} is outside this chat's folder ({folder})."
ERR_NO_FOLDER = "This chat's folder ({folder}) does not exist."
# A link where the check found none: swapped in since, or a loop. Never followed.
ERR_LINK_ON_THE_WAY = "{path!r} leads through a link that changed or loops; it was not opened."
ERR_UNDER_A_FILE = "{path!r} cannot be made: part of its way is a file, not a folder."
ERR_CONCH_HOME = (
    "{path!r} is inside Conch's own home ({home}), where its database and keys are: the file "
    "tools never open it."
)
# A folder holding two of these is a Conch home, this one's or another install's.
HOME_MARKS = ("secret_key", "secrets.key", "conch.sqlite3")


def confine(folder: str, path: str) -> Path:
    """The real path of ``path`` inside ``folder``, or a ToolError if it escapes.

    Links are followed before the check, so a symlink that points outside is
    refused just as ``..`` is. The tools then open what this returns with
    ``beneath.open_beneath``, which follows no link, so a link swapped in
    after the check is refused rather than followed.
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
    try:
        real = Path(os.path.realpath(joined))
    except OSError:  # a link swapped for a folder while realpath read it
        raise ToolError(ERR_LINK_ON_THE_WAY.format(path=path)) from None
    if real != root and root not in real.parents:
        raise ToolError(ERR_OUTSIDE.format(path=path, folder=folder))
    home = conch_home_around(real, root=root)
    if home is not None:
        raise ToolError(ERR_CONCH_HOME.format(path=path, home=home))
    return real


def conch_home_around(real: Path, *, root: Path) -> Path | None:
    """The Conch home ``real`` is in (or is), unless the chat's folder is beneath that home.

    As the sandbox hides ``CONCH_HOME``: a chat whose folder holds it (one working in ``~``
    holds ``~/.conch``), or is it, can't read its keys or its database with the file tools
    either. Other installs' homes are known by what is in them (:data:`HOME_MARKS`). A chat
    whose folder is beneath a home (``CONCH_HOME/workspaces/default``) works there as ever,
    as the sandbox shows it: its folder can't reach the home's own files.
    """
    own = Path(os.path.realpath(settings.CONCH_HOME))
    for place in (real, *real.parents):
        if place != own and not _looks_like_a_conch_home(place):
            continue
        if place in root.parents:  # the chat works in a folder beneath the home: not its keys
            return None
        return place
    return None


def _looks_like_a_conch_home(place: Path) -> bool:
    try:
        return sum(os.path.isfile(place / mark) for mark in HOME_MARKS) >= 2
    except OSError:
        return False


def relative(folder: str, real: Path) -> str:
    root = Path(os.path.realpath(folder))
    return str(real.relative_to(root)) if real != root else "."


def shown(folder: str, real: Path) -> str:
    """A path inside the folder as an answer shows it: through quoting, as another chat may have named it."""
    return file_name(relative(folder, real))


def _open(folder: str, path: str, real: Path, flags: int, *, make_parents: bool = False) -> int:
    """A descriptor for ``real`` (from ``confine``), opened beneath the folder, following no link.

    Raises ToolError for a link met on the way; other ``OSError``s are the caller's to word.
    """
    rel = relative(folder, real)
    try:
        root_fd = open_folder(os.path.realpath(folder))
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(ERR_NO_FOLDER.format(folder=folder)) from None
    try:
        if make_parents:
            makedirs_beneath(root_fd, os.path.dirname(rel))
        return open_beneath(root_fd, rel, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ToolError(ERR_LINK_ON_THE_WAY.format(path=path)) from None
        if exc.errno == errno.EXDEV:
            raise ToolError(ERR_OUTSIDE.format(path=path, folder=folder)) from None
        raise
    finally:
        os.close(root_fd)


def _read_all(fd: int, limit: int | None = None) -> bytes:
    chunks, size = [], 0
    while limit is None or size <= limit:
        chunk = os.read(fd, 1 << 16 if limit is None else min(1 << 16, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_file(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    path = args["path"]
    real = confine(ctx.folder, path)
    try:
        # O_NONBLOCK: opening a pipe must not wait for a writer that never comes.
        fd = _open(ctx.folder, path, real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(f"{path!r} does not exist.") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ToolError(f"{path!r} is a folder; use list_files.")
        if not stat.S_ISREG(mode):  # a pipe or a device would hang the reply, or never end
            raise ToolError(f"{path!r} is not a regular file.")
        data = _read_all(fd, LIMITS.file_read_bytes)
    finally:
        os.close(fd)
    text = data[: LIMITS.file_read_bytes].decode("utf-8", errors="replace")
    if len(data) > LIMITS.file_read_bytes:
        text += f"\n… (cut at {LIMITS.file_read_bytes} bytes)"
    return ToolResult(text)


def _open_for_writing(ctx: ToolContext, path: str, real: Path) -> tuple[int, bool]:
    """A descriptor to write ``real`` through, and whether the file was there before."""
    writing = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY
    for _ in range(3):  # a file made or removed meanwhile: look again
        try:
            try:
                return _open(ctx.folder, path, real, writing), True
            except FileNotFoundError:
                pass
            try:
                fd = _open(
                    ctx.folder, path, real, writing | os.O_CREAT | os.O_EXCL, make_parents=True
                )
                return fd, False
            except FileExistsError:
                continue
        except IsADirectoryError:
            raise ToolError(f"{path!r} is a folder.") from None
        except NotADirectoryError:
            raise ToolError(ERR_UNDER_A_FILE.format(path=path)) from None
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a pipe nobody reads
                raise ToolError(f"{path!r} is not a regular file.") from None
            raise
    raise ToolError(ERR_LINK_ON_THE_WAY.format(path=path))


def _write(ctx: ToolContext, fd: int, real: Path, content: str) -> None:
    _write_all(fd, content.encode("utf-8"))
    ctx.files_changed.append(str(real))


def _text_before(folder: str, path: str, real: Path) -> tuple[str | None, bool]:
    """What the file holds now, for a diff: (None when it is not there, whether it is too large).

    Opened as the tools open files (beneath the folder, following no link); a file
    that can't be read as a regular file raises ToolError, as the tool would.
    """
    try:
        fd = _open(folder, path, real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except (FileNotFoundError, NotADirectoryError):
        return None, False
    except IsADirectoryError:
        raise ToolError(f"{path!r} is a folder.") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolError(f"{path!r} is not a regular file.")
        data = _read_all(fd, LIMITS.diff_file_bytes)
    finally:
        os.close(fd)
    if len(data) > LIMITS.diff_file_bytes:
        return "", True
    return data.decode("utf-8", errors="replace"), False


def _change(
    ctx: ToolContext, real: Path, before: str | None, after: str, *, too_large: bool = False
) -> dict[str, Any]:
    record = diffs.change_record(
        path=relative(ctx.folder, real),
        before=before,
        after=after,
        known=known_secrets(ctx.conversation.agent),
        too_large=too_large or len(after.encode("utf-8")) > LIMITS.diff_file_bytes,
    )
    return {**record, "file": str(real)}


def _write_file(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    path = args["path"]
    real = confine(ctx.folder, path)
    try:
        before, too_large = _text_before(ctx.folder, path, real)
    except (ToolError, OSError):  # the write says what is wrong, if anything
        before, too_large = None, False
    fd, existed = _open_for_writing(ctx, path, real)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolError(f"{path!r} is not a regular file.")
        _write(ctx, fd, real, args["content"])
    finally:
        os.close(fd)
    if existed and before is None:  # made by someone else between the look and the write
        before, too_large = "", True
    ctx.changes.append(
        _change(ctx, real, before if existed else None, args["content"], too_large=too_large)
    )
    verb = "Replaced" if existed else "Created"
    return ToolResult(
        f"{verb} {shown(ctx.folder, real)} ({len(args['content'])} characters).", (str(real),)
    )


def _edited(text: str, path: str, args: dict[str, Any]) -> tuple[str, int]:
    """The file's words after the edit, and how many places changed; ToolError if it can't be made."""
    old, new = args["old"], args["new"]
    count = text.count(old)
    if count == 0:
        raise ToolError(f"The text to replace was not found in {path!r}.")
    if count > 1 and not args.get("all"):
        raise ToolError(
            f"The text to replace appears {count} times in {path!r}; "
            "give more context or set all to true."
        )
    if args.get("all"):
        return text.replace(old, new), count
    return text.replace(old, new, 1), 1


def _edit_file(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    path = args["path"]
    real = confine(ctx.folder, path)
    missing = f"{path!r} does not exist; use write_file to create it."
    try:
        # Read and write through one descriptor: the file edited is the file read.
        fd = _open(ctx.folder, path, real, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise ToolError(missing) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolError(missing)
        text = _read_all(fd).decode("utf-8", errors="replace")
        updated, count = _edited(text, path, args)
        _write(ctx, fd, real, updated)
    finally:
        os.close(fd)
    too_large = len(text.encode("utf-8")) > LIMITS.diff_file_bytes
    ctx.changes.append(_change(ctx, real, text, updated, too_large=too_large))
    return ToolResult(
        f"Edited {shown(ctx.folder, real)} ({count if args.get('all') else 1} change).",
        (str(real),),
    )


# ---------------------------------------------------------------------------
# What a tool would do, shown before the person's OK (Tool.preview)


def _preview_write(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    real = confine(ctx.folder, args["path"])
    before, too_large = _text_before(ctx.folder, args["path"], real)
    return {
        "kind": diffs.PREVIEW_FILE,
        **_change(ctx, real, before, args["content"], too_large=too_large),
    }


def _preview_edit(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    path = args["path"]
    real = confine(ctx.folder, path)
    before, too_large = _text_before(ctx.folder, path, real)
    if before is None:
        raise ToolError(f"{path!r} does not exist; use write_file to create it.")
    if too_large:
        return {"kind": diffs.PREVIEW_FILE, **_change(ctx, real, "", "", too_large=True)}
    updated, _ = _edited(before, path, args)
    return {"kind": diffs.PREVIEW_FILE, **_change(ctx, real, before, updated)}


def _preview_command(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    known = known_secrets(ctx.conversation.agent)
    return {
        "kind": diffs.PREVIEW_COMMAND,
        "command": scrub_secrets(args["command"], known=known),
        "folder": os.path.realpath(ctx.folder),
    }


def _list_files(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    path = args.get("path") or "."
    real = confine(ctx.folder, path)
    try:
        fd = _open(ctx.folder, path, real, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(f"{args.get('path')!r} is not a folder.") from None
    try:
        with os.scandir(fd) as found:
            entries = sorted(found, key=lambda e: e.name)
        names = []
        for entry in entries:
            names.append(file_name(entry.name) + ("/" if entry.is_dir() else ""))
            if len(names) >= LIMITS.folder_list_names:
                names.append(f"… (first {LIMITS.folder_list_names} shown)")
                break
    finally:
        os.close(fd)
    return ToolResult("\n".join(names) if names else "(empty)")


def _command_argv(
    ctx: ToolContext, folder: str, command: str, chosen: sandbox.CommandSettings
) -> tuple[list[str], bool, str]:
    """How to run ``command``: its argv, whether it is sandboxed, and a note for the chat."""
    shell = ["/bin/sh", "-c", command]
    if settings.CONCH_SANDBOX == sandbox.SANDBOX_OFF and not ctx.sandbox_required:
        return reaper.kept(shell), False, ""
    probe = sandbox.sandbox_probe()
    if probe.works:
        argv = sandbox.bwrap_argv(
            probe.bwrap, folder, network=chosen.network, strangers=ctx.sandbox_required
        )
        return argv + shell, True, ""
    if settings.CONCH_SANDBOX == sandbox.SANDBOX_REQUIRED:
        raise ToolError(sandbox.ERR_SANDBOX_REQUIRED.format(why=probe.why))
    if ctx.sandbox_required:
        raise ToolError(sandbox.ERR_SANDBOX_FOR_OTHER_PEOPLE.format(why=probe.why))
    # auto, where bwrap doesn't work: the chat is told once, at its first such command.
    others = Step.objects.filter(turn__conversation_id=ctx.conversation.pk, sandboxed=False)
    if ctx.step_id is not None:
        others = others.exclude(pk=ctx.step_id)
    told = others.exists()
    note = "" if told else sandbox.NOTE_NO_SANDBOX.format(why=probe.why) + "\n"
    return reaper.kept(shell), False, note


def _run_command(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    timeout = min(
        float(args.get("timeout") or settings.CONCH_COMMAND_TIMEOUT), settings.CONCH_COMMAND_TIMEOUT
    )
    folder = os.path.realpath(ctx.folder)
    if not os.path.isdir(folder):
        raise ToolError(ERR_NO_FOLDER.format(folder=ctx.folder))
    agent = ctx.conversation.agent
    try:
        chosen = sandbox.command_settings(agent.engine_config)
    except ValueError as exc:
        raise ToolError(f"The persona {agent.slug!r} has bad command settings: {exc}") from None
    argv, sandboxed, note = _command_argv(ctx, folder, args["command"], chosen)
    if not sandboxed or chosen.network:
        # It could fetch a page, and what it prints reaches the model: the chat is marked
        # as a page's reader is, before it runs. If that can't be written down, it doesn't run.
        taint_outside(
            conversation=ctx.conversation,
            cause=Cause.command_network(sandboxed=sandboxed, turn=ctx.turn, step=ctx.step_id),
        )
    known = known_secrets(agent)
    try:
        text = _run_and_wait(
            ctx, argv, folder, sandbox.command_environment(chosen), timeout, sandboxed, known
        )
    except ToolError as exc:
        raise ToolError(note + str(exc)) from None
    return ToolResult(note + text)


def step_record_command(
    *, step_id: int, process_group: int, process_mark: str, sandboxed: bool
) -> None:
    """Write down a command's process group as it starts, so a restart can find it."""
    Step.objects.filter(pk=step_id).update(
        process_group=process_group, process_mark=process_mark, sandboxed=sandboxed
    )


def _run_and_wait(
    ctx: ToolContext,
    argv: list[str],
    folder: str,
    env: dict[str, str],
    timeout: float,
    sandboxed: bool,
    known: tuple[str, ...],
) -> str:
    limit = settings.CONCH_COMMAND_OUTPUT_LIMIT
    process = subprocess.Popen(  # noqa: S603 - running the person's command is this tool's job
        argv,
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        # Its own session, so its own process group: the command and all it starts
        # end together, and a restart can find them by the group recorded on the step.
        start_new_session=True,
    )
    # Read as it comes, keeping a bounded head and tail of each pipe: never held whole.
    output = Output(process, keep=limit, max_bytes=settings.CONCH_COMMAND_OUTPUT_MAX_BYTES)
    deadline = time.monotonic() + timeout
    why = ""
    # Listed as running before anything else, so a Stop that comes while the step
    # is being written down still finds it.
    with processes.running(
        process, turn_id=ctx.turn.pk, worker=ctx.worker, sandboxed=sandboxed
    ) as command:
        if ctx.step_id is not None:
            step_record_command(
                step_id=ctx.step_id,
                process_group=process.pid,
                process_mark=processes.group_mark(process.pid),
                sandboxed=sandboxed,
            )
        while not output.finished and not why:
            output.read(max(min(LOOK_EVERY_SECONDS, deadline - time.monotonic()), 0.01))
            if output.finished:
                break
            # A Stop in this process reaches the command at once; a Stop in another,
            # or the reply ending any other way, is seen here within a look.
            why = command.stop_reason or ctx.interrupted()
            if not why and output.flooded:
                why = ERR_FLOODED.format(size=size_words(output.max_bytes))
            if not why and time.monotonic() >= deadline:
                why = f"The command did not finish within {timeout:g} s and was stopped."
        # Stopped as it ended: the SIGTERM it was sent may be why it ended.
        why = why or command.stop_reason
    if why:
        # End the command's whole group (SIGTERM, a grace, SIGKILL), or what the leader
        # left in it, and take what it printed on the way out.
        processes.group_end(process.pid, process=process, spare_leader=sandboxed)
        output.read(AFTER_KILL_SECONDS)
    output.close()  # anything that left the group and still holds a pipe is let go
    process.wait()
    if why:
        # What it printed to stdout; stderr then holds mostly the shell's "Terminated".
        shown = output.stdout.shown(max(limit - len(why) - 1, 0), known)
        raise ToolError(why + ("\n" + shown if shown else ""))
    header = f"exit status {process.returncode}"
    return "\n".join([header, *_shown(output, len(header), limit, known)])


def _shown(output: Output, said: int, limit: int, known: tuple[str, ...]) -> list[str]:
    """A command's stdout and stderr, scrubbed, to follow ``said`` characters in ``limit``.

    Both fit: stderr gets up to half when both are long.
    """
    out, err = output.stdout, output.stderr
    budget = max(limit - said - 2 - len(STDERR_LABEL), 0)
    err_budget = min(err.chars, budget // 2) if out.chars else budget
    parts = []
    if out.chars:
        parts.append(out.shown(budget - err_budget, known))
    if err.chars:
        parts.append(STDERR_LABEL + err.shown(err_budget, known))
    return parts


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
        effect=Effect.READ,
        run=_read_file,
    )
)
WRITE_FILE = register(
    Tool(
        name="write_file",
        description="Create or replace a file in this chat's folder.",
        schema=_path_schema({"content": {"type": "string"}}, ("path", "content")),
        family=EDITING_FILES,
        effect=Effect.WRITE,
        run=_write_file,
        asks_in_ask_mode=True,
        preview=_preview_write,
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
        effect=Effect.WRITE,
        run=_edit_file,
        asks_in_ask_mode=True,
        preview=_preview_edit,
    )
)
LIST_FILES = register(
    Tool(
        name="list_files",
        description="List a folder inside this chat's folder.",
        schema=_path_schema(required=()),
        family=READING_FILES,
        effect=Effect.READ,
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
        effect=Effect.WRITE,
        run=_run_command,
        asks_in_ask_mode=True,
        preview=_preview_command,
    )
)
