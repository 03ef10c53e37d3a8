"""Slack: the Events API in, ``chat.postMessage`` out, both through ``slack_sdk``.

The Request URL is ``POST /gateway/slack/<account>``. Every request Slack sends
is signed (``X-Slack-Signature``, v0: an HMAC-SHA256 of ``v0:<timestamp>:<body>``
with the app's signing secret); :func:`slack_request_verified` checks it with
``slack_sdk``'s own verifier, which also refuses a timestamp more than five
minutes from now, so a request recorded earlier can't be played again later.
One played again within those minutes is a message already taken: its receipt
makes it a duplicate, as Slack's own retries are.

How Slack's messages are met, as OpenClaw's Slack adapter meets them:

- A DM (``channel_type`` ``im``) is keyed by the install's ``dmScope``, its peer the
  sender's user id; a group DM (``mpim``) and a channel by the conversation's id
  (``group:slack:C…``); a reply in a thread (``thread_ts`` other than its own ``ts``)
  by its thread (``thread:slack:<channel>:<thread_ts>``), the channel its parent peer,
  so a binding for the channel covers its threads. ``team_id`` fills the team tier.
- In a channel the bot answers as the account's group activation says: by default
  only when it is mentioned (an ``app_mention``, or ``<@bot>`` in the words) or in
  a thread it started or was answered in; "always" takes every message. DMs and
  group DMs are always taken. Slack sends a mention twice (as ``message`` and as
  ``app_mention``), under one ``ts``: the second is a duplicate.
- Messages from bots (``bot_message``, a ``bot_id``, the bot's own user) are never
  answered; ``message_changed`` is ignored unless the account takes edits as new
  messages; joins, deletions and other subtypes are ignored, each kept in the admin.
- The webhook answers at once: routing writes the message and queues the turn, and
  the reply runs after, in the runner. Everything past the signature is answered
  200, since anything else makes Slack send it again.
- Replies go back with ``chat.postMessage``, in the thread when the message was in
  one, cut to :data:`TEXT_LIMIT` characters; Slack's ``ratelimited`` answer is honoured
  by its ``Retry-After``, and a refusal retrying can't fix fails at once.
"""

from __future__ import annotations

import logging
import re
import urllib.error
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from pydantic import BaseModel, ConfigDict, StrictStr, ValidationError
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web import WebClient

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
    EditedMessages,
    GroupActivation,
    OutboxMessage,
)
from chats.gateway.outbox import DeliveryError, outbox_part_sent, reply_target, split_text
from chats.gateway.services import (
    SessionTaken,
    ignored_keep,
    inbound_not_taken,
    inbound_receive,
)
from chats.gateway.webhooks import account_for, body_read
from chats.limits import LIMITS
from chats.runtime.chats import ConchError
from chats.secretbox import SecretsKeyError, secret_readable
from conch.http import HtmxHttpRequest

log = logging.getLogger(__name__)

CHANNEL = "slack"
TIMEOUT = 15
SIGNATURE_HEADER = "X-Slack-Signature"
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
# Slack keeps 40,000 characters of a message and advises at most 4,000 per message.
TEXT_LIMIT = 4000

ERR_BAD_SIGNATURE = "The request's Slack signature is missing, wrong or too old."

# chat.postMessage's errors that retrying can't fix (docs.slack.dev, chat.postMessage).
PERMANENT = frozenset(
    {
        "not_authed",
        "invalid_auth",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "no_permission",
        "missing_scope",
        "not_allowed_token_type",
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "restricted_action",
        "restricted_action_read_only_channel",
        "restricted_action_thread_only_channel",
        "team_access_not_granted",
        "no_text",
        "invalid_arguments",
        "ekm_access_denied",
    }
)
TOO_LONG = "msg_too_long"
SLOW_DOWN = "ratelimited"

# Subtypes that are a person's new words; every other subtype is ignored (a join, a topic…).
PERSONS_WORDS = frozenset({"file_share", "thread_broadcast", "me_message"})


def api_base() -> str:
    return settings.CONCH_SLACK_API_BASE


# ---------------------------------------------------------------------------
# The signature


def slack_request_verified(
    account: ChannelAccount, *, body: bytes, timestamp: str, signature: str
) -> bool:
    """Whether Slack signed ``body`` with the account's signing secret, within five minutes."""
    try:
        secret = secret_readable(account.signing_secret)
    except SecretsKeyError:
        log.warning("slack %s: the signing secret can't be read", account.account_id)
        return False
    if not secret or not timestamp.strip().isdigit() or not signature:
        return False
    return SignatureVerifier(secret).is_valid(body=body, timestamp=timestamp, signature=signature)


# ---------------------------------------------------------------------------
# The event, the parts we read


class _Slack(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Edited(_Slack):
    user: StrictStr = ""
    ts: StrictStr = ""


class Profile(_Slack):
    display_name: StrictStr = ""
    real_name: StrictStr = ""


class Event(_Slack):
    """A ``message`` or ``app_mention`` event; a ``message_changed`` carries the new one."""

    type: StrictStr
    subtype: StrictStr | None = None
    channel: StrictStr = ""
    channel_type: StrictStr | None = None
    user: StrictStr | None = None
    bot_id: StrictStr | None = None
    text: StrictStr | None = None
    ts: StrictStr = ""
    thread_ts: StrictStr | None = None
    parent_user_id: StrictStr | None = None
    team: StrictStr | None = None
    user_profile: Profile | None = None
    edited: Edited | None = None
    message: Event | None = None
    previous_message: Event | None = None


class Envelope(_Slack):
    type: StrictStr
    challenge: StrictStr | None = None
    team_id: StrictStr | None = None
    api_app_id: StrictStr | None = None
    event_id: StrictStr | None = None
    event: Event | None = None


def _refusal(exc: ValidationError) -> InboundError:
    error = exc.errors(include_url=False)[0]
    field = ".".join(str(part) for part in error["loc"]) or "body"
    if error["type"] == "missing":
        return InboundError(field, "is required.")
    if error["type"] == "string_type":
        return InboundError(field, "must be text.")
    if error["type"] in ("model_type", "model_attributes_type", "dict_type"):
        return InboundError(field, "must be an object.")
    return InboundError(field, error["msg"] + ".")


def envelope_parse(raw: Any) -> Envelope:
    """The request as we read it, or :class:`InboundError` naming the field at fault."""
    if not isinstance(raw, dict):
        raise InboundError("body", "must be a Slack Events API request (an object).")
    try:
        return Envelope.model_validate(raw)
    except ValidationError as exc:
        raise _refusal(exc) from None


def event_message_id(raw: Any) -> str:
    """A request's receipt id as far as it can be read: ``<channel>:<ts>``, else its event id."""
    if not isinstance(raw, dict):
        return ""
    event = raw.get("event")
    if isinstance(event, dict):
        channel, ts = event.get("channel"), event.get("ts")
        if isinstance(channel, str) and isinstance(ts, str) and channel and ts:
            return f"{channel}:{ts}"
    event_id = raw.get("event_id")
    return f"event:{event_id}" if isinstance(event_id, str) and event_id else ""


# ---------------------------------------------------------------------------
# What a request asks of us


@dataclass(frozen=True)
class Challenge:
    """Slack checking the Request URL (``url_verification``): answer its challenge."""

    challenge: str


Kind = Literal["im", "mpim", "channel", "group"]


def _kind(event: Event) -> Kind:
    """The conversation's kind; an ``app_mention`` has no ``channel_type``, so its id's
    first letter says (D a DM, G a private channel or an old group DM, C a channel)."""
    given = event.channel_type
    if given in ("im", "mpim", "channel", "group"):
        return given  # type: ignore[return-value]
    first = event.channel[:1]
    return "im" if first == "D" else "group" if first == "G" else "channel"


def _sender_name(event: Event) -> str:
    profile = event.user_profile
    name = (profile.display_name or profile.real_name) if profile is not None else ""
    return " ".join(name.split())[: LIMITS.inbound_id_chars] or (event.user or "")


def _mention_dropped(text: str, bot_user_id: str) -> str:
    """The words with the bot's own mention dropped from their start (``<@U0BOT> hi`` is "hi")."""
    if not bot_user_id:
        return text
    return re.sub(rf"^\s*<@{re.escape(bot_user_id)}(\|[^>]*)?>[\s:,]*", "", text)


def slack_inbound(raw: Any, *, account: ChannelAccount | None = None, account_id: str = ""):
    """What a request asks: :class:`Challenge`, :class:`Take` or :class:`Ignore`.

    Raises :class:`InboundError` naming the field for a request we can't read.
    A Slack ``ts`` is unique within its conversation, so the inbound's ``message_id``
    is ``<channel>:<ts>`` (and an edit taken as new adds its edit's ``ts``).
    """
    account_id = account.account_id if account is not None else account_id
    bot_user_id = account.bot_user_id if account is not None else ""
    edits = account.edited_messages if account is not None else EditedMessages.IGNORE
    activation = account.group_activation if account is not None else GroupActivation.MENTION

    envelope = envelope_parse(raw)
    if envelope.type == "url_verification":
        if envelope.challenge is None:
            raise InboundError("challenge", "is required.")
        return Challenge(envelope.challenge)
    if envelope.type == "app_rate_limited":
        return Ignore("Slack held back events: the app went over its rate limit")
    if envelope.type != "event_callback" or envelope.event is None:
        return Ignore(f"not an event this bot takes ({envelope.type})")
    event = envelope.event
    if event.type not in ("message", "app_mention"):
        return Ignore(f"a {event.type} event, not a message")
    if not event.channel:
        raise InboundError("event.channel", "is required.")
    if not event.ts:
        raise InboundError("event.ts", "is required.")
    channel = event.channel
    receipt = f"{channel}:{event.ts}"
    edited_ts = ""
    said = event
    if event.subtype == "message_changed":
        if event.message is None:
            raise InboundError("event.message", "is required.")
        original = (event.previous_message.ts if event.previous_message else "") or event.message.ts
        receipt = f"{channel}:{original or event.ts}"
        if edits != EditedMessages.NEW:
            return Ignore(
                "an edit of a message already taken (this account ignores edits)", receipt
            )
        said = event.message
        edited_ts = (said.edited.ts if said.edited else "") or event.ts
    elif event.subtype == "bot_message":
        return Ignore("a bot's message: bots are never answered", receipt)
    elif event.subtype is not None and event.subtype not in PERSONS_WORDS:
        return Ignore(f"a {event.subtype} message, not a person's new words", receipt)
    if said.bot_id or (bot_user_id and said.user == bot_user_id):
        return Ignore("a bot's message: bots are never answered", receipt)
    if not said.user:
        return Ignore("no sender", receipt)
    text = said.text
    if text is None or not text.strip():
        return Ignore("no words (a file without a comment…)", receipt)
    text_check(text, "event.message.text" if edited_ts else "event.text")
    kind = _kind(event)
    ts = said.ts or event.ts
    thread_ts = said.thread_ts if said.thread_ts and said.thread_ts != ts else None
    if kind in ("channel", "group") and activation == GroupActivation.MENTION:
        mentioned = event.type == "app_mention" or (
            bool(bot_user_id) and f"<@{bot_user_id}" in text
        )
        in_bots_thread = bool(thread_ts and bot_user_id and said.parent_user_id == bot_user_id)
        if not (mentioned or in_bots_thread):
            return Ignore(
                "not addressed to the bot: in channels this account answers only when "
                "mentioned, or in a thread it is in",
                receipt,
            )
    words = _mention_dropped(text, bot_user_id).strip()
    if not words:
        return Ignore("a mention with no words", receipt)

    payload: dict[str, Any] = {
        "channel": CHANNEL,
        "account_id": account_id,
        "peer": said.user,
        "sender_name": _sender_name(said),
        "message_id": receipt,
        "text": words,
        "team_id": envelope.team_id or said.team or event.team or "",
    }
    if kind == "im":
        payload["chat_type"] = ChatType.DM
    elif thread_ts is not None:
        payload.update(
            chat_type=ChatType.THREAD, group_id=channel, thread_id=thread_ts, parent_peer=channel
        )
    else:
        payload.update(chat_type=ChatType.GROUP, group_id=channel)
    # In a thread the reply goes to the thread; elsewhere to the conversation itself.
    reply_to = reply_target(chat_id=channel, message_thread_id=thread_ts, reply_to_message_id=ts)
    if edited_ts:
        payload["message_id"] += f":edited:{edited_ts}"
        payload["text"] = f"(edited) {words}"
    return Take(inbound_parse(payload), reply_to)


# ---------------------------------------------------------------------------
# The door


def _refused(message: str, status: int, **extra) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)


@csrf_exempt
@require_POST
def slack_webhook(request: HtmxHttpRequest, account: str) -> JsonResponse:
    """Slack's door. Past the signature, every request is answered 200 at once (Slack
    waits three seconds, then sends it again): one we choose not to take is kept in
    the admin as refused or ignored, and a message's reply runs after the answer."""
    found = account_for(CHANNEL, account)
    try:
        body = body_read(request)
    except BodyTooLarge as exc:
        return _refused(exc.message, 413, field=exc.field)
    except InboundError as exc:
        return _refused(exc.message, 400, field=exc.field)
    signed = found is not None and slack_request_verified(
        found,
        body=body,
        timestamp=request.headers.get(TIMESTAMP_HEADER, ""),
        signature=request.headers.get(SIGNATURE_HEADER, ""),
    )
    # An unknown account reads the same as a wrong signature: nothing to learn by probing.
    if found is None or not signed:
        return _refused(ERR_BAD_SIGNATURE, 401)
    raw = None

    def refused(message: str, field: str) -> JsonResponse:
        inbound_not_taken(
            channel=CHANNEL,
            account_id=found.account_id,
            message_id=event_message_id(raw) or f"refused:{uuid.uuid4().hex}",
            outcome="refused",
            reason=f"{field}: {message}",
        )
        return JsonResponse({"outcome": "refused", "error": message, "field": field})

    try:
        raw = inbound_json(body)
        asked = slack_inbound(raw, account=found)
    except InboundError as exc:
        return refused(exc.message, exc.field)
    if isinstance(asked, Challenge):
        return JsonResponse({"challenge": asked.challenge})
    if isinstance(asked, Ignore):
        ignored_keep(channel=CHANNEL, account_id=found.account_id, ignore=asked)
        return JsonResponse({"outcome": "ignored", "reason": asked.reason})
    try:
        result = inbound_receive(owner=found.owner, inbound=asked.inbound, reply_to=asked.reply_to)
    except SessionTaken as exc:
        return refused(str(exc), "account_id")
    except InboundLimited as exc:  # kept as refused already, and its sender told once
        return JsonResponse({"outcome": "refused", "error": exc.reason})
    except ConchError as exc:
        return refused(str(exc), "text")
    return JsonResponse(result.as_dict())


# ---------------------------------------------------------------------------
# Out


class SlackRefused(DeliveryError):
    """Slack said no: its ``error`` code, and how long to wait when it says slow down."""

    def __init__(self, message: str, *, error: str, status: int, retry_after: float | None):
        super().__init__(
            message,
            permanent=error in PERMANENT,
            retry_after=retry_after,
        )
        self.error = error
        self.status = status


def _client(token: str) -> WebClient:
    return WebClient(token=token, base_url=api_base(), timeout=TIMEOUT)


def _token(account: ChannelAccount | None, account_id: str) -> str:
    try:
        token = secret_readable(account.secret) if account is not None else ""
    except SecretsKeyError as exc:  # the key file was changed: retried once it is put back
        raise DeliveryError(str(exc)) from None
    if not token:
        raise DeliveryError(f"No bot token for the Slack account {account_id!r}.", permanent=True)
    return token


def _call(token: str, method: str, **arguments: Any) -> dict[str, Any]:
    """One Web API call; Slack's refusals and failures as :class:`DeliveryError`."""

    def scrub(text: str) -> str:  # never the token in an error
        return text.replace(token, "<token>")

    try:
        response = _client(token).api_call(method, json=arguments)
    except SlackApiError as exc:
        answer = exc.response
        data = answer.data if isinstance(answer.data, dict) else {}
        error = str(data.get("error") or "unknown_error")
        status = int(answer.status_code or 0)
        if status == 429 or error == SLOW_DOWN:
            header = answer.headers.get("Retry-After") or answer.headers.get("retry-after")
            try:
                wait = max(float(header), 1.0) if header else 1.0
            except ValueError:
                wait = 1.0
            raise SlackRefused(
                f"Slack says slow down: retry after {wait:g} s",
                error=SLOW_DOWN,
                status=status,
                retry_after=wait,
            ) from None
        raise SlackRefused(
            f"Slack refused {method}: {scrub(error)}", error=error, status=status, retry_after=None
        ) from None
    except (SlackClientError, urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        raise DeliveryError(f"Slack could not be reached: {scrub(str(exc))}") from None
    return response.data if isinstance(response.data, dict) else {}


class SlackSender:
    channel = CHANNEL

    def send(self, message: OutboxMessage, account: ChannelAccount | None) -> None:
        token = _token(account, message.account_id)
        parts = split_text(message.text, TEXT_LIMIT)
        for index in range(message.parts_sent, len(parts)):
            self._send_part(token, message, parts[index])

    def _send_part(self, token: str, message: OutboxMessage, text: str) -> None:
        """One part; cut smaller and sent again if Slack finds it too long."""
        target = message.target
        arguments: dict[str, Any] = {"channel": target.get("chat_id"), "text": text}
        if target.get("message_thread_id") not in (None, ""):
            arguments["thread_ts"] = target["message_thread_id"]
        try:
            answer = _call(token, "chat.postMessage", **arguments)
        except SlackRefused as exc:
            if exc.error == TOO_LONG and len(text) > 1:
                for half in split_text(text, max(len(text) // 2, 1)):
                    self._send_part(token, message, half)
                return
            raise
        outbox_part_sent(message=message, platform_message_id=str(answer.get("ts") or ""))


def slack_bot_identify(account: ChannelAccount) -> str:
    """Ask Slack who the account's bot is (``auth.test``) and keep its user id. Returns it.

    Raises :class:`DeliveryError` if Slack can't be asked or won't say.
    """
    token = _token(account, account.account_id)
    answer = _call(token, "auth.test")
    user_id = answer.get("user_id")
    if not isinstance(user_id, str) or not user_id:
        raise DeliveryError("Slack's auth.test named no user id.")
    ChannelAccount.objects.filter(pk=account.pk).update(bot_user_id=user_id)
    account.bot_user_id = user_id
    return user_id
