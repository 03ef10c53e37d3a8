"""The gateway's doors: ``POST /gateway/inbound`` and Telegram's webhook.

Neither uses the browser's session: the inbound door takes the install's
gateway token (``Authorization: Bearer …``), Telegram's takes the webhook
secret. They are CSRF-exempt because of that, and only because of that.
"""

from __future__ import annotations

import json

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from chats.gateway.inbound import InboundError, inbound_parse
from chats.gateway.models import ChannelAccount
from chats.gateway.services import (
    SessionTaken,
    channel_account_check,
    gateway_token_owner,
    inbound_receive,
)
from chats.gateway.telegram import CHANNEL as TELEGRAM
from chats.gateway.telegram import SECRET_HEADER, telegram_inbound
from chats.runtime.services import ConchError

ERR_NO_TOKEN = "A gateway token is required: Authorization: Bearer <token>."
ERR_BAD_TOKEN = "That gateway token is not valid."
ERR_BAD_SECRET = "The webhook's secret token is missing or wrong."
ERR_NOT_JSON = "The body must be JSON."


def _refused(message: str, status: int, **extra) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)


def _json_body(request: HttpRequest):
    try:
        return json.loads(request.body or b"")
    except (ValueError, UnicodeDecodeError):
        raise InboundError("body", ERR_NOT_JSON) from None


def _bearer(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _result(result) -> JsonResponse:
    return JsonResponse(result.as_dict(), status=200 if result.outcome == "duplicate" else 202)


@csrf_exempt
@require_POST
def inbound(request: HttpRequest) -> JsonResponse:
    token = _bearer(request)
    if token is None:
        response = _refused(ERR_NO_TOKEN, 401)
        response["WWW-Authenticate"] = 'Bearer realm="conch-gateway"'
        return response
    owner = gateway_token_owner(token)
    if owner is None:
        response = _refused(ERR_BAD_TOKEN, 401)
        response["WWW-Authenticate"] = 'Bearer realm="conch-gateway", error="invalid_token"'
        return response
    try:
        message = inbound_parse(_json_body(request))
        return _result(inbound_receive(owner=owner, inbound=message))
    except InboundError as exc:
        return _refused(exc.message, 400, field=exc.field)
    except SessionTaken as exc:
        return _refused(str(exc), 409, field="account_id")
    except ConchError as exc:
        return _refused(str(exc), 400, field="text")


@csrf_exempt
@require_POST
def telegram_webhook(request: HttpRequest, account: str) -> JsonResponse:
    found = (
        ChannelAccount.objects.filter(channel=TELEGRAM, account_id=account)
        .select_related("owner")
        .first()
    )
    secret = request.headers.get(SECRET_HEADER, "")
    # An unknown account reads the same as a wrong secret: nothing to learn by probing.
    if found is None or not channel_account_check(account=found, secret=secret):
        return _refused(ERR_BAD_SECRET, 401)
    try:
        mapped = telegram_inbound(_json_body(request), account_id=account)
        if mapped is None:
            return JsonResponse({"outcome": "ignored"}, status=200)
        message, reply_to = mapped
        return _result(inbound_receive(owner=found.owner, inbound=message, reply_to=reply_to))
    except InboundError as exc:
        return _refused(exc.message, 400, field=exc.field)
    except SessionTaken as exc:
        return _refused(str(exc), 409, field="account_id")
    except ConchError as exc:
        return _refused(str(exc), 400, field="text")
