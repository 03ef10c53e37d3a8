"""``conch conch_demo``: a few live demo chats, so a new user sees the workspace moving.

The chats and their scripts are in :mod:`chats.demo`; their replies start on
the owner's first visit to the workspace.
"""

from __future__ import annotations

import argparse

from django.core.management.base import BaseCommand

from chats.demo import DEMO_FILES as DEMO_FILES
from chats.demo import demo_chats as demo_chats
from chats.demo import demo_seed
from chats.signin import owner_ensure


class Command(BaseCommand):
    help = (
        "Seed a few live demo chats for the owner in the default workspace's demo folder. "
        "They start working when you first open Conch. Running it again adds nothing already there."
    )

    def add_arguments(self, parser) -> None:
        # `conch serve --demo` seeds while it starts: don't tell the person to run it.
        parser.add_argument("--serving", action="store_true", help=argparse.SUPPRESS)

    def handle(self, *args, serving: bool = False, **options) -> None:
        folder, created, existing = demo_seed(owner=owner_ensure())
        for chat in created:
            self.stdout.write(f"Made the demo chat “{chat.title}” ({chat.public_id}).")
        if existing:
            self.stdout.write(
                f"Already there, left alone: {', '.join(existing)}. "
                "Delete a demo chat to have it seeded again."
            )
        if created:
            self.stdout.write(
                f"The demo chats work in {folder}; their replies start when you first open Conch."
            )
            if not serving:
                self.stdout.write("Run `conch serve` and open the link it prints to watch them.")
