"""The connection to MCP servers: a synchronous face over the official ``mcp`` SDK.

The SDK is asynchronous (anyio); Conch's runner is threads. This module keeps one event
loop of its own in a thread, ``conch-mcp``, and every session lives there. A runner thread
calls :func:`list_tools` or :func:`call_tool` and waits, looking every moment at whether
the call was stopped (``interrupted()``, as a command does) and whether its time is up.

The rules it keeps:

- **One session per server and folder** in this process: :class:`ServerSpec` ``key``
  and ``folder`` name it. It starts on first use, is shared by every call for that
  key and folder, and ends when idle for ``CONCH_MCP_IDLE_SECONDS`` (:func:`close_idle`,
  run by the loop itself too) or at :func:`close_all`.
- **A stdio server runs like a command** (:mod:`chats.tools.sandbox`): in bubblewrap's
  sandbox as ``CONCH_SANDBOX`` says, in its folder, with the minimal environment
  commands get plus what the persona names for it. A chat with other people in it
  (``sandbox_required``) gets the sandbox or no server. Without the sandbox it runs
  under the reaper's keeper, so what it starts ends with it.
- **Each call has a timeout** (``CONCH_MCP_CALL_SECONDS``, starting the server included).
  Progress notifications reach ``on_progress`` in the caller's thread.
- **A stopped or timed-out call is cancelled**: the SDK sends ``notifications/cancelled``.
  A stdio server's process group is then ended, so nothing the call started goes on
  (a server may run a tool in a thread it can't cancel, and that thread may have started
  a program); it starts afresh at the next call, and other calls in flight on it fail.
  An HTTP server keeps its session if it answers a ping within :data:`STOP_GRACE_SECONDS`.
- **A stdio server that ended is started afresh**: a call looks at whether its process
  is still there (a pidfd) before sending anything on it; if it is gone, it is started
  again for this call. A call already sent when it ended fails: it is never sent twice.
- **A result is bounded** like a command's output (``CONCH_COMMAND_OUTPUT_LIMIT``).
- **Failures are words**, :class:`McpError`: a server that does not start says why,
  with the end of what it printed to stderr; never a traceback. A key or a value the
  persona gave the server is taken out of them.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import json
import logging
import os
import queue
import select
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import anyio
import httpx2
from django.conf import settings
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp import types as mcp_types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from chats import processes
from chats.quoting import scrub_secrets
from chats.tools import reaper, sandbox
from chats.tools.output import cut

logger = logging.getLogger(__name__)

__all__ = [
    "CallResult",
    "McpError",
    "McpInterrupted",
    "ServerSpec",
    "ToolInfo",
    "call_tool",
    "close_all",
    "close_idle",
    "list_tools",
    "on_list_changed",
]

# How often a waiting call looks at whether it was stopped, and passes on progress.
LOOK_EVERY_SECONDS = 0.1
# After a call is cancelled: a moment for the cancel to reach a stdio server before it is
# ended, and how long an HTTP server has to show it still answers.
CANCEL_NOTE_SECONDS = 0.2
STOP_GRACE_SECONDS = 2.0
# After a call is cancelled: how long the caller waits for the cancelling to be done.
STOP_WAIT_SECONDS = 15.0
# How much of what a stdio server printed to stderr is kept for the words of a failure.
STDERR_TAIL_CHARS = 2_000
# How long a failed server has to finish printing before its words are made.
STDERR_SETTLE_SECONDS = 1.0
# Keys and the persona's values shorter than this are left in words: "1" is not a secret.
KNOWN_SECRET_MIN = 8
# How often the loop itself looks for idle servers.
IDLE_LOOK_SECONDS = 1.0

ERR_SANDBOX_REQUIRED = (
    "CONCH_SANDBOX is 'required' and the sandbox does not work on this computer ({why}), "
    "so the MCP server {name!r} was not started."
)
ERR_SANDBOX_FOR_OTHER_PEOPLE = (
    "MCP servers in a chat with someone else's words run only in the sandbox, and the sandbox "
    "does not work on this computer ({why}), so the MCP server {name!r} was not started."
)
ERR_NO_FOLDER = "The MCP server {name!r} runs in its chat's folder, and {folder} is not a folder."
ERR_NO_COMMAND = "The MCP server {name!r} has no command to run."
ERR_NO_URL = "The MCP server {name!r} has no address."
ERR_START = "The MCP server {name!r} did not start: {why}"
ERR_TIMEOUT = (
    "The MCP server {name!r} did not answer {what} within {seconds:g} s, so it was cancelled."
)
ERR_STOPPED = "The call to {tool!r} on the MCP server {name!r} was stopped: {why}"
ERR_FAILED = "The MCP server {name!r} failed while {what}: {why}"
STDERR_SAID = "\nIt printed:\n{tail}"


# ---------------------------------------------------------------------------
# The interface


@dataclass(frozen=True)
class ServerSpec:
    """One MCP server as a persona configured it."""

    key: str  # stable identity of the server's configuration
    name: str  # the person's name for it, for words
    transport: Literal["stdio", "http"]
    command: tuple[str, ...] = ()  # stdio: argv
    # stdio: extra environment, on top of the commands' short one (not hashed: a mapping)
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    url: str = ""  # http: the streamable-HTTP endpoint
    key_secret: str = field(default="", repr=False)  # http: a bearer key, never in words
    folder: str = ""  # stdio: where it runs
    sandbox_required: bool = False  # a chat with other people in it: the sandbox or nothing
    network: bool = False  # stdio in the sandbox: whether it reaches the network


@dataclass(frozen=True)
class ToolInfo:
    name: str
    title: str
    description: str
    input_schema: dict
    read_only: bool  # the server marks it readOnlyHint


@dataclass(frozen=True)
class CallResult:
    text: str  # the content as text, bounded
    is_error: bool  # the server's isError
    truncated: bool  # cut at the bound


class McpError(Exception):
    """A failure in plain words (``words``), for the person and the assistant."""

    def __init__(self, words: str) -> None:
        super().__init__(words)
        self.words = words


class McpInterrupted(McpError):
    """The call was stopped: the server was told (``notifications/cancelled``)."""


# ---------------------------------------------------------------------------
# The loop


class _Loop:
    """The event loop thread, started at first use (again in a forked child)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0

    def get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            alive = self._thread is not None and self._thread.is_alive()
            if self._loop is None or not alive or self._pid != os.getpid():
                _pool.clear()  # a forked child's copy of its parent's sessions is not its own
                loop = asyncio.new_event_loop()
                started = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.create_task(_look_for_idle())
                    loop.run_forever()

                thread = threading.Thread(target=run, name="conch-mcp", daemon=True)
                thread.start()
                started.wait()
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
            return self._loop

    def started(self) -> bool:
        with self._lock:
            return self._loop is not None and self._pid == os.getpid()


_loop = _Loop()
_list_changed: list[Callable[[str], None]] = []
_list_changed_lock = threading.Lock()
# The callbacks run here, one at a time, never in the loop: they may wait on the database.
_callbacks = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="conch-mcp-cb")


def on_list_changed(callback: Callable[[str], None]) -> Callable[[], None]:
    """Call ``callback(spec.key)`` when a server says its tools changed. Returns an undo."""
    with _list_changed_lock:
        _list_changed.append(callback)

    def forget() -> None:
        with _list_changed_lock:
            if callback in _list_changed:
                _list_changed.remove(callback)

    return forget


def _tell_list_changed(key: str) -> None:
    with _list_changed_lock:
        callbacks = list(_list_changed)
    for callback in callbacks:
        try:
            callback(key)
        except Exception:
            logger.exception("A callback for an MCP server's changed tools failed")


# ---------------------------------------------------------------------------
# A live session


class _Server:
    """One server's session, kept open by its own task in the loop (:func:`_serve`)."""

    def __init__(self, spec: ServerSpec, folder: str) -> None:
        self.spec = spec
        self.folder = folder
        self.session: ClientSession | None = None
        self.pid: int | None = None  # stdio: the process (and group) it runs as
        self.pidfd: int | None = None  # stdio: that process, to see it end at once
        self.sandboxed = False
        self.failure = ""  # why it did not start, or why it ended
        self.refused = ""  # the whole words, when it was not even started
        self.http_status = ""  # http: the last refusal its address answered
        self.ready = asyncio.Event()  # started, or failed to
        self.closing = asyncio.Event()  # asked to end
        self.done = asyncio.Event()  # ended
        self.stderr_done = asyncio.Event()
        self.stderr: collections.deque[str] = collections.deque()
        self.stderr_chars = 0
        self.in_flight = 0
        self.last_used = time.monotonic()
        self.task: asyncio.Task | None = None

    @property
    def usable(self) -> bool:
        if self.closing.is_set() or self.done.is_set():
            return False
        if self.spec.transport != "stdio":
            return True
        # A stdio server whose stderr reached its end has exited, and all it started. The
        # loop may not have read that end yet when the process is gone: its pidfd says so.
        return not (self.stderr_done.is_set() or (self.pidfd is not None and _ended(self.pidfd)))

    def known(self) -> tuple[str, ...]:
        return _known(self.spec)

    def said(self) -> str:
        """The end of what it printed to stderr, scrubbed, as words to follow a failure."""
        tail = "".join(self.stderr).strip()[-STDERR_TAIL_CHARS:]
        return STDERR_SAID.format(tail=scrub_secrets(tail, known=self.known())) if tail else ""

    def words(self, text: str) -> str:
        return scrub_secrets(text, known=self.known())

    # stderr, read as it comes by the loop: only its tail is kept.
    def watch_stderr(self, fd: int) -> None:
        os.set_blocking(fd, False)
        loop = asyncio.get_running_loop()

        def readable() -> None:
            try:
                data = os.read(fd, 65_536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                loop.remove_reader(fd)
                os.close(fd)
                self.stderr_done.set()
                return
            text = data.decode("utf-8", errors="replace")
            self.stderr.append(text)
            self.stderr_chars += len(text)
            while self.stderr and self.stderr_chars - len(self.stderr[0]) >= STDERR_TAIL_CHARS:
                self.stderr_chars -= len(self.stderr.popleft())

        loop.add_reader(fd, readable)

    async def on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            asyncio.get_running_loop().run_in_executor(
                _callbacks, _tell_list_changed, self.spec.key
            )
        elif isinstance(message, Exception):
            logger.info("MCP server %r: %s", self.spec.name, self.words(str(message)))


_pool: dict[tuple[str, str], _Server] = {}
_starting: dict[tuple[str, str], asyncio.Lock] = {}


def _plain(command: list[str], folder: str, env: Mapping[str, str], name: str) -> list[str]:
    """``command`` under the keeper, once it is known to be there (the keeper would only
    print a traceback)."""
    program = command[0]
    found = shutil.which(
        os.path.join(folder, program) if os.sep in program else program, path=env.get("PATH")
    )
    if found is None:
        raise McpError(ERR_START.format(name=name, why=f"{program} was not found."))
    return reaper.kept(command)


def _stdio_argv(spec: ServerSpec, folder: str, env: Mapping[str, str]) -> tuple[list[str], bool]:
    """How to run a stdio server: its argv and whether it is in the sandbox."""
    command = list(spec.command)
    if settings.CONCH_SANDBOX == sandbox.SANDBOX_OFF and not spec.sandbox_required:
        return _plain(command, folder, env, spec.name), False
    probe = sandbox.sandbox_probe()
    if probe.works:
        argv = sandbox.bwrap_argv(
            probe.bwrap, folder, network=spec.network, strangers=spec.sandbox_required
        )
        return argv + command, True
    if settings.CONCH_SANDBOX == sandbox.SANDBOX_REQUIRED:
        raise McpError(ERR_SANDBOX_REQUIRED.format(why=probe.why, name=spec.name))
    if spec.sandbox_required:
        raise McpError(ERR_SANDBOX_FOR_OTHER_PEOPLE.format(why=probe.why, name=spec.name))
    logger.warning("MCP server %r runs without a sandbox: %s", spec.name, probe.why)
    return _plain(command, folder, env, spec.name), False


def _child_with_stderr(fd: int) -> tuple[int, int] | None:
    """This process's child whose stderr is the pipe ``fd`` reads: the server just started,
    as its pid and a pidfd for it (the caller closes it).

    The pidfd is opened before the child is known for the server, so it is the server's
    even if the pid were freed and reused meanwhile: nothing else is this process's child
    with that pipe for its stderr.
    """
    pipe = f"pipe:[{os.fstat(fd).st_ino}]"
    me = str(os.getpid())

    def ours(name: str) -> bool:
        with open(f"/proc/{name}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[1] == me

    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if not ours(name):
                continue
            pidfd = os.pidfd_open(int(name))
        except (OSError, IndexError):
            continue
        try:
            if ours(name) and os.readlink(f"/proc/{name}/fd/2") == pipe:
                return int(name), pidfd
        except (OSError, IndexError):
            pass
        os.close(pidfd)
    return None


def _ended(pidfd: int) -> bool:
    """Whether the process ``pidfd`` stands for has ended (its pidfd turns readable)."""
    poller = select.poll()  # not select.select: the fd may be past FD_SETSIZE
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def _reason(exc: BaseException) -> str:
    """Plain words for what an SDK call raised (the first of a group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        if exc.code == mcp_types.CONNECTION_CLOSED:
            return "the connection ended (the server exited or closed it)."
        return f"{exc.message} (error {exc.code})."
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"its address answered {exc.response.status_code} {exc.response.reason_phrase}."
    if isinstance(exc, httpx2.HTTPError):
        return f"its address could not be reached ({type(exc).__name__}: {exc})."
    if isinstance(exc, FileNotFoundError):
        return f"{exc.filename or 'its command'} was not found."
    if isinstance(exc, TimeoutError):
        return "it did not answer in time."
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def _serve(server: _Server, start_seconds: float) -> None:
    """Start the server, hold its session open until asked to close, then end it."""
    spec = server.spec
    stderr_write: Any = None
    try:
        async with contextlib.AsyncExitStack() as stack:
            if spec.transport == "stdio":
                env = sandbox.command_environment(sandbox.CommandSettings()) | dict(spec.env)
                argv, server.sandboxed = _stdio_argv(spec, server.folder, env)
                read_fd, write_fd = os.pipe()
                server.watch_stderr(read_fd)
                stderr_write = os.fdopen(write_fd, "w")
                params = StdioServerParameters(
                    command=argv[0], args=argv[1:], env=env, cwd=server.folder
                )
                streams = await stack.enter_async_context(stdio_client(params, errlog=stderr_write))
                stderr_write.close()  # the server has its own copy: its end is the pipe's
                child = _child_with_stderr(read_fd) if not server.stderr_done.is_set() else None
                if child is not None:
                    server.pid, server.pidfd = child
            else:
                headers = {"Authorization": f"Bearer {spec.key_secret}"} if spec.key_secret else {}

                async def heard(response: httpx2.Response) -> None:
                    if response.status_code >= 400:
                        server.http_status = f"{response.status_code} {response.reason_phrase}"

                client = httpx2.AsyncClient(
                    headers=headers,
                    timeout=httpx2.Timeout(30.0, read=start_seconds + 30.0),
                    event_hooks={"response": [heard]},
                )
                await stack.enter_async_context(client)
                streams = await stack.enter_async_context(
                    streamable_http_client(spec.url, http_client=client)
                )
            session = await stack.enter_async_context(
                ClientSession(streams[0], streams[1], message_handler=server.on_message)
            )
            with anyio.fail_after(start_seconds):
                await session.initialize()
            server.session = session
            server.ready.set()
            await server.closing.wait()
            server.session = None
    except BaseException as exc:  # noqa: BLE001 - every failure becomes words, cancelling too
        if not server.ready.is_set():
            if isinstance(exc, McpError):
                server.refused = exc.words
            elif isinstance(exc, TimeoutError):
                server.failure = f"it did not answer within {start_seconds:g} s."
            else:
                server.failure = _reason(exc)
            if server.http_status:
                server.failure += f" Its address answered {server.http_status}."
        elif not server.closing.is_set():
            logger.info("MCP server %r ended: %s", spec.name, server.words(_reason(exc)))
        if isinstance(exc, asyncio.CancelledError):
            raise
    finally:
        server.session = None
        if server.pidfd is not None:
            os.close(server.pidfd)
            server.pidfd = None
        if stderr_write is not None and not stderr_write.closed:
            stderr_write.close()
        if spec.transport == "stdio":
            with anyio.move_on_after(STDERR_SETTLE_SECONDS, shield=True):
                await server.stderr_done.wait()
        server.ready.set()
        server.done.set()


async def _server_for(spec: ServerSpec, folder: str, start_seconds: float) -> _Server:
    """The live server for ``spec`` in ``folder``: the one running, or one started now."""
    key = (spec.key, folder)
    lock = _starting.setdefault(key, asyncio.Lock())
    async with lock:
        server = _pool.get(key)
        # A stdio server whose process ended has been sent nothing of this call yet, so it
        # is safe to start afresh. It may still end after this look and before the SDK's
        # writer hands it the request (there are awaits between): that call fails as
        # "the connection ended", as one already sent does, and the next call starts it
        # afresh. It is not sent again, since the server may have read it.
        if server is not None and not server.usable:
            await _close(server)
            server = None
        if server is None:
            server = _Server(spec, folder)
            _pool[key] = server
            server.task = asyncio.create_task(_serve(server, start_seconds))
        await server.ready.wait()
        if server.session is None:
            _pool.pop(key, None)
            if server.refused:
                raise McpError(server.refused)
            raise McpError(
                server.words(ERR_START.format(name=spec.name, why=server.failure)) + server.said()
            )
        server.last_used = time.monotonic()
        return server


async def _close(server: _Server) -> None:
    if _pool.get((server.spec.key, server.folder)) is server:
        del _pool[(server.spec.key, server.folder)]
    server.closing.set()
    if server.task is not None:
        with anyio.CancelScope(shield=True):
            await server.done.wait()


async def _end(server: _Server) -> None:
    """End a server that does not answer: its process group first, for stdio."""
    if server.pid is not None:
        await anyio.to_thread.run_sync(
            lambda: processes.group_end(server.pid or 0, spare_leader=server.sandboxed)
        )
    await _close(server)


async def _answers(server: _Server) -> bool:
    """Whether the server answers a ping within the grace."""
    session = server.session
    if session is None:
        return False
    with anyio.move_on_after(STOP_GRACE_SECONDS):
        try:
            await session.send_ping()
            return True
        except Exception:  # noqa: BLE001 - a server that can't answer a ping is stuck
            return False
    return False


class _Stopped(Exception):
    """The caller stopped the call, and the server was told."""


async def _run(
    spec: ServerSpec,
    folder: str,
    start_seconds: float,
    stop: asyncio.Event,
    what: Callable[[ClientSession], Any],
) -> Any:
    """Run ``what(session)`` on the server's session, cancelled when ``stop`` is set."""
    result: Any = None
    server: _Server | None = None
    with anyio.CancelScope() as scope:

        async def watch() -> None:
            await stop.wait()
            scope.cancel()

        watcher = asyncio.create_task(watch())
        try:
            server = await _server_for(spec, folder, start_seconds)
            session = server.session
            assert session is not None
            server.in_flight += 1
            try:
                result = await what(session)
            except Exception:
                # A server that no longer answers (it exited, or its address forgot the
                # session) is started afresh at the next call rather than failing them all.
                if not await _answers(server):
                    await _close(server)
                raise
            finally:
                server.in_flight -= 1
                server.last_used = time.monotonic()
        finally:
            watcher.cancel()
    stopped = scope.cancelled_caught
    if stopped:
        # Cancelled: the SDK has sent notifications/cancelled. A stdio server's process
        # group is ended too, so nothing the call started goes on (a git hook, a build);
        # it starts afresh at the next call. An HTTP server keeps its session, unless it
        # no longer answers.
        if server is not None:
            if server.spec.transport == "stdio":
                await anyio.sleep(CANCEL_NOTE_SECONDS)
                await _end(server)
            elif not await _answers(server):
                logger.info("MCP server %r did not answer after a cancel", spec.name)
                await _close(server)
        raise _Stopped()
    return result


def _wait(
    spec: ServerSpec,
    what: Callable[[ClientSession], Any],
    *,
    doing: str,
    timeout: float | None,
    interrupted: Callable[[], str] = lambda: "",
    progress: queue.SimpleQueue | None = None,
    on_progress: Callable[[float, float | None, str], None] | None = None,
    tool: str = "",
) -> Any:
    """Run ``what`` in the loop and wait for it here, stopping it when told to."""
    seconds = settings.CONCH_MCP_CALL_SECONDS if timeout is None else timeout
    folder = ""
    if spec.transport == "stdio":
        if not spec.command:
            raise McpError(ERR_NO_COMMAND.format(name=spec.name))
        folder = os.path.realpath(spec.folder) if spec.folder else ""
        if not folder or not os.path.isdir(folder):
            raise McpError(ERR_NO_FOLDER.format(name=spec.name, folder=spec.folder or "(none)"))
    elif not spec.url:
        raise McpError(ERR_NO_URL.format(name=spec.name))
    loop = _loop.get()
    stop = asyncio.Event()
    future = asyncio.run_coroutine_threadsafe(_run(spec, folder, seconds, stop, what), loop)
    deadline = time.monotonic() + seconds
    why = ""
    timed_out = False
    stop_sent_at = 0.0

    def pass_progress() -> None:
        while progress is not None and on_progress is not None:
            try:
                done, total, message = progress.get_nowait()
            except queue.Empty:
                return
            on_progress(done, total, message)

    while True:
        try:
            result = future.result(timeout=LOOK_EVERY_SECONDS)
            break
        except concurrent.futures.TimeoutError:
            pass
        except _Stopped:
            pass_progress()
            if timed_out:
                raise McpError(
                    ERR_TIMEOUT.format(name=spec.name, what=doing, seconds=seconds)
                ) from None
            raise McpInterrupted(ERR_STOPPED.format(tool=tool, name=spec.name, why=why)) from None
        except McpError:
            raise
        except Exception as exc:
            raise McpError(
                scrub_secrets(
                    ERR_FAILED.format(name=spec.name, what=doing, why=_reason(exc)),
                    known=_known(spec),
                )
            ) from None
        pass_progress()
        if stop_sent_at:
            if time.monotonic() - stop_sent_at > STOP_WAIT_SECONDS:
                future.cancel()
                raise McpInterrupted(ERR_STOPPED.format(tool=tool, name=spec.name, why=why))
            continue
        why = interrupted()
        if not why and time.monotonic() >= deadline:
            why, timed_out = "time is up", True
        if why:
            loop.call_soon_threadsafe(stop.set)
            stop_sent_at = time.monotonic()
    pass_progress()
    return result


def _known(spec: ServerSpec) -> tuple[str, ...]:
    values = (spec.key_secret, *spec.env.values())
    return tuple(v for v in values if v and len(v) >= KNOWN_SECRET_MIN)


# ---------------------------------------------------------------------------
# Tools


def list_tools(spec: ServerSpec, *, timeout: float | None = None) -> list[ToolInfo]:
    """The server's tools (``tools/list``, every page). Raises :class:`McpError`."""

    async def listing(session: ClientSession) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    found = _wait(spec, listing, doing="listing its tools", timeout=timeout)
    return [_tool_info(tool) for tool in found]


def _tool_info(tool: mcp_types.Tool) -> ToolInfo:
    annotations = tool.annotations
    title = tool.title or (annotations.title if annotations and annotations.title else "") or ""
    return ToolInfo(
        name=tool.name,
        title=title,
        description=tool.description or "",
        input_schema=dict(tool.input_schema),
        read_only=bool(annotations is not None and annotations.read_only_hint is True),
    )


def call_tool(
    spec: ServerSpec,
    tool: str,
    arguments: dict,
    *,
    timeout: float | None = None,
    on_progress: Callable[[float, float | None, str], None] | None = None,
    interrupted: Callable[[], str] = lambda: "",
) -> CallResult:
    """Call ``tool`` with ``arguments``; raises :class:`McpError` / :class:`McpInterrupted`."""
    updates: queue.SimpleQueue = queue.SimpleQueue()

    async def calling(session: ClientSession) -> mcp_types.CallToolResult:
        async def report(progress: float, total: float | None, message: str | None) -> None:
            updates.put((progress, total, message or ""))

        return await session.call_tool(tool, arguments, progress_callback=report)

    result = _wait(
        spec,
        calling,
        doing=f"calling {tool!r}",
        timeout=timeout,
        interrupted=interrupted,
        progress=updates,
        on_progress=on_progress,
        tool=tool,
    )
    text = result_text(result)
    limit = settings.CONCH_COMMAND_OUTPUT_LIMIT
    return CallResult(
        text=cut(text, limit), is_error=bool(result.is_error), truncated=len(text) > limit
    )


def result_text(result: mcp_types.CallToolResult) -> str:
    """A tool's result as text: its text parts, and a line saying what each other part is."""
    parts: list[str] = []
    for part in result.content:
        if isinstance(part, mcp_types.TextContent):
            parts.append(part.text)
        elif isinstance(part, mcp_types.ImageContent | mcp_types.AudioContent):
            kind = "image" if isinstance(part, mcp_types.ImageContent) else "audio"
            size = len(part.data) * 3 // 4
            parts.append(f"[{kind}, {part.mime_type}, about {size} bytes, not shown]")
        elif isinstance(part, mcp_types.ResourceLink):
            parts.append(f"[a link to {part.name}: {part.uri}]")
        elif isinstance(part, mcp_types.EmbeddedResource):
            resource = part.resource
            if isinstance(resource, mcp_types.TextResourceContents):
                parts.append(resource.text)
            else:
                mime = getattr(resource, "mime_type", None) or "data"
                parts.append(f"[{resource.uri}: {mime}, not shown]")
        else:
            parts.append(f"[{getattr(part, 'type', type(part).__name__)} content, not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, indent=2))
    return "\n".join(parts)


# ---------------------------------------------------------------------------
# Ending servers


async def _close_idle(now: float | None) -> None:
    idle = settings.CONCH_MCP_IDLE_SECONDS
    now = time.monotonic() if now is None else now
    for server in list(_pool.values()):
        if server.in_flight == 0 and (now - server.last_used > idle or not server.usable):
            await _close(server)


async def _look_for_idle() -> None:
    while True:
        await asyncio.sleep(IDLE_LOOK_SECONDS)
        try:
            await _close_idle(None)
        except Exception:
            logger.exception("Ending idle MCP servers failed")


def close_idle(now: float | None = None) -> None:
    """End the servers idle longer than ``CONCH_MCP_IDLE_SECONDS`` (``now``: ``time.monotonic()``)."""
    if _loop.started():
        asyncio.run_coroutine_threadsafe(_close_idle(now), _loop.get()).result()


async def _close_every() -> None:
    for server in list(_pool.values()):
        await _close(server)


def close_all() -> None:
    """End every server this process started (at the runner's shutdown)."""
    if _loop.started():
        asyncio.run_coroutine_threadsafe(_close_every(), _loop.get()).result()
