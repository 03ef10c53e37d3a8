"""A command's keeper where there is no sandbox: everything it starts ends with it.

With ``CONCH_SANDBOX=off`` (or ``auto`` where bubblewrap doesn't work) a command runs in a
process group of its own, and Stop ends the group. A process that calls ``setsid`` leaves
the group and, before this, outlived Stop. Now the command runs under a small keeper,
:data:`KEEPER`, run as ``python -I -S -c KEEPER /bin/sh -c COMMAND``: the keeper makes
itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so whatever the command starts
stays its descendant however it detaches, and ends every descendant when the command
ends or when it is told to stop (SIGTERM first, then SIGKILL a moment later). Its exit
status is the command's, a signal death included.

The keeper is plain Python with no imports of Conch's: it starts in a few milliseconds.
"""

from __future__ import annotations

import sys

KEEPER = r"""
import ctypes, os, signal, sys, time

PR_SET_CHILD_SUBREAPER = 36
try:  # Linux; elsewhere what detaches still escapes, as before
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
except (AttributeError, OSError):
    pass
me = os.getpid()
child = os.fork()
if child == 0:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    os.execv(sys.argv[1], sys.argv[1:])


def descendants():
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as stat:
                    parents[int(name)] = int(stat.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    found, wanted = [], {me}
    while wanted:
        kids = [pid for pid, parent in parents.items() if parent in wanted]
        found += kids
        wanted = set(kids)
    return found


def signal_all(sig):
    for pid in descendants():
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def reap():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                return
        except ChildProcessError:
            return


def end_all(grace):
    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while descendants() and time.monotonic() < deadline:
        reap()
        time.sleep(0.02)
    signal_all(signal.SIGKILL)
    deadline = time.monotonic() + 1
    while descendants() and time.monotonic() < deadline:
        reap()
        time.sleep(0.01)
    reap()


def stopped(signum, frame):
    end_all(1.5)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(me, signum)


signal.signal(signal.SIGTERM, stopped)
signal.signal(signal.SIGINT, stopped)
while True:
    try:
        pid, status = os.waitpid(child, 0)
        break
    except InterruptedError:
        continue
end_all(0.5)
if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    signal.signal(sig, signal.SIG_DFL)
    os.kill(me, sig)
sys.exit(os.WEXITSTATUS(status))
"""


def kept(argv: list[str]) -> list[str]:
    """``argv`` run under the keeper."""
    return [sys.executable, "-I", "-S", "-c", KEEPER, *argv]
