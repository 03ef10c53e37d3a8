"""``manage.py conch_play SCENARIO.json [--json]``: play scripted chats together and print what happened.

The scenario format is in docs/scenarios.md; the player is together/play/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from together.play.player import play_inner, scenario_run_isolated
from together.play.render import report_json, report_text
from together.play.scenario import ScenarioError, scenario_load


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
        parser.add_argument(
            "--template",
            default="",
            metavar="FILE",
            help=(
                "Start the play's database as a copy of FILE, an SQLite database Conch has "
                "only migrated, instead of migrating a new one. If FILE doesn't exist, the "
                "play saves its newly migrated database there."
            ),
        )
        # The child process's side; it refuses anything but a brand-new SQLite database.
        parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
        parser.add_argument("--root", default="", help=argparse.SUPPRESS)

    def handle(
        self,
        *args,
        scenario: str,
        as_json: bool,
        keep: bool,
        template: str,
        inner: bool,
        root: str,
        **_,
    ):
        try:
            if inner:
                report = play_inner(raw=sys.stdin.read(), root=root, template=template)
                self.stdout.write(report_json(report))
                return
            loaded = scenario_load(scenario)
            report, logs = scenario_run_isolated(loaded, keep=keep, template=template or None)
        except ScenarioError as exc:
            raise CommandError(str(exc)) from None
        if logs.strip():
            self.stderr.write(logs.rstrip())
        report["scenario"] = Path(scenario).stem
        self.stdout.write(report_json(report) if as_json else report_text(report))
        if report.get("error"):
            raise CommandError(report["error"])
