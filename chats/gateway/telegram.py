"""Telegram: the Bot API's webhook Update in, ``sendMessage`` out.

The webhook is ``POST /gateway/telegram/<account>``; Telegram sends the
secret given to ``setWebhook`` in ``X-Telegram-Bot-Api-Secret-Token``, which
is checked against its digest. ``CONCH_TELEGRAM_API_BASE`` (a setting,
from the environment) points the sender elsewhere, e.g. at a test's loopback server.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from django.conf import settings

from chats.gateway.inbound import Inbound, InboundError, inbound_parse, text_check
from chats.gateway.models import ChannelAccount, ChatType, OutboxMessage
from chats.gateway.outbox import DeliveryError, outbox_part_sent
from chats.limits import LIMITS
from chats.secretbox import SecretsKeyError, secret_readable

CHANNEL = "telegram"
TIMEOUT = 15.0
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


def api_base() -> str:
    return settings.CONCH_TELEGRAM_API_BASE.rstrip("/")


def _int_field(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InboundError(name, "must be a whole number.")
    return value


def telegram_inbound(update: Any, *, account_id: str) -> tuple[Inbound, dict[str, Any]] | None:
    """The inbound message and where to reply, or None for an update that isn't a message.

    Message ids are only unique within a chat, so the inbound's ``message_id``
    is ``<chat id>:<message id>`` (and an edit adds its edit date).
    """
    if not isinstance(update, dict):
        raise InboundError("body", "must be a Telegram Update object.")
    edited = "message" not in update and "edited_message" in update
    message = update.get("message") if not edited else update.get("edited_message")
    if message is None:
        return None  # callbacks, polls, member changes…: nothing to route
    where = "edited_message" if edited else "message"
    if not isinstance(message, dict):
        raise InboundError(where, "must be an object.")
    chat = message.get("chat")
    if not isinstance(chat, dict):
        raise InboundError(f"{where}.chat", "is required.")
    chat_id = _int_field(chat.get("id"), f"{where}.chat.id")
    kind = chat.get("type")
    if kind not in ("private", "group", "supergroup", "channel"):
        raise InboundError(f"{where}.chat.type", "must be private, group, supergroup or channel.")
    if kind == "channel":
        return None  # a broadcast channel's post has no sender to answer
    sender = message.get("from")
    if sender is None:
        return None  # posted as a chat (an anonymous admin): no person to route
    if not isinstance(sender, dict):
        raise InboundError(f"{where}.from", "must be an object.")
    sender_id = _int_field(sender.get("id"), f"{where}.from.id")
    message_id = _int_field(message.get("message_id"), f"{where}.message_id")
    words = "text" if message.get("text") is not None else "caption"
    text = message.get(words)
    if text is None or (isinstance(text, str) and not text.strip()):
        return None  # a sticker, a photo without a caption…
    if not isinstance(text, str):
        raise InboundError(f"{where}.{words}", "must be text.")
    text_check(text, f"{where}.{words}")

    thread_id = message.get("message_thread_id")
    is_topic = bool(message.get("is_topic_message")) and thread_id is not None
    if is_topic:
        thread_id = _int_field(thread_id, f"{where}.message_thread_id")
    reply_to: dict[str, Any] = {"chat_id": chat_id}
    payload: dict[str, Any] = {
        "channel": CHANNEL,
        "account_id": account_id,
        "peer": str(sender_id),
        "message_id": f"{chat_id}:{message_id}",
        "text": text,
    }
    if kind == "private":
        payload["chat_type"] = ChatType.DM
    elif is_topic:
        payload.update(chat_type=ChatType.THREAD, group_id=str(chat_id), thread_id=str(thread_id))
        reply_to["message_thread_id"] = thread_id
    else:
        payload.update(chat_type=ChatType.GROUP, group_id=str(chat_id))
    if edited:
        edit_date = message.get("edit_date")
        payload["message_id"] += f":edited:{edit_date if isinstance(edit_date, int) else 0}"
        payload["text"] = f"(edited) {text}"
    return inbound_parse(payload), reply_to


def split_message(text: str, limit: int = LIMITS.telegram_message_chars) -> list[str]:
    """Telegram takes so many characters a message (its own bound): cut at line ends where possible."""
    parts = []
    rest = text
    while len(rest) > limit:
        cut = rest.rfind("\n", 0, limit)
        if cut <= 0:
            cut = limit
        parts.append(rest[:cut])
        rest = rest[cut:].lstrip("\n")
    if rest:
        parts.append(rest)
    return parts or [""]


class TelegramSender:
    channel = CHANNEL

    def send(self, message: OutboxMessage, account: ChannelAccount | None) -> None:
        try:
            token = secret_readable(account.secret) if account is not None else ""
        except SecretsKeyError as exc:  # the key file was changed: retried once it is put back
            raise DeliveryError(str(exc)) from None
        if not token:
            raise DeliveryError(
                f"No bot token for the Telegram account {message.account_id!r}.", permanent=True
            )
        parts = split_message(message.text)
        for part in parts[message.parts_sent :]:
            body: dict[str, Any] = {"chat_id": message.target.get("chat_id"), "text": part}
            if message.target.get("message_thread_id") is not None:
                body["message_thread_id"] = message.target["message_thread_id"]
            self._call(token, "sendMessage", body)
            outbox_part_sent(message=message)

    def _call(self, token: str, method: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{api_base()}/bot{token}/{method}"
        request = urllib.request.Request(
            url,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )

        def scrub(text: str) -> str:  # the token is in the URL: never in an error
            return text.replace(token, "<token>")

        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                answer = json.loads(exc.read() or b"{}")
            except ValueError:
                answer = {}
            description = scrub(str(answer.get("description") or exc.reason))
            retry_after = (answer.get("parameters") or {}).get("retry_after")
            if exc.code == 429:
                raise DeliveryError(
                    f"Telegram says slow down: {description}",
                    retry_after=float(retry_after) if retry_after else None,
                ) from None
            raise DeliveryError(
                f"Telegram refused {method} ({exc.code}): {description}",
                permanent=400 <= exc.code < 500,
            ) from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise DeliveryError(f"Telegram could not be reached: {scrub(str(exc))}") from None
        except ValueError:
            raise DeliveryError("Telegram answered with something that isn't JSON.") from None
        if not answer.get("ok"):
            raise DeliveryError(
                f"Telegram refused {method}: {scrub(str(answer.get('description', '')))}",
                permanent=True,
            )
        return answer
