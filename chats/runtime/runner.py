"""The runner: claims runnable replies and drives them step by step, on threads.

One lives in the server process (started by ``conch serve``, not by the first
request) and any number in ``conch worker`` processes. Claims are row-locked
and conditional, so each reply runs exactly once whatever the number of runners.
Sweeps (recovery, room for tasks, and those apps register with
``chats.hooks.register_sweep``) run on their own period.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import close_old_connections, connection

from chats import events, hooks, processes
from chats.mcp import servers as mcp_servers
from chats.models import Turn, TurnState
from chats.runtime.claims import (
    turn_claim,
    turn_claim_one,
    turn_release,
    turn_renew_lease,
    turn_renew_leases,
    turns_recover,
)
from chats.runtime.stepping import turn_advance
from chats.runtime.turns import ERR_COMMAND_SHUTDOWN, tasks_make_room, turn_end

log = logging.getLogger(__name__)

ERR_INTERNAL = "Conch hit an internal error."


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Runner:
    def __init__(
        self,
        *,
        name: str | None = None,
        threads: int | None = None,
        lone: bool = True,
        honour_delays: bool = True,
        poll: float = 1.0,
    ) -> None:
        self.name = name or worker_name()
        self.threads = threads or settings.CONCH_RUNNER_THREADS
        self.lone = lone  # the only runner: every claimed turn at start is an orphan
        self.honour_delays = honour_delays
        self.poll = poll
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._active: set[int] = set()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.turns_driven = 0

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> Runner:
        # A persona's MCP server that says its tools changed has them listed again.
        mcp_servers.listen()
        self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="conch-turn")
        self._unsubscribe = events.subscribe(self._on_event)
        self._thread = threading.Thread(target=self._loop, name="conch-runner", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop claiming, end the commands this runner's replies run, and let their steps end."""
        self._stop.set()
        self._wake.set()
        if self._unsubscribe:
            self._unsubscribe()
        if self._thread:
            self._thread.join(timeout)
        # Their steps record why; the replies are released for the next start to pick up.
        processes.commands_stop(worker=self.name, reason=ERR_COMMAND_SHUTDOWN)
        if self._pool:
            self._pool.shutdown(wait=True, cancel_futures=True)
        mcp_servers.close_all()  # its steps are done: the MCP servers it started end with it

    def nudge(self) -> None:
        self._wake.set()

    def _on_event(self, event: events.Event) -> None:
        # A reply becomes runnable with a status event (its chat working), a task's with
        # its own: no event of their own is published for the runners, nor numbered.
        if event.type in (events.STATUS, events.TASK_CHANGED):
            self._wake.set()

    # -- the loop ------------------------------------------------------------

    def _loop(self) -> None:
        import time

        try:
            turns_recover(orphaned_only=not self.lone)
            tasks_make_room()
        except Exception:
            log.exception("recovery at start failed")
        finally:
            close_old_connections()
        while not self._stop.is_set():
            try:
                self.tick()
                now = time.monotonic()
                for sweep in list(hooks.sweeps):
                    if now - sweep.last >= sweep.every:
                        sweep.last = now
                        try:
                            sweep.run()
                        except Exception:
                            log.exception("sweep %s failed", sweep.name)
            except Exception:
                log.exception("runner tick failed")
            finally:
                close_old_connections()
            self._wake.wait(self.poll)
            self._wake.clear()
        connection.close()

    def tick(self) -> list[int]:
        """Renew the leases of the replies this runner drives, then claim what there is room for."""
        with self._lock:
            active = list(self._active)
        if active:
            # A heartbeat: a step can run longer than a lease (a slow command), and a
            # lease that ran out would let another runner take the reply for an orphan.
            turn_renew_leases(turn_ids=active, worker=self.name)
        if not self.lone:
            turns_recover(orphaned_only=True)
        with self._lock:
            room = self.threads - len(self._active)
        if room <= 0 or not runnable_exists():
            return []
        claimed = turn_claim(worker=self.name, limit=room)
        for turn_id in claimed:
            with self._lock:
                self._active.add(turn_id)
            assert self._pool is not None
            self._pool.submit(self._drive, turn_id)
        return claimed

    def _drive(self, turn_id: int) -> None:
        try:
            self.drive(turn_id)
        except Exception:
            _failed(turn_id)
        finally:
            with self._lock:
                self._active.discard(turn_id)
            close_old_connections()
            self._wake.set()

    def drive(self, turn_id: int) -> None:
        while not self._stop.is_set():
            advance = turn_advance(
                turn_id=turn_id, worker=self.name, honour_delays=self.honour_delays
            )
            if not advance.more:
                break
            if not turn_renew_lease(turn_id=turn_id, worker=self.name):
                break
        else:
            turn_release(turn_id=turn_id, worker=self.name)
        self.turns_driven += 1


def _failed(turn_id: int) -> None:
    """End a reply whose driving raised: the person sees it failed, the log says why."""
    log.exception("driving turn %s failed", turn_id)
    try:
        turn = Turn.objects.get(pk=turn_id)
        turn_end(turn=turn, state=TurnState.FAILED, reason=ERR_INTERNAL)
    except Exception:
        log.exception("could not mark turn %s failed", turn_id)


_embedded: Runner | None = None


def start_embedded_runner(*, lone: bool = True) -> Runner:
    """The runner inside the server process (``conch serve``).

    ``lone`` only when no other runner shares the database (the embedded
    SQLite): a lone runner takes every claimed turn at start for an orphan, so
    beside live workers it would take over their running replies.
    """
    global _embedded
    if _embedded is None:
        _embedded = Runner(lone=lone).start()
    return _embedded


def drain(*, worker: str = "drain", limit: int = 10_000, honour_delays: bool = False) -> int:
    """Run every runnable reply to its end in this thread; for tests.

    Returns how many actions were played. Stops after ``limit`` actions so a
    script that loops can't hang a test.
    """
    played = 0
    while played < limit:
        claimed = turn_claim(worker=worker, limit=1)
        if not claimed:
            tasks_make_room()
            claimed = turn_claim(worker=worker, limit=1)
            if not claimed:
                return played
        turn_id = claimed[0]
        while played < limit:
            advance = turn_advance(turn_id=turn_id, worker=worker, honour_delays=honour_delays)
            played += 1
            if not advance.more:
                break
        else:
            turn_release(turn_id=turn_id, worker=worker)
    return played


def runnable_exists() -> bool:
    """Whether any reply waits for a runner: a plain read, so an idle runner's tick never
    opens a transaction. On SQLite (IMMEDIATE) a claim's transaction takes the database's
    write lock even when it claims nothing, and the runner ticks on every status event:
    the writers taking messages in would queue behind it, message after message.
    """
    return Turn.objects.filter(
        state=TurnState.RUNNING, ended_at__isnull=True, claimed_by=""
    ).exists()


def runnable_by_chat() -> dict[int, int]:
    """Each chat with a reply waiting for a runner: chat pk → that reply's pk.

    A chat runs one reply at a time, so each chat has at most one.
    """
    return dict(
        Turn.objects.filter(
            state=TurnState.RUNNING, ended_at__isnull=True, claimed_by=""
        ).values_list("conversation_id", "pk")
    )


def drive_one_action(*, turn_id: int, worker: str) -> bool:
    """Claim one particular reply, play exactly one action of it, and let it go.

    For ``conch_play``, which interleaves chats one action at a time. False if
    the reply wasn't runnable or another worker holds it. Delays are skipped.
    """
    if not turn_claim_one(turn_id=turn_id, worker=worker):
        return False
    try:
        turn_advance(turn_id=turn_id, worker=worker, honour_delays=False)
    except Exception:
        _failed(turn_id)
    turn_release(turn_id=turn_id, worker=worker)
    return True
