"""Commands' process groups: ending one, knowing one again after a restart, and the running ones.

Every command runs in a session of its own, so its process group is the
command and everything it started. Ending a command means ending that group:
SIGTERM, a short grace, then SIGKILL.

A group is recorded on its step with a *mark*: the computer, its boot and the
exact moment (in kernel clock ticks) the group's leader started. After a
``kill -9`` of Conch the restarted runner ends the group it finds, and only
if it is still the one Conch started: a recycled process id has another
start time, another boot another boot id. The mark is read from ``/proc``
(Linux), because psutil's start time is a float derived from the boot time,
which can shift between two processes' readings.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

# How long a group has between SIGTERM and SIGKILL.
STOP_GRACE_SECONDS = 2.0
_LOOK_EVERY = 0.05

# What recovery found when it looked for a recorded group.
ENDED = "ended"  # it was still running and is ended now
GONE = "gone"  # nothing of it is left
ELSEWHERE = "elsewhere"  # it ran on another computer; this one can't reach it
UNKNOWN = "unknown"  # it was recorded without a mark (not Linux): left alone


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    # The name is in parentheses and may hold spaces or parentheses itself.
    return raw[raw.rfind(")") + 2 :].split()


def _start_ticks(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def group_mark(pid: int) -> str:
    """``host boot ticks`` for the group led by ``pid``; "" where /proc can't say."""
    boot, ticks = _boot_id(), _start_ticks(pid)
    if not boot or ticks is None:
        return ""
    return f"{socket.gethostname()} {boot} {ticks}"


def group_members(pgid: int, *, started_from: int = 0) -> list[int]:
    """The live processes in group ``pgid`` that started at ``started_from`` ticks or later.

    Zombies don't count: they run nothing, and an orphan's zombie lingers where
    the machine's init doesn't reap.
    """
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        fields = _stat(int(name))
        if not fields or len(fields) < 20:
            continue
        if fields[0] in ("Z", "X") or int(fields[2]) != pgid:
            continue
        if int(fields[19]) >= started_from:
            members.append(int(name))
    return members


def _group_left(pgid: int, *, started_from: int = 0) -> bool:
    """Whether anything of group ``pgid`` still runs; without /proc, whether the group exists."""
    if os.path.isdir("/proc/self"):
        return bool(group_members(pgid, started_from=started_from))
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _terminate(pgid: int, *, spare_leader: bool) -> None:
    """SIGTERM to the group; with ``spare_leader``, to all of it but its leader.

    A sandbox's leader is bwrap, which dies at once on SIGTERM and takes the
    sandbox with it (``--die-with-parent``): spared, it lets the command inside
    have its grace, and exits when the command does.
    """
    if not spare_leader:
        _signal_group(pgid, signal.SIGTERM)
        return
    for pid in group_members(pgid):
        if pid != pgid:
            try:
                os.kill(pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass


def group_end(
    pgid: int,
    *,
    process: subprocess.Popen | None = None,
    grace: float | None = None,
    started_from: int = 0,
    spare_leader: bool = False,
) -> None:
    """End group ``pgid``: SIGTERM, up to ``grace`` seconds for it to go, then SIGKILL.

    ``process`` is the group's leader when it is this process's child: it is
    reaped as it ends, so its zombie doesn't keep the wait going.
    """
    grace = STOP_GRACE_SECONDS if grace is None else grace
    _terminate(pgid, spare_leader=spare_leader)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if process is not None:
            process.poll()
        if not _group_left(pgid, started_from=started_from):
            break
        time.sleep(_LOOK_EVERY)
    # Even when the group looks empty: SIGKILL to a group that is gone is harmless.
    _signal_group(pgid, signal.SIGKILL)


def group_end_recorded(pgid: int | None, mark: str, *, grace: float | None = None) -> str:
    """End a group an earlier Conch process started, if it is still that group.

    Returns ENDED, GONE, ELSEWHERE or UNKNOWN (see the module's constants).
    """
    if not mark or pgid is None:
        return UNKNOWN
    try:
        host, boot, ticks_text = mark.split(" ")
        ticks = int(ticks_text)
    except ValueError:
        return UNKNOWN
    if host != socket.gethostname():
        return ELSEWHERE
    if boot != _boot_id():
        return GONE  # this computer restarted since: nothing of it can be left
    leader = _start_ticks(pgid)
    if leader is not None and leader != ticks:
        return GONE  # the id was reused by another process: not ours to end
    # A process in our group started after our leader did; a process from before
    # can only be in a group of the same id if the id was reused.
    if not group_members(pgid, started_from=ticks):
        return GONE
    group_end(pgid, grace=grace, started_from=ticks)
    return ENDED


# ---------------------------------------------------------------------------
# The commands running in this process, so a Stop or a shutdown reaches them


@dataclass(eq=False)
class RunningCommand:
    """A command this process is waiting on. ``stop_reason`` is set when it must end."""

    process: subprocess.Popen
    turn_id: int | None
    worker: str
    sandboxed: bool = False
    stop_reason: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def request_stop(self, reason: str) -> None:
        """Ask the command to end now: SIGTERM goes at once, its waiter does the rest."""
        with self._lock:
            if self.stop_reason:
                return
            self.stop_reason = reason
        _terminate(self.process.pid, spare_leader=self.sandboxed)


_running: set[RunningCommand] = set()
_stopping_workers: dict[str, str] = {}
_lock = threading.Lock()


@contextmanager
def running(
    process: subprocess.Popen, *, turn_id: int | None, worker: str, sandboxed: bool = False
) -> Iterator[RunningCommand]:
    """Register ``process`` for the time it runs, so :func:`commands_stop` can reach it."""
    command = RunningCommand(process=process, turn_id=turn_id, worker=worker, sandboxed=sandboxed)
    with _lock:
        _running.add(command)
        shutting_down = _stopping_workers.get(worker, "") if worker else ""
    if shutting_down:  # its runner began stopping as it started
        command.request_stop(shutting_down)
    try:
        yield command
    finally:
        with _lock:
            _running.discard(command)


def commands_stop(*, reason: str, turn_id: int | None = None, worker: str | None = None) -> int:
    """Ask the commands of one turn, or of one runner, to end. Returns how many were asked.

    It doesn't wait: each command's waiter ends its whole group, with the grace.
    A runner's name stays marked, so a command it starts after this is stopped too.
    """
    if turn_id is None and worker is None:
        raise ValueError("commands_stop needs a turn or a worker")
    with _lock:
        if worker is not None:
            _stopping_workers[worker] = reason
        chosen = [
            c
            for c in _running
            if (turn_id is None or c.turn_id == turn_id) and (worker is None or c.worker == worker)
        ]
    for command in chosen:
        command.request_stop(reason)
    with _lock:
        halts = [
            halt
            for (turn, runner), halt in _waits
            if (turn_id is None or turn == turn_id) and (worker is None or runner == worker)
        ]
    for halt in halts:
        halt.set()
    return len(chosen)


# The waits of model engines (a request, the pause between tries) for each turn and
# runner: ``commands_stop`` ends them too, so a Stop or a shutdown is not slept through.
_waits: list[tuple[tuple[int, str], threading.Event]] = []


@contextmanager
def wait_watched(*, turn_id: int, worker: str) -> Iterator[threading.Event]:
    """An event that is set when the turn's commands are asked to stop (or its runner's)."""
    halt = threading.Event()
    entry = ((turn_id, worker), halt)
    with _lock:
        if worker in _stopping_workers:
            halt.set()
        _waits.append(entry)
    try:
        yield halt
    finally:
        with _lock:
            _waits.remove(entry)


def commands_running(*, turn_id: int | None = None) -> list[RunningCommand]:
    with _lock:
        return [c for c in _running if turn_id is None or c.turn_id == turn_id]
