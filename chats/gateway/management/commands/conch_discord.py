"""``manage.py conch_discord ACCOUNT --public-key HEX --application-id ID``: connect a
Discord application's bot, or change its token or keys.

Reads the bot's token from stdin (one line), so it shows in neither the shell's
history nor the process list; it is sealed at rest. The public key (hex, from the
Developer Portal's General Information page) checks the signature on every
interaction; the application id is where slash commands' replies go. Discord is then
asked who the bot is (``GET /users/@me``), so its own messages are never answered and
a mention of it is known, and Conch's slash commands (/ask, /new, /reset) are
registered. Prints the Interactions Endpoint URL's path and how to start
``conch discord``.
"""

from __future__ import annotations

import re
import sys

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.core.management.base import BaseCommand, CommandError

from chats.gateway.discord import CHANNEL, discord_bot_identify, discord_commands_register
from chats.gateway.models import ChannelAccount, GroupActivation
from chats.gateway.outbox import DeliveryError
from chats.gateway.owners import OwnerError, owner_for_command
from chats.gateway.webhooks import account_known_shape

ERR_ACCOUNT = "ACCOUNT must be a plain name, e.g. work."
ERR_KEY = (
    "--public-key must be the application's public key: 64 hex digits (32 bytes), from the "
    "Developer Portal's General Information page."
)
ERR_APPLICATION = (
    "--application-id must be the application's id: digits, from the Developer Portal's "
    "General Information page."
)
ERR_NO_TOKEN = "stdin's first line must be the bot's token, from the Developer Portal's Bot page."
ERR_TOKEN_SHAPE = "That doesn't look like a bot token: it has spaces in it. Paste the token alone."

SNOWFLAKE = re.compile(r"^\d{15,20}$")


def public_key_checked(value: str) -> str:
    """The key, lower-case hex, if it is an Ed25519 public key; else :class:`CommandError`."""
    key = value.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", key):
        raise CommandError(ERR_KEY)
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(key))
    except ValueError:
        raise CommandError(ERR_KEY) from None
    return key


class Command(BaseCommand):
    help = "Connect a Discord bot: reads its token from stdin, one line."

    def add_arguments(self, parser) -> None:
        parser.add_argument("account", help="A name for this Discord bot in Conch, e.g. home.")
        parser.add_argument("--public-key", required=True, help="The application's public key.")
        parser.add_argument("--application-id", required=True, help="The application's id.")
        parser.add_argument("--owner", help="Whose chats its sessions are (a username).")
        parser.add_argument(
            "--answer",
            choices=GroupActivation.values,
            help="In servers: answer only when mentioned (mention, the default) or always.",
        )

    def handle(self, *args, **options) -> None:
        name = options["account"].strip()
        if not name or not account_known_shape(name) or "/" in name:
            raise CommandError(ERR_ACCOUNT)
        key = public_key_checked(options["public_key"])
        application = options["application_id"].strip()
        if not SNOWFLAKE.match(application):
            raise CommandError(ERR_APPLICATION)
        token = sys.stdin.readline().strip()
        if not token:
            raise CommandError(ERR_NO_TOKEN)
        if any(ch.isspace() for ch in token):
            raise CommandError(ERR_TOKEN_SHAPE)
        try:
            owner = owner_for_command(options.get("owner"))
        except OwnerError as exc:
            raise CommandError(str(exc)) from None
        account, made = ChannelAccount.objects.get_or_create(
            channel=CHANNEL, account_id=name, defaults={"owner": owner}
        )
        account.secret = token
        account.public_key = key
        account.platform_id = application
        fields = ["secret", "public_key", "platform_id"]
        if options.get("answer"):
            account.group_activation = options["answer"]
            fields.append("group_activation")
        account.save(update_fields=fields)
        try:
            bot = discord_bot_identify(account)
        except DeliveryError as exc:
            self.stderr.write(
                f"Discord's /users/@me didn't answer ({exc}): the bot's own user id is learnt "
                "when `conch discord` connects instead."
            )
        else:
            self.stderr.write(f"The bot is @{bot} (user {account.bot_user_id}).")
        try:
            commands = discord_commands_register(account)
        except DeliveryError as exc:
            self.stderr.write(
                f"The slash commands couldn't be registered ({exc}); run this again to retry. "
                "Messages work without them."
            )
        else:
            self.stderr.write(f"Slash commands registered: {', '.join(f'/{c}' for c in commands)}.")
        self.stdout.write(
            f"{'Connected' if made else 'Updated'} discord:{name}. In the Developer Portal "
            "(General Information), set the Interactions Endpoint URL to "
            f"https://<your host>/gateway/discord/{name}/interactions, then run "
            f"`conch discord {name}` beside `conch worker` (or `conch serve`)."
        )
