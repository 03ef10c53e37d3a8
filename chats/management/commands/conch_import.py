"""``manage.py conch_import DIR``: read sessions in OpenClaw's layout into the database.

A session whose id is already here, or whose key already has a live session,
is skipped and named. A malformed file stops the import with its name and line.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from chats.gateway.interop import InteropError, sessions_import
from chats.gateway.owners import OwnerError, owner_for_command


class Command(BaseCommand):
    help = "Import agents/<agentId>/sessions/sessions.json and their .jsonl transcripts."

    def add_arguments(self, parser) -> None:
        parser.add_argument("directory", help="The folder holding agents/…")
        parser.add_argument("--owner", help="Whose chats the imported sessions are (a username).")

    def handle(self, *args, **options) -> None:
        root = Path(options["directory"]).expanduser()
        try:
            owner = owner_for_command(options.get("owner"))
            report = sessions_import(root=root, owner=owner)
        except (InteropError, OwnerError) as exc:
            raise CommandError(str(exc)) from None
        for skipped in report.skipped:
            self.stderr.write(f"skipped {skipped}")
        self.stdout.write(
            f"imported {report.sessions} sessions ({report.entries} entries) "
            f"for {report.agents} agents; skipped {len(report.skipped)}"
        )
