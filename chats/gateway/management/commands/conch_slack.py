"""``manage.py conch_slack ACCOUNT``: connect a Slack app, or change its secrets.

Reads two lines from stdin: the app's bot token (``xoxb-…``, from OAuth &
Permissions) and its signing secret (from Basic Information), so neither shows
in the shell's history or the process list. Both are sealed at rest. Slack is
then asked who the bot is (``auth.test``), so the bot's own messages are never
answered and a mention of it is known. Prints the Request URL's path for Event
Subscriptions.
"""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from chats.gateway.models import ChannelAccount, GroupActivation
from chats.gateway.outbox import DeliveryError
from chats.gateway.owners import OwnerError, owner_for_command
from chats.gateway.slack import CHANNEL, slack_bot_identify
from chats.gateway.webhooks import account_known_shape

ERR_NO_TOKEN = "stdin's first line must be the bot token (xoxb-…), from OAuth & Permissions."
ERR_NOT_A_BOT_TOKEN = (
    "That is not a bot token: it starts {prefix}…, and a bot token starts xoxb-. "
    "Copy the Bot User OAuth Token from OAuth & Permissions."
)
ERR_NO_SECRET = "stdin's second line must be the signing secret, from Basic Information."


class Command(BaseCommand):
    help = "Connect a Slack app: reads its bot token and signing secret from stdin, two lines."

    def add_arguments(self, parser) -> None:
        parser.add_argument("account", help="A name for this Slack app in Conch, e.g. work.")
        parser.add_argument("--owner", help="Whose chats its sessions are (a username).")
        parser.add_argument(
            "--answer",
            choices=GroupActivation.values,
            help="In channels: answer only when mentioned (mention, the default) or always.",
        )

    def handle(self, *args, **options) -> None:
        name = options["account"].strip()
        if not name or not account_known_shape(name) or "/" in name:
            raise CommandError("ACCOUNT must be a plain name, e.g. work.")
        token = sys.stdin.readline().strip()
        secret = sys.stdin.readline().strip()
        if not token:
            raise CommandError(ERR_NO_TOKEN)
        if not token.startswith("xoxb-"):
            raise CommandError(ERR_NOT_A_BOT_TOKEN.format(prefix=token[:5]))
        if not secret:
            raise CommandError(ERR_NO_SECRET)
        try:
            owner = owner_for_command(options.get("owner"))
        except OwnerError as exc:
            raise CommandError(str(exc)) from None
        account, made = ChannelAccount.objects.get_or_create(
            channel=CHANNEL, account_id=name, defaults={"owner": owner}
        )
        account.secret = token
        account.signing_secret = secret
        fields = ["secret", "signing_secret"]
        if options.get("answer"):
            account.group_activation = options["answer"]
            fields.append("group_activation")
        account.save(update_fields=fields)
        try:
            bot = slack_bot_identify(account)
        except DeliveryError as exc:
            self.stderr.write(
                f"Slack's auth.test didn't answer ({exc}): the bot's own user id is unknown, so "
                "mentions in channels aren't recognized yet; run this again."
            )
        else:
            self.stderr.write(f"The bot's user is {bot}.")
        self.stdout.write(
            f"{'Connected' if made else 'Updated'} slack:{name}. In Event Subscriptions, set "
            f"the Request URL to https://<your host>/gateway/slack/{name} and subscribe to "
            "message.im, message.channels, message.groups, message.mpim and app_mention."
        )
