"""``conch worker``: a runner without the web server, for Conch on PostgreSQL and Redis.

Any number of workers and ``conch serve`` processes share one database; each
reply is claimed by exactly one of them (``chats.runtime.claims.turn_claim``). A worker
never migrates: the database must already be migrated (``conch migrate`` or
``conch serve`` does it), and a worker on an unmigrated one refuses to start.
It runs until SIGTERM or SIGINT, then ends the commands its replies are running
(their steps say so) and lets its running steps finish; the replies are picked
up again by the next runner.
"""

from __future__ import annotations

import logging
import signal
import threading

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor

from chats import engines
from chats.runtime.runner import Runner
from conch import collector

log = logging.getLogger(__name__)

ERR_UNMIGRATED = (
    "The database has {count} unapplied migration(s). Workers don't migrate: "
    "run `conch migrate` (or start `conch serve`) first."
)

WARN_SQLITE = (
    "This worker shares the embedded SQLite database. It is meant for one `conch serve`, "
    "which takes over any reply running when it starts; set DATABASE_URL (PostgreSQL) "
    "to run servers and workers side by side."
)


class LoggingRunner(Runner):
    """A runner that says which replies it claims, so an operator can follow the work."""

    def tick(self) -> list[int]:
        claimed = super().tick()
        for turn_id in claimed:
            log.info("worker %s claimed turn %s", self.name, turn_id)
        return claimed


def unapplied_migrations() -> int:
    connection = connections[DEFAULT_DB_ALIAS]
    executor = MigrationExecutor(connection)
    return len(executor.migration_plan(executor.loader.graph.leaf_nodes()))


class Command(BaseCommand):
    help = "Run replies for a Conch that shares its database: a runner with no web server."

    requires_migrations_checks = False  # checked below, as an error rather than a warning

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--threads",
            type=int,
            default=None,
            help="Replies to drive at once (default CONCH_RUNNER_THREADS).",
        )

    def handle(self, *args, threads: int | None, **options) -> None:
        if threads is not None and threads < 1:
            raise CommandError(f"--threads must be at least 1 (got {threads}).")
        pending = unapplied_migrations()
        if pending:
            raise CommandError(ERR_UNMIGRATED.format(count=pending))
        if connections[DEFAULT_DB_ALIAS].vendor == "sqlite":
            log.warning(WARN_SQLITE)
        connections.close_all()

        stop = threading.Event()

        def on_signal(signum, frame) -> None:
            log.info("worker got %s; stopping", signal.Signals(signum).name)
            stop.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        runner = LoggingRunner(lone=False, threads=threads).start()
        log.info("worker %s started with %s threads", runner.name, runner.threads)
        engines.preload()  # the model SDK, imported now so that settle() freezes it too
        collector.settle()  # start-up is done: full collections walk only what comes after
        try:
            while not stop.wait(1.0):
                pass
        finally:
            runner.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            log.info("worker %s stopped after %s replies", runner.name, runner.turns_driven)
