"""``conch discord ACCOUNT``: keep a Discord bot's Gateway connection, beside ``conch worker``.

Messages in servers and DMs reach a bot only over Discord's Gateway, a WebSocket
this process keeps open (:mod:`chats.gateway.discord_gateway`); each one is handed
to the same inbound path as every door's, and its reply is sent by the outbox of
whichever runner (``conch serve`` or ``conch worker``) ends its turn. Run one per
Discord account; the account is set up first with ``conch conch_discord``.

It runs until SIGTERM or SIGINT, then finishes taking what it had read and ends
with status 0. It says when it connects and when it resumes a dropped connection.
"""

from __future__ import annotations

import logging
import signal

from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from chats.gateway.discord import CHANNEL
from chats.gateway.discord_gateway import GatewayError, GatewayRun
from chats.gateway.models import ChannelAccount
from chats.management.commands.worker import unapplied_migrations
from chats.secretbox import SecretsKeyError, secret_readable

log = logging.getLogger(__name__)

ERR_UNMIGRATED = (
    "The database has {count} unapplied migration(s): run `conch migrate` (or start "
    "`conch serve`) first."
)
ERR_UNKNOWN = "There is no Discord account called {account!r}{known}."
ERR_NO_TOKEN = (
    "The Discord account {account!r} has no bot token: run "
    "`conch conch_discord {account} --public-key … --application-id …` with the token on stdin."
)


class Command(BaseCommand):
    help = "Connect a Discord bot to Discord's Gateway and take its messages, until stopped."

    def add_arguments(self, parser) -> None:
        parser.add_argument("account", help="The Discord account's name (set up by conch_discord).")

    requires_migrations_checks = False  # checked below, as an error rather than a warning

    def handle(self, *args, account: str, **options) -> None:
        pending = unapplied_migrations()
        if pending:
            raise CommandError(ERR_UNMIGRATED.format(count=pending))
        found = (
            ChannelAccount.objects.select_related("owner")
            .filter(channel=CHANNEL, account_id=account)
            .first()
        )
        if found is None:
            names = sorted(
                ChannelAccount.objects.filter(channel=CHANNEL).values_list("account_id", flat=True)
            )
            known = (
                f" (there is {', '.join(repr(n) for n in names)})"
                if names
                else "; set one up with conch_discord"
            )
            raise CommandError(ERR_UNKNOWN.format(account=account, known=known))
        try:
            token = secret_readable(found.secret)
        except SecretsKeyError as exc:
            raise CommandError(str(exc)) from None
        if not token:
            raise CommandError(ERR_NO_TOKEN.format(account=account))
        connections.close_all()  # the Gateway's own thread keeps the one it uses

        run = GatewayRun(found, token)

        def on_signal(signum, frame) -> None:
            log.info("discord %s got %s; stopping", account, signal.Signals(signum).name)
            run.stop()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            run.run()
        except GatewayError as exc:
            raise CommandError(str(exc)) from None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        log.info("discord %s stopped after %s messages", account, run.taken)
