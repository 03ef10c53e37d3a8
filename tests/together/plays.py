"""Committed scenarios played for the tests that read their reports.

Each play runs as ``conch_play`` runs it, in a child process of its own with its own home
and a copy of the migrated template (``scenario_run_isolated``), all of a module's at once;
only the parent is the test's own process instead of a second ``manage.py``, which would
start Django once more for each play. What the command itself prints, and refuses, is
tested through ``manage.py conch_play`` in test_play.py.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from together.play.player import scenario_run_isolated
from together.play.render import report_json
from together.play.scenario import scenario_load

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def report_printed(name: str, template: Path) -> str:
    """``conch_play scenarios/NAME.json --json --template TEMPLATE``'s output."""
    report, _logs = scenario_run_isolated(
        scenario_load(str(SCENARIOS / f"{name}.json")), template=template
    )
    assert not report.get("error"), f"{name}: {report['error']}"
    report["scenario"] = name
    return report_json(report)


def reports_played(names: tuple[str, ...], template: Path) -> dict[str, dict]:
    """Each scenario's report, the plays all at once."""
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        printed = {name: pool.submit(report_printed, name, template) for name in names}
    return {name: json.loads(future.result()) for name, future in printed.items()}


def chats_of(report: dict) -> dict[str, dict]:
    """A report's chats, by the names the scenario gave them."""
    return {chat["name"]: chat for chat in report["chats"]}


def steps(chat: dict) -> list[dict]:
    """Every step of a reported chat's replies, in order."""
    return [step for reply in chat["replies"] for step in reply["steps"]]
