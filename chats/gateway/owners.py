"""Whose chats a command's sessions are: ``--owner``, else the gateway token's owner,
else the only superuser."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from chats.gateway.models import GatewayToken

ERR_NO_OWNER = "Whose chats should these be? Pass --owner USERNAME (or make a gateway token first)."


class OwnerError(LookupError):
    pass


def owner_for_command(username: str | None):
    User = get_user_model()
    if username:
        try:
            return User.objects.get(username=username)
        except User.DoesNotExist:
            raise OwnerError(f"--owner: there is no user called {username!r}.") from None
    live = GatewayToken.objects.filter(revoked_at__isnull=True).select_related("owner").first()
    if live is not None:
        return live.owner
    supers = list(User.objects.filter(is_superuser=True)[:2])
    if len(supers) == 1:
        return supers[0]
    raise OwnerError(ERR_NO_OWNER)
