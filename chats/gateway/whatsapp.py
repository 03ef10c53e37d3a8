"""WhatsApp: the Cloud API's ``messages`` webhook in, ``POST /{phone-number-id}/messages`` out.

Plain HTTP (``urllib``), as the Telegram sender: no WhatsApp library. The callback
URL is ``/gateway/whatsapp/<account>``:

- ``GET`` is Meta's verify handshake: ``hub.mode=subscribe`` and ``hub.verify_token``,
  checked against the digest of the token ``conch_whatsapp`` showed once, and the
  answer is ``hub.challenge`` as plain text; anything else is a 403.
- ``POST`` is checked before anything in it is read: ``X-Hub-Signature-256`` must be
  ``sha256=`` and the HMAC-SHA256 of the raw body with the app's secret. A bad or
  missing signature is a 401, and an unknown account reads the same. Past it, every
  notification is answered 200, whatever it holds: WhatsApp resends anything else
  for days. What we don't take is kept in the admin as refused or ignored.

How WhatsApp's users are met:

- One notification can carry several messages and statuses, under several entries:
  each is read on its own, so one malformed message is refused (naming its field)
  and the rest are still taken. A change for a phone number other than the
  account's (``metadata.phone_number_id``) is ignored.
- A message is a DM, keyed by the install's dmScope (``dm:whatsapp:<wa_id>`` under
  the default per-channel-peer); its sender's name is their profile name. The
  Cloud API has no groups a bot is added to: a message carrying a ``group_id``
  (Meta's Groups API, for groups a business made itself) is ignored, saying so.
- A reply (``context.id``) to one of our own replies is shown with the words it
  answers; to any other message, the words only say that they reply to an earlier one.
- A photo, video or document with a caption is taken as its caption with a note
  ("(sent a photo)"); a location as its place in words. Anything without words (a
  photo without a caption, a voice message, a sticker, a kind WhatsApp calls
  unsupported) is answered at once, through the outbox, in plain words: Conch
  can't read that kind of message yet. The file itself is not fetched. Reactions,
  deletions and WhatsApp's own notices are ignored; an edit is ignored unless the
  account takes edits as new messages.
- Statuses (sent, delivered, read, failed) are kept on the reply they are about
  (:func:`outbox_delivery_report`): they come out of order and never move back, and
  a failure keeps WhatsApp's words for why.
- Replies are plain text, cut to 4,096 characters (counted in UTF-16 units: never
  more than WhatsApp's count). WhatsApp takes free-form words only within 24 hours
  of the person's last message; a reply it refuses for that (131047, at once or
  later as a failed status) is kept as failed, saying the person must write first.
  "Slow down" (130429, 131056, a 429) is retried after a backoff; a refused access
  token fails at once. The token is never in an error.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Annotated, Any

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from chats.gateway.floods import InboundLimited
from chats.gateway.inbound import (
    BodyTooLarge,
    Ignore,
    InboundError,
    Take,
    inbound_json,
    inbound_parse,
    text_check,
)
from chats.gateway.models import (
    ChannelAccount,
    ChatType,
    Delivery,
    EditedMessages,
    InboundRecord,
    OutboxMessage,
    SentPart,
)
from chats.gateway.outbox import (
    DeliveryError,
    outbox_delivery_report,
    outbox_enqueue,
    outbox_part_sent,
    reply_target,
)
from chats.gateway.services import (
    SessionTaken,
    channel_account_check,
    ignored_keep,
    inbound_not_taken,
    inbound_receive,
)
from chats.gateway.telegram import split_message, utf16_units
from chats.gateway.webhooks import account_for, body_read
from chats.limits import LIMITS
from chats.runtime.chats import ConchError
from chats.secretbox import SecretsKeyError, secret_readable
from conch.http import HtmxHttpRequest

log = logging.getLogger(__name__)

CHANNEL = "whatsapp"
TIMEOUT = 15.0
SIGNATURE_HEADER = "X-Hub-Signature-256"
OBJECT = "whatsapp_business_account"
TEXT_LIMIT = 4_096  # a text message's body, at most (the Cloud API's "text.body")

ERR_BAD_SIGNATURE = "The request's X-Hub-Signature-256 is missing or wrong."
ERR_BAD_VERIFY_TOKEN = "The verify token is missing or wrong."
ERR_KEY = "Conch's secrets key can't open this account's app secret; try again once it is back."
ERR_NOT_NOTIFICATION = "must be a WhatsApp webhook notification (a JSON object)."
ERR_OBJECT = f"must be {OBJECT!r}: this door takes the WhatsApp Business Account webhook."

GROUPS_NOT_TAKEN = (
    "a WhatsApp group message: the Cloud API has no groups a bot is added to, and Conch "
    "takes WhatsApp DMs only"
)
CANT_READ = (
    "Sorry, I can't read {kind} yet, only words. Please write it out in a message "
    "(a caption on a photo, video or document reaches me too)."
)
CANT_READ_AGAIN_MINUTES = 10  # a person sending many such messages is told once in this time
WINDOW_CLOSED = (
    "WhatsApp's 24-hour window closed: a reply can only go out within 24 hours of the "
    "person's last message, so {peer} must message first."
)
TOKEN_REFUSED = (
    "WhatsApp refused the access token (expired or revoked?): give the account a new one "
    "with manage.py conch_whatsapp."
)

# The Cloud API's error codes we act on (developers.facebook.com, WhatsApp error codes).
WINDOW_CODE = 131047  # Re-engagement message: more than 24 hours since they last wrote
TOKEN_CODES = {0, 190}  # AuthException; access token invalid or expired
SLOW_DOWN_CODES = {4, 80007, 130429, 131056}  # too many calls / messages; the pair's limit
TRANSIENT_CODES = {1, 2, 131000, 131016}  # unknown, service, something went wrong, overloaded
TOO_LONG_CODE = 100  # Invalid parameter, "Param text['body'] must be at most 4096 characters"


def api_base() -> str:
    return settings.CONCH_WHATSAPP_API_BASE.rstrip("/")


# ---------------------------------------------------------------------------
# The notification, the parts we read

WaStr = Annotated[str, StringConstraints(strict=True, strip_whitespace=True, min_length=1)]


class _Wa(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class ErrorData(_Wa):
    details: str = ""


class WaError(_Wa):
    """An error as WhatsApp writes it in a webhook (a status's, a message's)."""

    code: int | None = None
    title: str = ""
    message: str = ""
    error_data: ErrorData | None = None


class Profile(_Wa):
    name: str = ""


class Contact(_Wa):
    wa_id: str = ""
    profile: Profile | None = None


class Context(_Wa):
    """What a message answers (``id``, ``from``), or that it was forwarded."""

    id: str | None = None
    sender: str | None = Field(default=None, alias="from")
    forwarded: bool = False
    frequently_forwarded: bool = False


class Text(_Wa):
    body: str


class Media(_Wa):
    id: str = ""
    mime_type: str = ""
    caption: str | None = None
    filename: str | None = None
    voice: bool = False


class Location(_Wa):
    latitude: float | None = None
    longitude: float | None = None
    name: str | None = None
    address: str | None = None


class Reaction(_Wa):
    message_id: str = ""
    emoji: str | None = None


class System(_Wa):
    body: str = ""
    type: str = ""


class EditedContent(_Wa):
    """An edited message's new content (``edit.message``)."""

    type: str = ""
    text: Text | None = None
    image: Media | None = None
    video: Media | None = None
    document: Media | None = None


class Edit(_Wa):
    original_message_id: str = ""
    message: EditedContent | None = None


class Message(_Wa):
    # Fields are checked in this order, and the first at fault is named: the id first.
    id: WaStr
    sender: WaStr = Field(alias="from")
    type: Annotated[str, StringConstraints(strict=True)]
    timestamp: str | int = ""
    group_id: str | None = None
    context: Context | None = None
    text: Text | None = None
    image: Media | None = None
    video: Media | None = None
    document: Media | None = None
    audio: Media | None = None
    sticker: Media | None = None
    location: Location | None = None
    reaction: Reaction | None = None
    edit: Edit | None = None
    system: System | None = None
    errors: list[WaError] = []


class Status(_Wa):
    id: WaStr
    status: Annotated[str, StringConstraints(strict=True)]
    recipient_id: str = ""
    recipient_type: str | None = None
    errors: list[WaError] = []


class Metadata(_Wa):
    phone_number_id: WaStr
    display_phone_number: str = ""


class Value(_Wa):
    """A ``messages`` change's value. Its messages and statuses are read one by one."""

    metadata: Metadata
    contacts: list[Any] = []
    messages: list[Any] = []
    statuses: list[Any] = []
    errors: list[Any] = []


class Change(_Wa):
    field: str = ""
    value: Any = None


class Entry(_Wa):
    id: str | int = ""
    changes: list[Change] = []


class Notification(_Wa):
    kind: Annotated[str, StringConstraints(strict=True)] = Field(alias="object")
    entry: list[Entry]


def _refusal(exc: ValidationError, where: str = "") -> InboundError:
    error = exc.errors(include_url=False)[0]
    field = ".".join(str(part) for part in (where, *error["loc"]) if part != "") or "body"
    if error["type"] == "missing":
        return InboundError(field, "is required.")
    if error["type"] in ("string_type", "string_too_short"):
        return InboundError(field, "must be text (WhatsApp's ids are strings).")
    if error["type"] in ("model_type", "model_attributes_type", "dict_type"):
        return InboundError(field, "must be an object.")
    if error["type"] == "list_type":
        return InboundError(field, "must be a list.")
    return InboundError(field, error["msg"] + ".")


def notification_parse(raw: Any) -> Notification:
    """The notification as we read it, or :class:`InboundError` naming the field at fault."""
    if not isinstance(raw, dict):
        raise InboundError("body", ERR_NOT_NOTIFICATION)
    try:
        notification = Notification.model_validate(raw)
    except ValidationError as exc:
        raise _refusal(exc) from None
    if notification.kind != OBJECT:
        raise InboundError("object", ERR_OBJECT)
    return notification


def _message_id(raw: Any) -> str:
    """A message's wamid as far as it can be read, to keep a refusal under its receipt."""
    if isinstance(raw, dict) and isinstance(raw.get("id"), str):
        return raw["id"].strip()[: LIMITS.inbound_message_id_chars]
    return ""


# ---------------------------------------------------------------------------
# What a notification asks of us, one message or status at a time


@dataclass(frozen=True)
class Refuse:
    """A message we can't read: kept in the admin, naming the field at fault."""

    field: str
    message: str
    message_id: str = ""


@dataclass(frozen=True)
class CantRead:
    """A message without words (a photo without a caption, a voice message…): its sender
    is told, in words, that Conch can't read that kind of message yet."""

    peer: str
    message_id: str
    kind: str
    reply_to: dict


@dataclass(frozen=True)
class Report:
    """WhatsApp's word on a reply it took: sent, delivered, read or failed (with why)."""

    platform_message_id: str
    status: str
    error: str = ""


Ask = Take | Ignore | Refuse | CantRead | Report

# What each kind of message is called when we say we can't read it, or note it was sent.
KINDS = {
    "image": "a photo",
    "video": "a video",
    "document": "a document",
    "audio": "an audio message",
    "sticker": "a sticker",
    "location": "a location",
    "contacts": "a contact card",
    "interactive": "a button or list reply",
    "button": "a button reply",
    "order": "an order",
    "unsupported": "this kind of message (WhatsApp itself couldn't pass it on)",
}
NOT_READ = "this kind of message"


def _kind(message: Message | EditedContent) -> str:
    audio = getattr(message, "audio", None)
    if message.type == "audio" and audio is not None and audio.voice:
        return "a voice message"
    return KINDS.get(message.type, NOT_READ)


def _place(location: Location) -> str:
    """A shared location in words: its name and address, then its coordinates."""
    words = [p.strip() for p in (location.name or "", location.address or "") if p.strip()]
    if location.latitude is not None and location.longitude is not None:
        words.append(f"{location.latitude}, {location.longitude}")
    return f"(shared a location: {'; '.join(words)})" if words else ""


def _words(message: Message | EditedContent, where: str) -> tuple[str, str]:
    """A message's words and the field they came from; ("", "") if it has none."""
    if message.type == "text" and message.text is not None:
        return message.text.body, f"{where}.text.body"
    if message.type in ("image", "video", "document"):
        media: Media | None = getattr(message, message.type)
        caption = (media.caption or "") if media is not None else ""
        if caption.strip():
            kind = _kind(message)
            if media is not None and media.filename:
                kind = f"{kind}, {' '.join(media.filename.split())}"
            return f"(sent {kind}) {caption}", f"{where}.{message.type}.caption"
    if isinstance(message, Message) and message.type == "location" and message.location:
        return _place(message.location), f"{where}.location"
    return "", ""


def _names(value: Value) -> dict[str, str]:
    """Who is who in a change: each contact's wa_id and profile name."""
    names = {}
    for raw in value.contacts:
        try:
            contact = Contact.model_validate(raw)
        except ValidationError:
            continue
        if contact.wa_id and contact.profile is not None and contact.profile.name:
            names[contact.wa_id] = " ".join(contact.profile.name.split())
    return names


def _replied_to(*, account_id: str, context: Context) -> tuple[str, str]:
    """Who wrote the message this one answers, and its words, when it is one of our
    replies; ("", "") when we don't know its words."""
    if not context.id:
        return "", ""
    part = (
        SentPart.objects.filter(
            channel=CHANNEL, account_id=account_id, platform_message_id=context.id
        )
        .select_related("message__conversation__agent")
        .first()
    )
    if part is None:
        return "", ""
    chat = part.message.conversation
    name = chat.agent.name if chat is not None and chat.agent is not None else ""
    return (name or "Conch")[: LIMITS.inbound_id_chars], part.message.text[
        : LIMITS.inbound_text_chars
    ]


def _message_ask(
    raw: Any, *, where: str, account_id: str, edits: str, names: dict[str, str]
) -> Ask:
    """What one message asks: take its words, tell its sender we can't read it, or ignore it."""
    try:
        message = Message.model_validate(raw)
    except ValidationError as exc:
        refusal = _refusal(exc, where)
        return Refuse(refusal.field, refusal.message, _message_id(raw))
    receipt = message.id
    if message.group_id is not None:
        return Ignore(GROUPS_NOT_TAKEN, receipt)
    if message.type == "reaction":
        emoji = (message.reaction.emoji if message.reaction else "") or "a removed reaction"
        return Ignore(f"a reaction ({emoji}): nothing to answer", receipt)
    if message.type == "revoke":
        return Ignore("a message its sender deleted: what was taken stays", receipt)
    if message.type == "system":
        said = message.system.body if message.system else ""
        return Ignore(f"a notice from WhatsApp: {said}".rstrip(": "), receipt)
    content: Message | EditedContent = message
    prefix = ""
    if message.type == "edit":
        if edits != EditedMessages.NEW:
            return Ignore(
                "an edit of a message already taken (this account ignores edits)", receipt
            )
        if message.edit is None or message.edit.message is None:
            return Ignore("an edit WhatsApp sent without its new words", receipt)
        content, where, prefix = message.edit.message, f"{where}.edit.message", "(edited) "
    peer = message.sender
    reply_to = reply_target(chat_id=peer)
    text, field = _words(content, where)
    if not text.strip():
        if message.type == "text":
            return Ignore("a message with no words", receipt)
        return CantRead(peer, receipt, _kind(content), reply_to)
    try:
        text_check(text, field)
    except InboundError as exc:
        return Refuse(exc.field, exc.message, receipt)

    payload: dict[str, Any] = {
        "channel": CHANNEL,
        "account_id": account_id,
        "chat_type": ChatType.DM,
        "peer": peer,
        "sender_name": names.get(peer, "")[: LIMITS.inbound_id_chars],
        "message_id": receipt,
    }
    context = message.context if message.type != "edit" else None
    if context is not None and context.id:
        replied_name, replied_words = _replied_to(account_id=account_id, context=context)
        if replied_words:
            payload.update(in_reply_to_name=replied_name, in_reply_to_text=replied_words)
        else:
            prefix += "(replying to an earlier message) "
    elif context is not None and (context.forwarded or context.frequently_forwarded):
        prefix += "(forwarded) "
    payload["text"] = prefix + text
    try:
        return Take(inbound_parse(payload), reply_to)
    except InboundError as exc:
        return Refuse(exc.field, exc.message, receipt)


def _error_words(errors: list[WaError], *, peer: str) -> str:
    """Why WhatsApp says a reply failed, in its words; the window's in ours first."""
    if not errors:
        return "WhatsApp gave no reason."
    error = errors[0]
    details = error.error_data.details if error.error_data is not None else ""
    said = ": ".join(p for p in (error.title or error.message, details) if p)
    if error.code == WINDOW_CODE:
        return f"{WINDOW_CLOSED.format(peer=peer or 'the person')} (WhatsApp: {said})"
    return f"WhatsApp could not deliver it ({error.code}): {said}"


def _status_ask(raw: Any, *, where: str) -> Ask:
    try:
        status = Status.model_validate(raw)
    except ValidationError as exc:
        refusal = _refusal(exc, where)
        return Refuse(refusal.field, refusal.message)
    if status.status not in Delivery.values:
        return Ignore(f"a status WhatsApp calls {status.status!r}")
    error = ""
    if status.status == Delivery.FAILED:
        error = _error_words(status.errors, peer=status.recipient_id)
    return Report(status.id, status.status, error)


def whatsapp_inbound(
    notification: Any, *, account: ChannelAccount | None = None, account_id: str = ""
) -> list[Ask]:
    """What a notification asks, one item per message and status in it, in order.

    Raises :class:`InboundError` naming the field for a notification we can't read at
    all (not an object, not WhatsApp's, a change without its metadata); a message or
    status we can't read is a :class:`Refuse` among the others.
    """
    account_id = account.account_id if account is not None else account_id
    phone_number_id = account.platform_id if account is not None else ""
    edits = account.edited_messages if account is not None else EditedMessages.IGNORE
    parsed = notification_parse(notification)
    asks: list[Ask] = []
    for e, entry in enumerate(parsed.entry):
        for c, change in enumerate(entry.changes):
            where = f"entry.{e}.changes.{c}.value"
            if change.field != "messages":
                asks.append(Ignore(f"a {change.field or 'nameless'} notification, not a message"))
                continue
            try:
                value = Value.model_validate(change.value)
            except ValidationError as exc:
                raise _refusal(exc, where) from None
            number = value.metadata.phone_number_id
            if phone_number_id and number != phone_number_id:
                reason = (
                    f"for the phone number id {number}: this account answers {phone_number_id} only"
                )
                asks.extend(Ignore(reason, _message_id(raw)) for raw in value.messages)
                asks.extend(Ignore(reason) for _ in value.statuses)
                continue
            names = _names(value)
            for m, raw in enumerate(value.messages):
                asks.append(
                    _message_ask(
                        raw,
                        where=f"{where}.messages.{m}",
                        account_id=account_id,
                        edits=edits,
                        names=names,
                    )
                )
            for s, raw in enumerate(value.statuses):
                asks.append(_status_ask(raw, where=f"{where}.statuses.{s}"))
            for raw in value.errors:
                log.warning("whatsapp %s: WhatsApp reports an error: %s", account_id, raw)
                asks.append(Ignore(f"an error WhatsApp reports: {str(raw)[:500]}"))
    return asks


# ---------------------------------------------------------------------------
# The door


def signature_good(app_secret: str, body: bytes, header: str) -> bool:
    """Whether ``header`` is ``sha256=`` and the HMAC-SHA256 of ``body`` with the app secret."""
    if not app_secret or not header.startswith("sha256="):
        return False
    expected = hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()
    given = header.removeprefix("sha256=").strip().lower()
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))


def _refused(message: str, status: int, **extra) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)


def _verify(request: HtmxHttpRequest, found: ChannelAccount | None) -> HttpResponse:
    """Meta's handshake: the challenge back as plain text, for our verify token only."""
    mode = request.GET.get("hub.mode", "")
    token = request.GET.get("hub.verify_token", "")
    if (
        found is None
        or mode != "subscribe"
        or not channel_account_check(account=found, secret=token)
    ):
        return HttpResponse(ERR_BAD_VERIFY_TOKEN, status=403, content_type="text/plain")
    return HttpResponse(request.GET.get("hub.challenge", ""), status=200, content_type="text/plain")


def _cant_read_told(account: ChannelAccount, asked: CantRead) -> dict[str, Any]:
    """Tell the sender, once per message and at most once in a few minutes, that Conch
    can't read that kind of message; keep the message in the admin as ignored."""
    mine = InboundRecord.objects.filter(
        channel=CHANNEL, account_id=account.account_id, message_id=asked.message_id
    )
    if mine.exists():  # WhatsApp sent it again: told already
        return {"outcome": "duplicate", "reason": "told already"}
    lately = timezone.now() - dt.timedelta(minutes=CANT_READ_AGAIN_MINUTES)
    words = CANT_READ.format(kind=asked.kind)
    told_lately = OutboxMessage.objects.filter(
        channel=CHANNEL,
        account_id=account.account_id,
        target__chat_id=asked.peer,
        text=words,
        created_at__gte=lately,
    ).exists()
    reason = f"{asked.kind} with no words: "
    if told_lately:
        reason += "they were told a few minutes ago that Conch can't read it yet"
    else:
        reason += "they were told that Conch can't read it yet"
    inbound_not_taken(
        channel=CHANNEL,
        account_id=account.account_id,
        message_id=asked.message_id,
        outcome="ignored",
        reason=reason,
        sender=asked.peer,
    )
    if not told_lately:
        outbox_enqueue(
            conversation=None,
            channel=CHANNEL,
            account_id=account.account_id,
            target=asked.reply_to,
            text=words,
        )
    return {"outcome": "ignored", "reason": reason, "told": not told_lately}


def _answer(account: ChannelAccount, asked: Ask) -> dict[str, Any]:
    """Do what one message or status asks; what it came to, for the webhook's answer."""

    def refused(message: str, field: str, message_id: str) -> dict[str, Any]:
        inbound_not_taken(
            channel=CHANNEL,
            account_id=account.account_id,
            message_id=message_id or f"refused:{uuid.uuid4().hex}",
            outcome="refused",
            reason=f"{field}: {message}",
        )
        return {"outcome": "refused", "error": message, "field": field}

    if isinstance(asked, Refuse):
        return refused(asked.message, asked.field, asked.message_id)
    if isinstance(asked, Ignore):
        ignored_keep(channel=CHANNEL, account_id=account.account_id, ignore=asked)
        return {"outcome": "ignored", "reason": asked.reason}
    if isinstance(asked, CantRead):
        return _cant_read_told(account, asked)
    if isinstance(asked, Report):
        reply = outbox_delivery_report(
            channel=CHANNEL,
            account_id=account.account_id,
            platform_message_id=asked.platform_message_id,
            status=asked.status,
            error=asked.error,
        )
        if reply is None:
            return {"outcome": "ignored", "reason": "a status of a message that isn't ours"}
        return {"outcome": "status", "status": asked.status, "delivery": reply.delivery}
    receipt = asked.inbound.message_id
    try:
        result = inbound_receive(
            owner=account.owner, inbound=asked.inbound, reply_to=asked.reply_to
        )
    except SessionTaken as exc:
        return refused(str(exc), "account_id", receipt)
    except InboundLimited as exc:  # kept as refused already, and its sender told once
        return {"outcome": "refused", "error": exc.reason}
    except ConchError as exc:
        return refused(str(exc), "text", receipt)
    return result.as_dict()


@csrf_exempt
@require_http_methods(["GET", "POST"])
def whatsapp_webhook(request: HtmxHttpRequest, account: str) -> HttpResponse:
    """WhatsApp's door: the verify handshake (GET) and notifications (POST). Past the
    signature, every notification is answered 200 with what each of its messages and
    statuses came to: any other answer makes WhatsApp send it again for days."""
    found = account_for(CHANNEL, account)
    if request.method == "GET":
        return _verify(request, found)
    try:
        body = body_read(request)
    except BodyTooLarge as exc:
        return _refused(exc.message, 413, field=exc.field)
    except InboundError as exc:
        return _refused(exc.message, 400, field=exc.field)
    try:
        app_secret = secret_readable(found.signing_secret) if found is not None else ""
    except SecretsKeyError:  # WhatsApp tries again later; by then the key may be back
        log.error("whatsapp %s: the app secret can't be opened", account)
        return _refused(ERR_KEY, 503)
    # An unknown account reads the same as a wrong signature: nothing to learn by probing.
    if found is None or not signature_good(
        app_secret, body, request.headers.get(SIGNATURE_HEADER, "")
    ):
        return _refused(ERR_BAD_SIGNATURE, 401)
    try:
        asks = whatsapp_inbound(inbound_json(body), account=found)
    except InboundError as exc:
        _answer(found, Refuse(exc.field, exc.message))
        return JsonResponse({"outcome": "refused", "error": exc.message, "field": exc.field})
    return JsonResponse({"outcome": "received", "results": [_answer(found, a) for a in asks]})


# ---------------------------------------------------------------------------
# Out


class WhatsAppRefused(DeliveryError):
    """The Cloud API said no: the HTTP status, its error ``code`` and words."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: int | None,
        permanent: bool,
        retry_after: float | None = None,
        too_long: bool = False,
    ) -> None:
        super().__init__(message, permanent=permanent, retry_after=retry_after)
        self.status = status
        self.code = code
        self.too_long = too_long


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds > 0 else None


def _refusal_of(
    status: int, error: dict[str, Any], *, to: str, retry_after: str | None, scrub
) -> WhatsAppRefused:
    """What a refusal means for the reply: its words, and whether retrying can help."""
    code = error.get("code") if isinstance(error.get("code"), int) else None
    message = scrub(str(error.get("message") or f"HTTP {status}"))
    data = error.get("error_data")
    details = scrub(str(data.get("details") or "")) if isinstance(data, dict) else ""
    said = f"{message} ({details})" if details and details not in message else message
    if code == WINDOW_CODE:
        words = f"{WINDOW_CLOSED.format(peer=to or 'the person')} WhatsApp said: {said}"
        return WhatsAppRefused(words, status=status, code=code, permanent=True)
    if code in TOKEN_CODES or status == 401:
        return WhatsAppRefused(
            f"{TOKEN_REFUSED} WhatsApp said: {said}", status=status, code=code, permanent=True
        )
    if code in SLOW_DOWN_CODES or status == 429:
        return WhatsAppRefused(
            f"WhatsApp says slow down: {said}",
            status=status,
            code=code,
            permanent=False,
            retry_after=_retry_after(retry_after),
        )
    if status >= 500 or code in TRANSIENT_CODES:
        return WhatsAppRefused(
            f"WhatsApp couldn't take it just now ({status}): {said}",
            status=status,
            code=code,
            permanent=False,
        )
    too_long = code == TOO_LONG_CODE and "at most" in said and "text" in said
    return WhatsAppRefused(
        f"WhatsApp refused the reply ({status}, code {code}): {said}",
        status=status,
        code=code,
        permanent=True,
        too_long=too_long,
    )


def _parts_sent(message: OutboxMessage, wamids: list[str]) -> None:
    """One part went out, as one message or as the halves WhatsApp made us cut it into:
    each wamid is kept, so WhatsApp's later word on any of them finds the reply."""
    if not wamids:
        outbox_part_sent(message=message)
        return
    for wamid in wamids[:-1]:
        SentPart.objects.get_or_create(
            channel=message.channel,
            account_id=message.account_id,
            platform_message_id=wamid,
            defaults={"message": message, "delivery": Delivery.SENT},
        )
    message.sent_ids = [*message.sent_ids, *wamids[:-1]]
    outbox_part_sent(message=message, platform_message_id=wamids[-1])


class WhatsAppSender:
    channel = CHANNEL

    def send(self, message: OutboxMessage, account: ChannelAccount | None) -> None:
        token, phone_number_id = _credentials(account, message.account_id)
        to = str(message.target.get("chat_id") or "")
        if not to:
            raise DeliveryError("The reply names no WhatsApp user to send to.", permanent=True)
        parts = split_message(message.text, TEXT_LIMIT)
        for index in range(message.parts_sent, len(parts)):
            wamids = self._send_part(
                token, phone_number_id, message, to, parts[index], first=index == 0
            )
            _parts_sent(message, wamids)

    def _send_part(
        self,
        token: str,
        phone_number_id: str,
        message: OutboxMessage,
        to: str,
        text: str,
        *,
        first: bool,
    ) -> list[str]:
        """One part; cut smaller and sent again if WhatsApp finds it too long."""
        body: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": to,
            "type": "text",
            "text": {"preview_url": False, "body": text},
        }
        answering = message.target.get("reply_to_message_id")
        if first and answering not in (None, ""):
            body["context"] = {"message_id": str(answering)}
        try:
            answer = whatsapp_call(token, "POST", f"{phone_number_id}/messages", body, to=to)
        except WhatsAppRefused as exc:
            if exc.too_long and len(text) > 1:
                halves = split_message(text, max(utf16_units(text) // 2, 1))
                wamids: list[str] = []
                for i, half in enumerate(halves):
                    wamids += self._send_part(
                        token, phone_number_id, message, to, half, first=first and i == 0
                    )
                return wamids
            raise
        sent = answer.get("messages")
        first_sent = sent[0] if isinstance(sent, list) and sent else None
        wamid = first_sent.get("id") if isinstance(first_sent, dict) else None
        if not isinstance(wamid, str) or not wamid:
            log.warning("whatsapp %s: a sent message came back without its id", message.account_id)
            return []
        return [wamid]


def _credentials(account: ChannelAccount | None, account_id: str) -> tuple[str, str]:
    """The account's access token and phone number id, or a DeliveryError saying which is missing."""
    if account is None:
        raise DeliveryError(f"There is no WhatsApp account {account_id!r}.", permanent=True)
    try:
        token = secret_readable(account.secret)
    except SecretsKeyError as exc:  # the key file was changed: retried once it is put back
        raise DeliveryError(str(exc)) from None
    if not token:
        raise DeliveryError(
            f"No access token for the WhatsApp account {account_id!r}.", permanent=True
        )
    if not account.platform_id:
        raise DeliveryError(
            f"The WhatsApp account {account_id!r} has no phone number id: "
            "set it with manage.py conch_whatsapp.",
            permanent=True,
        )
    return token, account.platform_id


def whatsapp_call(
    token: str,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    query: dict[str, str] | None = None,
    to: str = "",
) -> dict[str, Any]:
    """One Graph API call with the access token as its bearer; the answer, or
    :class:`WhatsAppRefused` / :class:`DeliveryError`. The token never shows in either."""
    parts = [urllib.parse.quote(p, safe="") for p in path.split("/")]
    url = f"{api_base()}/{'/'.join(parts)}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        method=method,
    )

    def scrub(text: str) -> str:
        return text.replace(token, "<token>") if token else text

    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
            answer = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            refused = json.loads(exc.read() or b"{}")
        except ValueError:
            refused = {}
        error = refused.get("error") if isinstance(refused, dict) else None
        raise _refusal_of(
            exc.code,
            error if isinstance(error, dict) else {"message": str(exc.reason)},
            to=to,
            retry_after=exc.headers.get("Retry-After") if exc.headers else None,
            scrub=scrub,
        ) from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DeliveryError(f"WhatsApp could not be reached: {scrub(str(exc))}") from None
    except ValueError:
        raise DeliveryError("WhatsApp answered with something that isn't JSON.") from None
    if not isinstance(answer, dict):
        raise DeliveryError("WhatsApp answered with something that isn't an object.")
    return answer


def whatsapp_number_describe(account: ChannelAccount) -> str:
    """Ask WhatsApp which number the account's phone number id is, with its token: the
    number and its verified name. Raises :class:`DeliveryError` if WhatsApp won't say."""
    token, phone_number_id = _credentials(account, account.account_id)
    answer = whatsapp_call(
        token, "GET", phone_number_id, query={"fields": "display_phone_number,verified_name"}
    )
    number = str(answer.get("display_phone_number") or "")
    name = str(answer.get("verified_name") or "")
    if not number:
        raise DeliveryError("WhatsApp named no phone number for that id.")
    return f"{number} ({name})" if name else number
