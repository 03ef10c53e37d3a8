"""The owner account and the one-time sign-in link `conch serve` prints."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from chats.models import SignInToken

OWNER_USERNAME = "owner"
TOKEN_LIFETIME = timedelta(hours=12)


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
