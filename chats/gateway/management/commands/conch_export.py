"""``manage.py conch_export DIR``: write sessions in OpenClaw's layout.

``DIR/agents/<agentId>/sessions/sessions.json`` (the index) and one
``<sessionId>.jsonl`` transcript per session. The database stays the store.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from chats.gateway.interop import sessions_export
from chats.models import Agent


class Command(BaseCommand):
    help = (
        "Export sessions as agents/<agentId>/sessions/sessions.json plus <sessionId>.jsonl files."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("directory", help="Where to write agents/…")
        parser.add_argument("--agent", action="append", help="Only this agent (repeatable).")

    def handle(self, *args, **options) -> None:
        root = Path(options["directory"]).expanduser()
        agents = None
        if options.get("agent"):
            agents = list(Agent.objects.filter(slug__in=options["agent"]).order_by("slug"))
            missing = set(options["agent"]) - {a.slug for a in agents}
            if missing:
                raise CommandError(f"--agent: no agent called {', '.join(sorted(missing))}.")
        try:
            root.mkdir(parents=True, exist_ok=True)
            report = sessions_export(root=root, agents=agents)
        except OSError as exc:
            raise CommandError(f"{root}: {exc}") from None
        self.stdout.write(
            f"exported {report.sessions} sessions ({report.entries} entries) "
            f"of {report.agents} agents to {root}"
        )
