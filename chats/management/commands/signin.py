"""``conch signin``: a fresh one-time sign-in link for the owner, while ``conch serve`` runs.

It writes a new token to the server's database and prints the link at the
address the server noted (``CONCH_HOME/server-url``), so a lost or used link
needs no restart.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from chats.signin import TOKEN_LIFETIME, owner_ensure, server_url, signin_url


class Command(BaseCommand):
    help = "Print a fresh one-time sign-in link for the owner, for the running `conch serve`."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--url",
            default=None,
            help="The server's address (default: the one `conch serve` noted, else "
            "http://127.0.0.1:8000).",
        )

    def handle(self, *args, url: str | None, **options) -> None:
        link = signin_url(user=owner_ensure(), base=url or server_url())
        hours = int(TOKEN_LIFETIME.total_seconds() // 3600)
        self.stdout.write(f"Open this link to sign in (it works once, for {hours} hours):")
        self.stdout.write(f"    {link}")
