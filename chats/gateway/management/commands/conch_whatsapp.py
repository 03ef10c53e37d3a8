"""``manage.py conch_whatsapp ACCOUNT --phone-number-id ID [--owner USER]``: connect a
WhatsApp Business number (the Cloud API) to Conch, or update one already connected.

Two lines are read from stdin, never from the command line (where ``ps`` and the
shell's history would keep them): the access token replies are sent with, then the
app's secret, which signs every notification WhatsApp sends. Both are kept sealed.
WhatsApp is asked which number the id is, with the token, so a wrong token or id
shows now rather than at the first reply.

A new verify token is made and printed once: give it to Meta's App Dashboard
(WhatsApp › Configuration › Webhook) with the callback URL
``https://<your host>/gateway/whatsapp/ACCOUNT``, and subscribe to ``messages``.
"""

from __future__ import annotations

import re
import sys

from django.core.management.base import BaseCommand, CommandError

from chats.gateway.models import ChannelAccount
from chats.gateway.outbox import DeliveryError
from chats.gateway.owners import OwnerError, owner_for_command
from chats.gateway.services import channel_account_secret_rotate
from chats.gateway.whatsapp import CHANNEL, whatsapp_number_describe

ACCOUNT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")  # as routing writes an account id
PHONE_NUMBER_ID = re.compile(r"[0-9]{1,64}")

ERR_ACCOUNT = (
    "ACCOUNT: a name of lowercase letters, digits, - or _ (at most 64, starting with a "
    "letter or digit), e.g. 'shop'."
)
ERR_PHONE_NUMBER_ID = (
    "--phone-number-id: WhatsApp's phone number id is all digits: find it in the App "
    "Dashboard under WhatsApp › API Setup (it is not the phone number itself)."
)
ERR_STDIN = (
    "stdin: give the access token on the first line and the app secret on the second "
    "(App Dashboard › App settings › Basic › App secret)."
)
ERR_NUMBER_TAKEN = "--phone-number-id: {id} is already the WhatsApp account {other!r}'s."


class Command(BaseCommand):
    help = (
        "Connect a WhatsApp Business number: reads the access token and the app secret "
        "from stdin (one a line), prints the webhook's verify token once."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("account", help="A name for the account, used in the callback URL.")
        parser.add_argument(
            "--phone-number-id", required=True, help="The number's id (WhatsApp › API Setup)."
        )
        parser.add_argument("--owner", help="Whose chats its sessions are (a username).")

    def handle(self, *args, **options) -> None:
        name = options["account"]
        phone_number_id = (options["phone_number_id"] or "").strip()
        if not ACCOUNT_NAME.fullmatch(name):
            raise CommandError(ERR_ACCOUNT)
        if not PHONE_NUMBER_ID.fullmatch(phone_number_id):
            raise CommandError(ERR_PHONE_NUMBER_ID)
        token = sys.stdin.readline().strip()
        app_secret = sys.stdin.readline().strip()
        if not token or not app_secret:
            raise CommandError(ERR_STDIN)
        other = (
            ChannelAccount.objects.filter(channel=CHANNEL, platform_id=phone_number_id)
            .exclude(account_id=name)
            .values_list("account_id", flat=True)
            .first()
        )
        if other is not None:
            raise CommandError(ERR_NUMBER_TAKEN.format(id=phone_number_id, other=other))
        account = ChannelAccount.objects.filter(channel=CHANNEL, account_id=name).first()
        owner = None
        if account is None or options.get("owner"):
            try:
                owner = owner_for_command(options.get("owner"))
            except OwnerError as exc:
                raise CommandError(str(exc)) from None
        if account is None:
            account = ChannelAccount(channel=CHANNEL, account_id=name)
        if owner is not None:
            account.owner = owner
        account.secret = token
        account.signing_secret = app_secret
        account.platform_id = phone_number_id
        account.save()
        try:
            number = whatsapp_number_describe(account)
        except DeliveryError as exc:
            self.stderr.write(
                f"WhatsApp didn't say which number {phone_number_id} is ({exc}). Replies "
                "won't go out until the token and the id are right: run this again to fix them."
            )
        else:
            self.stderr.write(f"The number is {number}.")
        verify_token = channel_account_secret_rotate(account=account)
        self.stdout.write(verify_token)
        self.stderr.write(
            f"The verify token for whatsapp:{name} above is shown once. In the App Dashboard "
            "(WhatsApp › Configuration › Webhook) give it as the Verify token, with the "
            f"Callback URL https://<your host>/gateway/whatsapp/{name}, then subscribe to "
            "the 'messages' field."
        )
