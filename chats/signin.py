"""The owner account and the one-time sign-in link `conch serve` (and `conch signin`) prints.

``conch serve`` notes the address it listens on in ``CONCH_HOME/server-url``,
so ``conch signin`` can print a fresh link for the running server: it writes
a new token to the same database, and the server needs no restart.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from chats.models import SignInToken

OWNER_USERNAME = "owner"
TOKEN_LIFETIME = timedelta(hours=12)
SERVER_URL_FILE = "server-url"
DEFAULT_URL = "http://127.0.0.1:8000"


def server_url_note(base: str) -> None:
    """Where the running server listens, for ``conch signin`` (``conch serve`` calls this)."""
    (settings.CONCH_HOME / SERVER_URL_FILE).write_text(base + "\n", encoding="utf-8")


def server_url() -> str:
    """The address ``conch serve`` last noted, or Conch's default one."""
    try:
        noted = (settings.CONCH_HOME / SERVER_URL_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return DEFAULT_URL
    return noted if noted.startswith("http://") else DEFAULT_URL


def signin_url(*, user, base: str | None = None) -> str:
    """A fresh one-time sign-in link for ``user``, at ``base`` (the running server's address)."""
    return f"{(base or server_url()).rstrip('/')}/signin/{signin_link_create(user=user)}/"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def owner_ensure():
    """The install's owner: the first superuser, made (with no usable password) if there is none."""
    User = get_user_model()
    owner = User.objects.filter(is_superuser=True).order_by("pk").first()
    if owner is None:
        owner = User(username=OWNER_USERNAME, is_staff=True, is_superuser=True)
        owner.set_unusable_password()
        owner.save()
    return owner


def signin_link_create(*, user) -> str:
    """A fresh one-time token for ``user``. Only its digest is stored."""
    token = secrets.token_urlsafe(32)
    SignInToken.objects.create(user=user, digest=_digest(token))
    return token


def signin_token_redeem(*, token: str):
    """The user the token signs in, once; None if it's unknown, used or too old."""
    with transaction.atomic():
        record = (
            SignInToken.objects.select_for_update()
            .select_related("user")
            .filter(
                digest=_digest(token),
                used_at__isnull=True,
                created_at__gte=timezone.now() - TOKEN_LIFETIME,
            )
            .first()
        )
        if record is None:
            return None
        record.used_at = timezone.now()
        record.save(update_fields=["used_at"])
        return record.user
