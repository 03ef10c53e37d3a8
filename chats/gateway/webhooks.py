"""What every chat app's webhook does before it reads a payload: find the account the URL
names, and read the body, bounded, as the bytes the app signed.

The doors themselves live beside their apps (``views.telegram_webhook``,
:mod:`chats.gateway.slack`, …); these are the parts they share, so each refuses
the same things the same way:

- an account name that couldn't be stored (NUL, a lone surrogate) finds nothing, and
  an unknown account reads the same as a wrong signature: nothing to learn by probing;
- a body over :data:`LIMITS.inbound_body_bytes` is refused before it is read whole.
"""

from __future__ import annotations

from typing import Any

from chats.gateway.inbound import BodyTooLarge, InboundError, inbound_json, text_check
from chats.gateway.models import ChannelAccount
from chats.limits import LIMITS
from conch.http import HtmxHttpRequest

ERR_BAD_LENGTH = "Content-Length must be a whole number of bytes."


def body_read(request: HtmxHttpRequest) -> bytes:
    """The body's bytes, read at most LIMITS.inbound_body_bytes bytes far.

    ``request.body`` would raise Django's RequestDataTooBig (an HTML 400) past
    DATA_UPLOAD_MAX_MEMORY_SIZE. The declared length is judged before reading;
    a chunked body has none, so the read itself stops one byte past the limit.
    Raises :class:`BodyTooLarge`, or :class:`InboundError` for a bad length.
    """
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared:
        try:
            length = int(declared)
        except ValueError:
            raise InboundError("body", ERR_BAD_LENGTH) from None
        if length > LIMITS.inbound_body_bytes:
            raise BodyTooLarge()
    raw = request.read(LIMITS.inbound_body_bytes + 1)
    if len(raw) > LIMITS.inbound_body_bytes:
        raise BodyTooLarge()
    return raw


def json_body(request: HtmxHttpRequest) -> Any:
    """The body as JSON (:func:`body_read`, then :func:`inbound_json`)."""
    return inbound_json(body_read(request))


def account_known_shape(account: str) -> bool:
    """Whether the URL's account could name a stored one (PostgreSQL can't even look up NUL)."""
    try:
        text_check(account, "account")
    except InboundError:
        return False
    return True


def account_for(channel: str, account: str) -> ChannelAccount | None:
    """The channel's account the URL names, with its owner; None if there is none."""
    if not account_known_shape(account):
        return None
    return (
        ChannelAccount.objects.filter(channel=channel, account_id=account)
        .select_related("owner")
        .first()
    )
