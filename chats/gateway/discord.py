"""Discord: messages over the Gateway (``conch discord``), slash commands at the
Interactions endpoint, replies through the REST API.

Messages in servers and DMs come over Discord's Gateway, a WebSocket that ``conch
discord ACCOUNT`` keeps open beside ``conch worker`` (:mod:`chats.gateway.discord_gateway`,
the only module that imports discord.py, so web processes never load it). It hands
each MESSAGE_CREATE's raw payload to :func:`discord_inbound`, and what that asks to
:func:`discord_deliver`: the same inbound path as every door (``inbound_receive``).

Slash commands come to ``POST /gateway/discord/<account>/interactions``
(:func:`discord_interactions`). Discord signs each with the application's Ed25519
key (``X-Signature-Ed25519`` over ``X-Signature-Timestamp`` + the raw body): the
signature is checked before anything is read, and a bad or missing one is refused
401, as is an unknown account or a timestamp more than five minutes from now. A PING is answered PONG; a command is routed like a
message and answered "thinking…" (a deferred response) at once, the reply following
later through the outbox as the interaction's follow-up.

How Discord's users are met, as OpenClaw's Discord adapter meets them:

- A DM is keyed by the install's ``dmScope``, its peer the author's user id; a server
  channel by the channel's id (``group:discord:<channel>``), with the server as
  ``guild_id`` and the author's role ids as ``member_roles``, so the ``guild + roles``
  and ``guild`` binding tiers are real. A thread (a channel of its own on Discord) is
  ``thread:discord:<parent channel>:<thread>``: its parent is its group and parent peer,
  so a binding for the channel covers its threads. MESSAGE_CREATE names only the channel;
  whether it is a thread, and its parent, the Gateway says elsewhere (:class:`Where`).
- In a server the bot answers as the account's group activation says: by default only
  when it is mentioned (in ``mentions``, or ``<@id>`` in the words) or when a message
  replies to one of its own; "always" takes every message. DMs are always taken.
- The bot's own messages and every other bot's (and webhooks') are never answered;
  neither are joins, pins and the like. A message for the bot that still isn't taken
  is kept in the admin; the chatter of a busy server that isn't for the bot is not.
- Message ids are snowflakes, unique across Discord: a message delivered twice (a
  Gateway RESUME replays what it thinks was missed) is a duplicate by its id.
- Replies go out with ``POST /channels/{id}/messages`` (or the interaction's follow-up),
  cut to :data:`TEXT_LIMIT` at line ends, with ``allowed_mentions`` empty so a reply
  never pings anyone. Discord's per-route rate-limit buckets are kept per route: a
  bucket with nothing left is waited out when it resets soon, else the send is put
  back until it does; a 429 is honoured by its ``retry_after``. 401, 403 and 404 are
  final; a "too long" refusal (50035, BASE_TYPE_MAX_LENGTH) is cut smaller and sent
  again. No token ever appears in an error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Annotated, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
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
from chats.gateway.models import ChannelAccount, ChatType, GroupActivation, OutboxMessage
from chats.gateway.outbox import DeliveryError, outbox_part_sent, reply_target
from chats.gateway.services import (
    SessionTaken,
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

CHANNEL = "discord"
TIMEOUT = 15.0
TEXT_LIMIT = 2000  # a message's content, at most (Discord's "Must be 2000 or fewer in length")
# Discord asks every REST caller to say who it is: "DiscordBot ($url, $versionNumber)".
USER_AGENT = "DiscordBot (Conch, 0.1.0)"
SIGNATURE_HEADER = "X-Signature-Ed25519"
TIMESTAMP_HEADER = "X-Signature-Timestamp"

# Channel types (Discord's channel object): a DM, and the three kinds of thread.
DM_CHANNEL = 1
THREAD_TYPES = frozenset({10, 11, 12})
# Message types that are a person's words: DEFAULT and REPLY. The rest are joins, pins,
# a thread's start, a boost… and a bot's own answers to commands.
PERSONS_WORDS = frozenset({0, 19})
EPHEMERAL = 1 << 6

ERR_BAD_SIGNATURE = "The request's Discord signature is missing or wrong."
ERR_SNOWFLAKE = "must be a Discord id (a snowflake: digits, as a string)."


def api_base() -> str:
    return settings.CONCH_DISCORD_API_BASE.rstrip("/")


# ---------------------------------------------------------------------------
# The payloads, the parts we read

Snowflake = Annotated[str, StringConstraints(strict=True, pattern=r"^\d{1,20}$")]


class _Dc(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class User(_Dc):
    id: Snowflake
    username: str = ""
    global_name: str | None = None
    bot: bool = False


class Member(_Dc):
    roles: list[Snowflake] = Field(default_factory=list)
    nick: str | None = None
    user: User | None = None  # in an interaction; a message's member has none (its author is it)


class Reference(_Dc):
    message_id: Snowflake | None = None
    channel_id: Snowflake | None = None


class Earlier(_Dc):
    """The message a reply answers (``referenced_message``), as much of it as we read."""

    id: Snowflake
    author: User | None = None
    content: str = ""


class Message(_Dc):
    # Fields are checked in this order, and the first at fault is named.
    id: Snowflake
    channel_id: Snowflake
    author: User
    guild_id: Snowflake | None = None
    member: Member | None = None
    content: str = ""
    type: int = 0
    flags: int = 0
    webhook_id: Snowflake | None = None
    channel_type: int | None = None
    mentions: list[User] = Field(default_factory=list)
    message_reference: Reference | None = None
    referenced_message: Earlier | None = None


class CommandOption(_Dc):
    name: str
    type: int
    value: Any = None
    options: list[CommandOption] = Field(default_factory=list)


class CommandData(_Dc):
    name: str = ""
    options: list[CommandOption] = Field(default_factory=list)


class PartialChannel(_Dc):
    id: Snowflake
    type: int = 0
    parent_id: Snowflake | None = None
    name: str | None = None


class Interaction(_Dc):
    id: Snowflake
    type: int
    application_id: Snowflake | None = None
    token: str = ""
    data: CommandData | None = None
    guild_id: Snowflake | None = None
    channel_id: Snowflake | None = None
    channel: PartialChannel | None = None
    member: Member | None = None
    user: User | None = None


def _refusal(exc: ValidationError) -> InboundError:
    error = exc.errors(include_url=False)[0]
    field = ".".join(str(part) for part in error["loc"]) or "body"
    if error["type"] == "missing":
        return InboundError(field, "is required.")
    if error["type"] in ("string_type", "string_pattern_mismatch") and _is_id(field):
        return InboundError(field, ERR_SNOWFLAKE)
    if error["type"] in ("model_type", "model_attributes_type", "dict_type"):
        return InboundError(field, "must be an object.")
    if error["type"] in ("int_type", "int_parsing", "int_from_float"):
        return InboundError(field, "must be a whole number.")
    return InboundError(field, error["msg"] + ".")


def _is_id(field: str) -> bool:
    last = field.rsplit(".", 1)[-1]
    return last == "id" or last.endswith("_id") or last.isdigit()


def message_parse(raw: Any) -> Message:
    """A MESSAGE_CREATE's message as we read it, or :class:`InboundError` naming the field."""
    if not isinstance(raw, dict):
        raise InboundError("body", "must be a Discord message object.")
    try:
        return Message.model_validate(raw)
    except ValidationError as exc:
        raise _refusal(exc) from None


def message_receipt(raw: Any) -> str:
    """A message's receipt id as far as it can be read: its snowflake, else ""."""
    if isinstance(raw, dict) and isinstance(raw.get("id"), str) and raw["id"].isdigit():
        return raw["id"][:20]
    return ""


# ---------------------------------------------------------------------------
# What a message asks of us


@dataclass(frozen=True)
class Where:
    """Where in a server a message was sent, as the Gateway told us elsewhere (a
    MESSAGE_CREATE names only its channel's id): a thread's parent channel, and the
    name a session's title shows (``#general``)."""

    thread_parent: str = ""
    name: str = ""


def display_name(user: User, member: Member | None = None) -> str:
    """How a person is called, on one line: their server nickname or display name, and
    their @username (``Alice (@alice)``); their id if they have neither."""
    shown = (member.nick if member is not None else None) or user.global_name or ""
    shown = " ".join(shown.split())
    if user.username:
        at = f"@{user.username}"
        name = f"{shown} ({at})" if shown and shown != user.username else at
    else:
        name = shown or user.id
    return name[: LIMITS.inbound_id_chars]


def _mentioned(message: Message, bot_user_id: str) -> bool:
    if not bot_user_id:
        return False
    if any(user.id == bot_user_id for user in message.mentions):
        return True
    return f"<@{bot_user_id}>" in message.content or f"<@!{bot_user_id}>" in message.content


def _replies_to_us(message: Message, bot_user_id: str) -> bool:
    earlier = message.referenced_message
    return bool(
        bot_user_id
        and earlier is not None
        and earlier.author is not None
        and earlier.author.id == bot_user_id
    )


USER_MENTION = re.compile(r"<@!?(\d{1,20})>")
SPACES = re.compile(r"[ \t]{2,}")


def _words(message: Message, bot_user_id: str) -> str:
    """The message's words as the assistant reads them: our own mention dropped (so
    ``@Conch /new`` is ``/new``), anyone else's written as their @name."""
    names = {user.id: user.username for user in message.mentions if user.username}

    def spelled(match: re.Match[str]) -> str:
        who = match.group(1)
        if who == bot_user_id:
            return ""
        return f"@{names[who]}" if who in names else match.group(0)

    return SPACES.sub(" ", USER_MENTION.sub(spelled, message.content)).strip()


def _replied_to(message: Message) -> tuple[str, str]:
    """Who wrote the message this one answers, and its words; ("", "") if none or no words."""
    earlier = message.referenced_message
    if earlier is None or not earlier.content.strip():
        return "", ""
    name = display_name(earlier.author) if earlier.author is not None else ""
    return name, earlier.content[: LIMITS.inbound_text_chars]


def discord_inbound(
    raw: Any,
    *,
    account: ChannelAccount | None = None,
    account_id: str = "",
    bot_user_id: str = "",
    where: Where | None = None,
) -> Take | Ignore:
    """What a MESSAGE_CREATE's message asks: :class:`Take` or :class:`Ignore`.

    ``where`` is what the Gateway said of the message's channel (a thread's parent);
    None when nothing is known, and then a server message is its channel's. Raises
    :class:`InboundError` naming the field for a message we can't read.
    """
    if account is not None:
        account_id, bot_user_id = account.account_id, account.bot_user_id
    activation = account.group_activation if account is not None else GroupActivation.MENTION
    message = message_parse(raw)
    receipt = message.id
    author = message.author
    if bot_user_id and author.id == bot_user_id:
        return Ignore("our own message")
    dm = message.guild_id is None
    addressed = dm or _mentioned(message, bot_user_id) or _replies_to_us(message, bot_user_id)
    kept = receipt if addressed else ""  # a busy server's chatter isn't kept
    if author.bot or message.webhook_id is not None:
        return Ignore("a bot's message: bots are never answered", kept)
    if message.type not in PERSONS_WORDS:
        return Ignore("not a person's words (a join, a pin, a thread's start…)", kept)
    if message.flags & EPHEMERAL:
        return Ignore("an ephemeral message", kept)
    if not addressed and activation != GroupActivation.ALWAYS:
        return Ignore("not for the bot: it wasn't mentioned (this account answers when it is)")
    text_check(message.content, "content")
    text = _words(message, bot_user_id)
    if not text:
        return Ignore("no words (an image, a sticker, a mention alone…)", kept)

    payload: dict[str, Any] = {
        "channel": CHANNEL,
        "account_id": account_id,
        "peer": author.id,
        "sender_name": display_name(author, message.member),
        "message_id": receipt,
        "text": text,
    }
    replied_name, replied_words = _replied_to(message)
    if replied_words:
        payload.update(in_reply_to_name=replied_name, in_reply_to_text=replied_words)
    if dm:
        payload["chat_type"] = ChatType.DM
        return Take(inbound_parse(payload), reply_target(chat_id=message.channel_id))
    payload["guild_id"] = message.guild_id
    payload["member_roles"] = list(message.member.roles) if message.member is not None else []
    if where is not None and where.name:
        payload["group_name"] = where.name[: LIMITS.inbound_id_chars]
    if where is not None and where.thread_parent:
        payload.update(
            chat_type=ChatType.THREAD,
            thread_id=message.channel_id,
            parent_peer=where.thread_parent,
            group_id=where.thread_parent,
        )
    else:
        payload.update(chat_type=ChatType.GROUP, group_id=message.channel_id)
    # The thread is a channel of its own: the reply goes to it, pointing at the message.
    reply_to = reply_target(chat_id=message.channel_id, reply_to_message_id=message.id)
    return Take(inbound_parse(payload), reply_to)


def discord_deliver(account: ChannelAccount, asked: Take | Ignore) -> str:
    """Hand what a Gateway message asks to the inbound path, as every door does: a
    :class:`Take` is routed (``inbound_receive``); an :class:`Ignore` for us, and a
    refusal, are kept in the admin. Returns the outcome's word."""
    if isinstance(asked, Ignore):
        ignored_keep(channel=CHANNEL, account_id=account.account_id, ignore=asked)
        return "ignored"
    try:
        result = inbound_receive(
            owner=account.owner, inbound=asked.inbound, reply_to=asked.reply_to
        )
    except InboundLimited:  # kept as refused already, and its sender told once
        return "refused"
    except SessionTaken as exc:
        discord_refuse(account, asked.inbound.message_id, InboundError("account_id", str(exc)))
        return "refused"
    except ConchError as exc:
        discord_refuse(account, asked.inbound.message_id, InboundError("text", str(exc)))
        return "refused"
    return result.outcome


def discord_refuse(account: ChannelAccount, message_id: str, error: InboundError) -> None:
    """Keep a message we can't take in the admin, with the field at fault."""
    inbound_not_taken(
        channel=CHANNEL,
        account_id=account.account_id,
        message_id=message_id or f"refused:{time.time_ns()}",
        outcome="refused",
        reason=f"{error.field}: {error.message}",
    )


# ---------------------------------------------------------------------------
# The Interactions endpoint


# How far a signed request's timestamp may be from now: one recorded earlier can't be
# played again once its interaction's receipt is pruned, as Slack's five minutes hold.
SIGNED_WITHIN = 300


def interaction_signed(
    *, public_key: str, signature: str, timestamp: str, body: bytes, now: float | None = None
) -> bool:
    """Whether Discord signed this request: an Ed25519 signature by the application's
    public key over the timestamp header followed by the raw body, as sent, within
    :data:`SIGNED_WITHIN` seconds of now."""
    if not public_key or not signature or not timestamp.isdigit():
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > SIGNED_WITHIN:
        return False
    try:
        key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key))
        key.verify(bytes.fromhex(signature), timestamp.encode() + body)
    except (ValueError, InvalidSignature):
        return False
    return True


# Interaction types, and the response types we answer with (Discord's interaction docs).
PING, APPLICATION_COMMAND, AUTOCOMPLETE = 1, 2, 4
PONG, MESSAGE_NOW, DEFERRED, CHOICES = 1, 4, 5, 8
STRING_OPTION, SUB_COMMAND, SUB_COMMAND_GROUP = 3, 1, 2
RESETS = ("new", "reset")  # our slash commands that start a session afresh, as /new does

NOTHING_ASKED = "Say something with the command, e.g. /ask text: what's on today?"
NOT_OURS = "Conch answers slash commands (/ask, /new, /reset) and messages."

# The slash commands ``conch_discord`` registers: /ask, /new and /reset.
COMMANDS: list[dict[str, Any]] = [
    {
        "name": "ask",
        "type": 1,
        "description": "Ask Conch something",
        "options": [
            {"name": "text", "type": STRING_OPTION, "description": "Your words", "required": True}
        ],
    },
    {
        "name": "new",
        "type": 1,
        "description": "Start a fresh conversation (the earlier one is kept)",
        "options": [{"name": "text", "type": STRING_OPTION, "description": "Words to start with"}],
    },
    {
        "name": "reset",
        "type": 1,
        "description": "Start a fresh conversation (the earlier one is kept)",
        "options": [{"name": "text", "type": STRING_OPTION, "description": "Words to start with"}],
    },
]


@dataclass(frozen=True)
class Answer:
    """An answer Discord shows at once (an interaction's response), e.g. PONG."""

    body: dict


def _ephemeral(words: str) -> Answer:
    return Answer(
        {"type": MESSAGE_NOW, "data": {"content": words[:TEXT_LIMIT], "flags": EPHEMERAL}}
    )


def _option_words(options: list[CommandOption]) -> list[str]:
    words = []
    for option in options:
        if option.type in (SUB_COMMAND, SUB_COMMAND_GROUP):
            words.extend(_option_words(option.options))
        elif (
            option.type == STRING_OPTION and isinstance(option.value, str) and option.value.strip()
        ):
            words.append(option.value.strip())
    return words


def command_text(data: CommandData) -> str:
    """A slash command's words: ``/new`` and ``/reset`` are Conch's own (``/new words``);
    any other command is its text options' words."""
    words = " ".join(_option_words(data.options))
    if data.name.lower() in RESETS:
        return f"/{data.name.lower()} {words}".strip()
    return words


def interaction_parse(raw: Any) -> Interaction:
    if not isinstance(raw, dict):
        raise InboundError("body", "must be a Discord interaction object.")
    try:
        return Interaction.model_validate(raw)
    except ValidationError as exc:
        raise _refusal(exc) from None


def discord_interaction(raw: Any, *, account: ChannelAccount) -> Take | Answer:
    """What an interaction asks: an :class:`Answer` now (PONG, or words only its sender
    sees), or :class:`Take` for a slash command's words, answered "thinking…" and
    replied to later. Raises :class:`InboundError` naming the field."""
    interaction = interaction_parse(raw)
    if interaction.type == PING:
        return Answer({"type": PONG})
    if interaction.type == AUTOCOMPLETE:
        return Answer({"type": CHOICES, "data": {"choices": []}})
    if interaction.type != APPLICATION_COMMAND or interaction.data is None:
        return _ephemeral(NOT_OURS)
    member = interaction.member
    person = member.user if member is not None and member.user is not None else interaction.user
    if person is None:
        raise InboundError("user", "is required (who used the command).")
    text = command_text(interaction.data)
    text_check(text, "data.options")
    if not text:
        return _ephemeral(NOTHING_ASKED)
    channel_id = interaction.channel_id or (interaction.channel.id if interaction.channel else "")
    if not channel_id:
        raise InboundError("channel_id", "is required.")
    payload: dict[str, Any] = {
        "channel": CHANNEL,
        "account_id": account.account_id,
        "peer": person.id,
        "sender_name": display_name(person, member),
        "message_id": f"interaction:{interaction.id}",
        "text": text,
    }
    if interaction.guild_id is None:
        payload["chat_type"] = ChatType.DM
    else:
        payload["guild_id"] = interaction.guild_id
        payload["member_roles"] = list(member.roles) if member is not None else []
        channel = interaction.channel
        if channel is not None and channel.name:
            payload["group_name"] = f"#{channel.name}"[: LIMITS.inbound_id_chars]
        if channel is not None and channel.type in THREAD_TYPES and channel.parent_id:
            payload.update(
                chat_type=ChatType.THREAD,
                thread_id=channel_id,
                parent_peer=channel.parent_id,
                group_id=channel.parent_id,
            )
        else:
            payload.update(chat_type=ChatType.GROUP, group_id=channel_id)
    # The reply is the interaction's follow-up, while its token lives (15 minutes).
    reply_to = {
        **reply_target(chat_id=channel_id),
        "interaction_token": interaction.token,
        "application_id": interaction.application_id or account.platform_id,
    }
    return Take(inbound_parse(payload), reply_to)


def _refused(message: str, status: int, **extra) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)


@csrf_exempt
@require_POST
def discord_interactions(request: HtmxHttpRequest, account: str) -> JsonResponse:
    """Discord's Interactions endpoint. The signature is checked first, over the body's
    bytes as sent; past it, every interaction gets an answer Discord can show within
    its three seconds: a slash command is routed and answered "thinking…" (type 5), and
    one we can't take is answered with why, seen only by its sender, and kept in the admin."""
    found = account_for(CHANNEL, account)
    try:
        body = body_read(request)
    except BodyTooLarge as exc:
        return _refused(exc.message, 413, field=exc.field)
    except InboundError as exc:
        return _refused(exc.message, 400, field=exc.field)
    signed = found is not None and interaction_signed(
        public_key=found.public_key,
        signature=request.headers.get(SIGNATURE_HEADER, ""),
        timestamp=request.headers.get(TIMESTAMP_HEADER, ""),
        body=body,
    )
    # An unknown account reads the same as a wrong signature: nothing to learn by probing.
    if found is None or not signed:
        return _refused(ERR_BAD_SIGNATURE, 401)
    raw: Any = None

    def refused(message: str, field: str) -> JsonResponse:
        receipt = ""
        if isinstance(raw, dict) and isinstance(raw.get("id"), str):
            receipt = f"interaction:{raw['id'][:24]}"
        discord_refuse(found, receipt, InboundError(field, message))
        return JsonResponse(_ephemeral(f"Conch couldn't take that: {message}").body)

    try:
        raw = inbound_json(body)
        asked = discord_interaction(raw, account=found)
    except InboundError as exc:
        return refused(exc.message, exc.field)
    if isinstance(asked, Answer):
        return JsonResponse(asked.body)
    try:
        inbound_receive(owner=found.owner, inbound=asked.inbound, reply_to=asked.reply_to)
    except InboundLimited as exc:  # kept as refused already, and its sender told once
        return JsonResponse(_ephemeral(str(exc)).body)
    except SessionTaken as exc:
        return refused(str(exc), "account_id")
    except ConchError as exc:
        return refused(str(exc), "text")
    return JsonResponse({"type": DEFERRED})


# ---------------------------------------------------------------------------
# Out

# A bucket with nothing left that resets within this long is waited out; a longer
# wait puts the send back until then (the outbox thread serves every app).
SHORT_WAIT = 5.0


@dataclass
class Bucket:
    """What Discord last said of one route's rate limit: requests left, and when it resets."""

    remaining: int
    resets_at: float  # time.monotonic()
    name: str = ""  # X-RateLimit-Bucket


class DiscordRefused(DeliveryError):
    """Discord said no: the status, its JSON error ``code`` and ``message``, and ``errors``."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: int | None,
        errors: Any,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(
            message,
            permanent=400 <= status < 500 and status != 429,
            retry_after=retry_after,
        )
        self.status = status
        self.code = code
        self.errors = errors

    @property
    def too_long(self) -> bool:
        """Discord's "Invalid Form Body" for content over its limit (BASE_TYPE_MAX_LENGTH)."""
        return self.code == 50035 and "BASE_TYPE_MAX_LENGTH" in json.dumps(self.errors)

    @property
    def interaction_gone(self) -> bool:
        """The interaction's token expired (50027) or is unknown (10015): its 15 minutes passed."""
        return self.code in (50027, 10015)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class DiscordSender:
    """Replies to Discord, from the outbox's thread: plain HTTP, one part at a time,
    each route's rate-limit bucket remembered between sends."""

    channel = CHANNEL

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, Bucket] = {}
        self._global_until = 0.0
        self._refused_tokens: set[str] = set()  # digests of bot tokens Discord said 401 to

    def forget(self) -> None:
        """Forget every bucket and refused token (a test's fresh start)."""
        with self._lock:
            self._buckets.clear()
            self._global_until = 0.0
            self._refused_tokens.clear()

    def send(self, message: OutboxMessage, account: ChannelAccount | None) -> None:
        try:
            token = secret_readable(account.secret) if account is not None else ""
        except SecretsKeyError as exc:  # the key file was changed: retried once it is put back
            raise DeliveryError(str(exc)) from None
        target = message.target
        if not target.get("interaction_token") and not token:
            raise DeliveryError(
                f"No bot token for the Discord account {message.account_id!r}.", permanent=True
            )
        parts = split_message(message.text, TEXT_LIMIT)
        for index in range(message.parts_sent, len(parts)):
            sent_id = self._send_part(token, account, message, parts[index], first=index == 0)
            outbox_part_sent(message=message, platform_message_id=sent_id)

    def _send_part(
        self,
        token: str,
        account: ChannelAccount | None,
        message: OutboxMessage,
        text: str,
        *,
        first: bool,
    ) -> str:
        """One part; cut smaller and sent again if Discord finds it too long. Returns the
        id Discord gave the (first) message sent."""
        target = message.target
        body: dict[str, Any] = {"content": text, "allowed_mentions": {"parse": []}}
        interaction = target.get("interaction_token")
        try:
            if interaction:
                application = target.get("application_id") or (
                    account.platform_id if account is not None else ""
                )
                answer = self._call(
                    f"/webhooks/{application}/{interaction}",
                    route=f"webhooks/{application}/{_digest(str(interaction))[:12]}",
                    body=body,
                    secrets=(str(interaction), token),
                )
            else:
                if first and target.get("reply_to_message_id") not in (None, ""):
                    body["message_reference"] = {
                        "message_id": str(target["reply_to_message_id"]),
                        "fail_if_not_exists": False,
                    }
                answer = self._bot_call(token, f"channels/{target.get('chat_id')}/messages", body)
        except DiscordRefused as exc:
            if interaction and exc.interaction_gone and token and target.get("chat_id"):
                # The interaction's 15 minutes are over: the reply goes to its channel.
                message.target = {
                    k: v
                    for k, v in target.items()
                    if k not in ("interaction_token", "application_id")
                }
                OutboxMessage.objects.filter(pk=message.pk).update(target=message.target)
                return self._send_part(token, account, message, text, first=first)
            if exc.too_long and len(text) > 1:
                halves = split_message(text, max(utf16_units(text) // 2, 1))
                ids = [
                    self._send_part(token, account, message, half, first=first and i == 0)
                    for i, half in enumerate(halves)
                ]
                return ids[0]
            raise
        sent = answer.get("id")
        return str(sent) if sent is not None else ""

    def _bot_call(self, token: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        digest = _digest(token)
        if digest in self._refused_tokens:
            # Discord bans an address that keeps sending a refused token: ask once.
            raise DiscordRefused(
                "Discord refused this bot token (401) earlier: set a new one with conch_discord.",
                status=401,
                code=0,
                errors=None,
            )
        try:
            return self._call(
                f"/{path}",
                route=path,
                body=body,
                secrets=(token,),
                headers={"Authorization": f"Bot {token}"},
            )
        except DiscordRefused as exc:
            if exc.status == 401:
                self._refused_tokens.add(digest)
            raise

    def _wait_for(self, route: str) -> float:
        """How long until ``route`` may be called again: 0 if now."""
        now = time.monotonic()
        with self._lock:
            wait = max(self._global_until - now, 0.0)
            bucket = self._buckets.get(route)
            if bucket is not None and bucket.remaining <= 0:
                wait = max(wait, bucket.resets_at - now)
        return wait

    def _remember(self, route: str, headers: Any, *, retry_after: float | None = None) -> None:
        """Keep what a response's rate-limit headers say of ``route`` (and of all routes)."""
        now = time.monotonic()
        with self._lock:
            if retry_after is not None and str(headers.get("X-RateLimit-Global", "")) == "true":
                self._global_until = now + retry_after
                return
            remaining = _number(headers.get("X-RateLimit-Remaining"))
            reset_after = _number(headers.get("X-RateLimit-Reset-After"))
            if retry_after is not None:
                remaining, reset_after = 0, max(retry_after, reset_after or 0.0)
            if remaining is None or reset_after is None:
                return
            self._buckets[route] = Bucket(
                remaining=int(remaining),
                resets_at=now + reset_after,
                name=str(headers.get("X-RateLimit-Bucket") or ""),
            )

    def _call(
        self,
        path: str,
        *,
        route: str,
        body: dict[str, Any],
        secrets: tuple[str, ...],
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """POST ``body`` to ``path``; the answer, or :class:`DiscordRefused`. ``route`` names
        the rate-limit bucket; ``secrets`` never appear in an error."""

        def scrub(text: str) -> str:
            for secret in secrets:
                if secret:
                    text = text.replace(secret, "<token>")
            return text

        wait = self._wait_for(route)
        if wait > SHORT_WAIT:
            raise DeliveryError(
                f"Discord's rate limit for {scrub(route)} resets in {wait:.1f}s: sent then.",
                retry_after=wait,
            )
        if wait > 0:
            time.sleep(wait)
        request = urllib.request.Request(
            api_base() + path,
            data=json.dumps(body).encode(),
            headers={
                "Content-Type": "application/json",
                "User-Agent": USER_AGENT,
                **(headers or {}),
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
                self._remember(route, response.headers)
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                error = json.loads(exc.read() or b"{}")
            except ValueError:
                error = {}
            error = error if isinstance(error, dict) else {}
            said = scrub(str(error.get("message") or exc.reason))
            code = error.get("code") if isinstance(error.get("code"), int) else None
            if exc.code == 429:
                retry_after = _number(error.get("retry_after"))
                if retry_after is None:
                    retry_after = _number(exc.headers.get("Retry-After")) or 1.0
                self._remember(route, exc.headers, retry_after=retry_after)
                raise DiscordRefused(
                    f"Discord says slow down: {said} (retry after {retry_after:g}s)",
                    status=429,
                    code=code,
                    errors=None,
                    retry_after=retry_after,
                ) from None
            self._remember(route, exc.headers)
            details = _field_errors(error.get("errors"))
            raise DiscordRefused(
                f"Discord refused the message ({exc.code}{f', {code}' if code else ''}): "
                f"{said}{f' ({scrub(details)})' if details else ''}",
                status=exc.code,
                code=code,
                errors=error.get("errors"),
            ) from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise DeliveryError(f"Discord could not be reached: {scrub(str(exc))}") from None
        except ValueError:
            raise DeliveryError("Discord answered with something that isn't JSON.") from None
        return answer if isinstance(answer, dict) else {}


def _number(value: Any) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def _field_errors(errors: Any, where: str = "") -> str:
    """Discord's nested form errors in one line: ``content: BASE_TYPE_MAX_LENGTH …``."""
    if not isinstance(errors, dict):
        return ""
    found = []
    for key, value in errors.items():
        if key == "_errors" and isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    found.append(f"{where or 'body'}: {item.get('code')} {item.get('message')}")
        else:
            found.append(_field_errors(value, f"{where}.{key}" if where else str(key)))
    return "; ".join(part for part in found if part)


# ---------------------------------------------------------------------------
# Setting an account up


def _setup_call(token: str, method: str, path: str, body: Any = None) -> Any:
    """A call with the bot token at set-up (no rate-limit memory needed: once, by hand)."""
    request = urllib.request.Request(
        api_base() + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Authorization": f"Bot {token}",
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
        },
        method=method,
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        try:
            error = json.loads(exc.read() or b"{}")
        except ValueError:
            error = {}
        said = error.get("message") if isinstance(error, dict) else None
        raise DeliveryError(
            f"Discord refused {method} {path} ({exc.code}): {str(said or exc.reason)}".replace(
                token, "<token>"
            ),
            permanent=exc.code in (401, 403),
        ) from None
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        raise DeliveryError(
            f"Discord could not be reached: {str(exc).replace(token, '<token>')}"
        ) from None


def discord_bot_identify(account: ChannelAccount) -> str:
    """Ask Discord who the account's bot is (``GET /users/@me``) and keep its user id,
    so its own messages are never answered and a mention of it is known. Returns its
    @username. Raises :class:`DeliveryError` if Discord can't be asked or won't say."""
    try:
        token = secret_readable(account.secret)
    except SecretsKeyError as exc:
        raise DeliveryError(str(exc)) from None
    if not token:
        raise DeliveryError(f"No bot token for the Discord account {account.account_id!r}.")
    me = _setup_call(token, "GET", "/users/@me")
    user_id = me.get("id") if isinstance(me, dict) else None
    if not isinstance(user_id, str) or not user_id.isdigit():
        raise DeliveryError("Discord's /users/@me named no user id.")
    ChannelAccount.objects.filter(pk=account.pk).update(bot_user_id=user_id)
    account.bot_user_id = user_id
    return str(me.get("username") or user_id)


def discord_commands_register(account: ChannelAccount) -> list[str]:
    """Register Conch's slash commands (/ask, /new, /reset) for the account's application,
    replacing its global commands. Returns their names."""
    token = secret_readable(account.secret)
    made = _setup_call(token, "PUT", f"/applications/{account.platform_id}/commands", COMMANDS)
    return (
        [c.get("name", "") for c in made if isinstance(c, dict)] if isinstance(made, list) else []
    )
