"""``manage.py conch_gateway_token``: make the install's gateway token, retiring the old one.

The token is printed once and only its digest is kept. With ``--telegram
ACCOUNT`` it makes that Telegram account's webhook secret instead (the
``secret_token`` to give ``setWebhook``), creating the account if needed;
``--bot-token-stdin`` reads the bot's token from stdin for sending replies, and
asks Telegram (``getMe``) for the bot's @name, kept so that commands naming
another bot are not taken as ours.
"""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from chats.gateway.models import ChannelAccount
from chats.gateway.outbox import DeliveryError
from chats.gateway.owners import OwnerError, owner_for_command
from chats.gateway.services import channel_account_secret_rotate, gateway_token_rotate
from chats.gateway.telegram import CHANNEL as TELEGRAM
from chats.gateway.telegram import telegram_bot_identify


class Command(BaseCommand):
    help = "Make (rotate) the gateway token, or a Telegram account's webhook secret. Shown once."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--owner", help="Whose chats the gateway's sessions are (a username).")
        parser.add_argument("--telegram", metavar="ACCOUNT", help="A Telegram account's name.")
        parser.add_argument(
            "--bot-token-stdin", action="store_true", help="Read the bot's token from stdin."
        )

    def handle(self, *args, **options) -> None:
        try:
            owner = owner_for_command(options.get("owner"))
        except OwnerError as exc:
            raise CommandError(str(exc)) from None
        account_name = options.get("telegram")
        if not account_name:
            if options["bot_token_stdin"]:
                raise CommandError("--bot-token-stdin goes with --telegram ACCOUNT.")
            token = gateway_token_rotate(owner=owner)
            self.stdout.write(token)
            self.stderr.write(
                "The gateway token above is shown once. Send it as 'Authorization: Bearer <token>'."
            )
            return
        account, _ = ChannelAccount.objects.get_or_create(
            channel=TELEGRAM, account_id=account_name, defaults={"owner": owner}
        )
        if options["bot_token_stdin"]:
            bot_token = sys.stdin.readline().strip()
            if not bot_token:
                raise CommandError("--bot-token-stdin: stdin gave no token.")
            account.secret = bot_token
            account.save(update_fields=["secret"])
            try:
                name = telegram_bot_identify(account)
            except DeliveryError as exc:
                self.stderr.write(
                    f"Telegram's getMe didn't answer ({exc}): commands naming a bot "
                    "(/new@bot) are not taken until the bot's name is known; run this again."
                )
            else:
                self.stderr.write(f"The bot is @{name}.")
        secret = channel_account_secret_rotate(account=account)
        self.stdout.write(secret)
        self.stderr.write(
            f"The webhook secret for telegram:{account_name} above is shown once. Give it to "
            f"setWebhook as secret_token, with the URL …/gateway/telegram/{account_name}."
        )
