"""``conch conch_rotate_secrets_key``: seal every stored secret with a new key.

With the key file (``CONCH_HOME/secrets.key``) it makes a new key, seals every
auth-profile key and bot token with it, and then forgets the old key. With
``CONCH_SECRETS_KEY`` set it seals them all with that variable's first key.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from chats.secretbox import ENV_KEY, SecretsKeyError, key_source, secrets_key_rotate

DONE_FILE = "Sealed {count} secret(s) with a new key in {path}; the old key is gone."
DONE_ENV = (
    "Sealed {count} secret(s) with the first key in {env}; "
    "the other keys in it can now be dropped from every process."
)


class Command(BaseCommand):
    help = "Seal every stored secret with a new key (or with CONCH_SECRETS_KEY's first key)."

    def handle(self, *args, **options) -> None:
        try:
            count = secrets_key_rotate()
        except SecretsKeyError as exc:
            raise CommandError(f"No secret was sealed again: {exc}") from None
        source = key_source()
        if source == ENV_KEY:
            self.stdout.write(DONE_ENV.format(count=count, env=ENV_KEY))
        else:
            self.stdout.write(DONE_FILE.format(count=count, path=source))
