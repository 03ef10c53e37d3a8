"""``manage.py conch_import DIR``: read sessions in OpenClaw's layout into the database.

A session whose id is already here, or whose key already has a live session,
is skipped and named. A malformed file stops the import with its name and line.

The archive's word is not trusted: every imported chat starts in Ask mode,
marked as having read something from outside. Each chat's folder must exist,
and is shown for the person to confirm before anything is written; or one
folder for them all is given with ``--folder``. Without a terminal to ask on,
the command refuses unless ``--yes`` or ``--folder`` says what to do.
"""

from __future__ import annotations

import sys
import unicodedata
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from chats.gateway.interop import ImportPlan, InteropError, sessions_import, sessions_plan
from chats.gateway.owners import OwnerError, owner_for_command

ERR_CANNOT_ASK = (
    "conch_import asks you to confirm the folders the imported chats will work in, "
    "and there is no terminal to ask on. Look at the archive's folders and pass --yes, "
    "or give one folder for every chat with --folder PATH."
)
ERR_DECLINED = "Nothing was imported."
QUESTION = "Import {count} chat{s} into these folders, in Ask mode? [y/N] "


def shown(text: str) -> str:
    """Outside words made safe for a terminal: control, format and unpaired characters escaped."""
    return "".join(
        ch.encode("unicode_escape").decode("ascii") if unicodedata.category(ch)[0] == "C" else ch
        for ch in text
    )


class Command(BaseCommand):
    help = "Import agents/<agentId>/sessions/sessions.json and their .jsonl transcripts."
    stealth_options = ("stdin",)

    def add_arguments(self, parser) -> None:
        parser.add_argument("directory", help="The folder holding agents/…")
        parser.add_argument("--owner", help="Whose chats the imported sessions are (a username).")
        parser.add_argument(
            "--folder",
            help="The folder every imported chat works in, instead of the archive's (must exist).",
        )
        parser.add_argument(
            "--yes",
            action="store_true",
            help="Don't ask: take the archive's folders as shown (they must exist).",
        )

    def handle(self, *args, **options) -> None:
        root = Path(options["directory"]).expanduser()
        folder = Path(options["folder"]).expanduser() if options.get("folder") else None
        try:
            owner = owner_for_command(options.get("owner"))
            plan = sessions_plan(root=root, folder=folder)
            self._show(plan)
            if plan.sessions and folder is None and not options["yes"]:
                self._confirm(plan, options.get("stdin") or sys.stdin)
            report = sessions_import(plan=plan, owner=owner)
        except (InteropError, OwnerError) as exc:
            raise CommandError(shown(str(exc))) from None  # it may quote the archive
        for skipped in report.skipped:
            self.stderr.write(f"skipped {shown(skipped)}")
        self.stdout.write(
            f"imported {report.sessions} sessions ({report.entries} entries) "
            f"for {report.agents} agents; skipped {len(report.skipped)}"
        )

    def _show(self, plan: ImportPlan) -> None:
        if not plan.sessions:
            return
        self.stdout.write("The imported chats will work in these folders:")
        for where, sessions in plan.by_folder().items():
            count = len(sessions)
            self.stdout.write(f"  {shown(str(where))}  ({count} chat{'s' if count != 1 else ''})")
            for planned in sessions:
                self.stdout.write(f"      {shown(planned.title)}  [{shown(planned.session_id)}]")
        self.stdout.write(
            "They start in Ask mode, marked as having read something from outside "
            "(an archive can say anything)."
        )

    def _confirm(self, plan: ImportPlan, stdin) -> None:
        if not stdin.isatty():
            raise CommandError(ERR_CANNOT_ASK)
        count = len(plan.sessions)
        self.stdout.write(QUESTION.format(count=count, s="s" if count != 1 else ""), ending="")
        self.stdout.flush()
        answer = stdin.readline()
        if answer.strip().lower() not in ("y", "yes"):
            raise CommandError(ERR_DECLINED)
