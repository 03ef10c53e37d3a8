"""``manage.py conch_maintain [--dry-run]``: prune dead gateway sessions and compact long ones.

Prints what it did, or with ``--dry-run`` (or in mode ``warn``) what it would
do, with progress lines as it works through a large store in batches.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from chats.gateway.maintenance import BATCH, maintenance_run


class Command(BaseCommand):
    help = "Prune sessions past pruneAfter and compact sessions past maxEntries."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Only say what would be done.")
        parser.add_argument("--batch", type=int, default=BATCH, help="Rows per batch.")
        parser.add_argument("--quiet", action="store_true", help="No progress lines.")

    def handle(self, *args, **options) -> None:
        progress = None if options["quiet"] else (lambda line: self.stderr.write(line))
        report = maintenance_run(
            dry_run=options["dry_run"], batch=max(1, options["batch"]), progress=progress
        )
        for line in report.lines():
            self.stdout.write(line)
