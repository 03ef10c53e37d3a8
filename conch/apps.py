"""The project's own app configurations."""

from __future__ import annotations

from django.apps import AppConfig


class DaphneWhenServing(AppConfig):
    """Daphne's app, for its ASGI ``runserver``, without Twisted at every start-up.

    Daphne's own AppConfig imports ``daphne.server`` so that Twisted's asyncio reactor
    is installed before anything else imports Twisted. Only a command that serves uses
    Twisted at all, and each imports ``daphne.server`` first thing: ``conch serve``
    (chats/management/commands/serve.py) and Daphne's ``runserver``. Every other
    process (a worker, ``migrate``, ``shell``, a play, each test's child) paid about
    0.37 s of CPU at start-up for a reactor it never ran.

    Its label is ``daphne``, so ``runserver`` is still Daphne's, and Django finds it
    first because this app is listed before ``django.contrib.staticfiles``.
    """

    name = "daphne"
    label = "daphne"
    verbose_name = "Daphne"
