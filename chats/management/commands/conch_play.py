"""``manage.py conch_play SCENARIO.json [--json]``: play scripted chats together and print what happened.

The scenario format is in docs/scenarios.md; the logic is in chats/play.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from chats import play


class Command(BaseCommand):
    help = (
        "Play a scenario of scripted chats in a fresh database and temporary folders, "
        "and print each chat's transcript, replies, steps, files changed, notes, cards "
        "and events. The output is the same on every run."
    )
    # Twice per play (parent and child) the checks would cost more than the play itself;
    # the scenario gets its own, stricter checks.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser) -> None:
        parser.add_argument("scenario", help="The scenario file (JSON; see docs/scenarios.md).")
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="Print the report as JSON."
        )
        parser.add_argument(
            "--keep",
            action="store_true",
            help="Keep the run's temporary folder and say where it is.",
        )
        # The child process's side; it refuses anything but a brand-new SQLite database.
        parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
        parser.add_argument("--root", default="", help=argparse.SUPPRESS)

    def handle(self, *args, scenario: str, as_json: bool, keep: bool, inner: bool, root: str, **_):
        try:
            if inner:
                report = play.play_inner(raw=sys.stdin.read(), root=root)
                self.stdout.write(play.report_json(report))
                return
            loaded = play.scenario_load(scenario)
            report, logs = play.scenario_run_isolated(loaded, keep=keep)
        except play.ScenarioError as exc:
            raise CommandError(str(exc)) from None
        if logs.strip():
            self.stderr.write(logs.rstrip())
        report["scenario"] = Path(scenario).stem
        self.stdout.write(play.report_json(report) if as_json else play.report_text(report))
        if report.get("error"):
            raise CommandError(report["error"])
