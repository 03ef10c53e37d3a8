"""Telegram: the Bot API's webhook Update in, ``sendMessage`` out.

The webhook is ``POST /gateway/telegram/<account>``; Telegram sends the
secret given to ``setWebhook`` in ``X-Telegram-Bot-Api-Secret-Token``, which
is checked against its digest. ``CONCH_TELEGRAM_API_BASE`` (a setting,
from the environment) points the sender elsewhere, e.g. at a test's loopback server.

How Telegram's users are met:

- The Update is read with :class:`Update` (pydantic, the parts we read); what
  doesn't fit is refused naming the field, and the webhook still answers 200
  (the view keeps the refusal in the admin): a non-200 makes Telegram resend
  for hours and hold back every later update.
- A command naming a bot (``/new@somebot``) is ours only if it names our bot,
  learnt from ``getMe`` when the account is set up (:func:`telegram_bot_identify`);
  a command naming another bot is ignored. A bare command is ours in a DM, and
  in a group too: Telegram's convention (and OpenClaw's) is that a bare command
  in a group is for every bot in it.
- A group upgraded to a supergroup (``migrate_to_chat_id``) takes its sessions,
  their history and their waiting replies to the new chat id
  (:func:`telegram_chat_migrate`), whether the webhook or a refused send says so first.
- Replies are cut to Telegram's 4,096 in UTF-16 units (the conservative count:
  never more than Telegram's); a "message is too long" refusal is cut smaller
  and sent again, never dropped.
- In groups the speaker is named (first name and @username; "the group's
  admins" for an anonymous admin; "the channel …" for a message sent as a
  channel), and the reply points at the message it answers (``reply_parameters``).
  Posts a linked channel forwards into its discussion group start no reply
  unless the account says so; an ``edited_message`` is ignored unless the
  account says to take it as a new message.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError

from chats import events
from chats.gateway.inbound import Ignore, InboundError, Take, inbound_parse, text_check
from chats.gateway.keys import main_key_for, session_key_for
from chats.gateway.models import (
    Binding,
    ChannelAccount,
    ChatMigration,
    ChatType,
    EditedMessages,
    OutboxMessage,
    OutboxState,
    SessionOrigin,
)
from chats.gateway.outbox import DeliveryError, outbox_part_sent, reply_target
from chats.gateway.services import group_retitle, inbound_of
from chats.limits import LIMITS
from chats.models import Conversation, EntryKind, EntryRole
from chats.runtime.chats import conversation_archive, entry_append
from chats.secretbox import SecretsKeyError, secret_readable

log = logging.getLogger(__name__)

CHANNEL = "telegram"
TIMEOUT = 15.0
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"

ANONYMOUS_ADMINS = "the group's admins"
TOO_LONG = "message is too long"
ERR_CHAT_TYPE = "must be private, group, supergroup or channel."
MIGRATED = "the group became a supergroup"


def api_base() -> str:
    return settings.CONCH_TELEGRAM_API_BASE.rstrip("/")


# ---------------------------------------------------------------------------
# The Update, the parts we read

TgInt = Annotated[int, Strict()]  # an id is a whole number: never "7", never true


class _Tg(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class User(_Tg):
    id: TgInt
    is_bot: bool = False
    first_name: str = ""
    last_name: str | None = None
    username: str | None = None


class Chat(_Tg):
    id: TgInt
    type: Literal["private", "group", "supergroup", "channel"]
    title: str | None = None
    username: str | None = None


class Message(_Tg):
    # Fields are checked in this order, and the first at fault is named: the chat first.
    chat: Chat
    message_id: TgInt
    sender: User | None = Field(default=None, alias="from")
    sender_chat: Chat | None = None
    date: int = 0
    edit_date: int | None = None
    message_thread_id: TgInt | None = None
    is_topic_message: bool = False
    is_automatic_forward: bool = False
    text: str | None = None
    caption: str | None = None
    migrate_to_chat_id: TgInt | None = None
    migrate_from_chat_id: TgInt | None = None
    new_chat_title: str | None = None
    # The message this one replies to (Telegram gives it whole, without its own reply).
    reply_to_message: Message | None = None


class CallbackQuery(_Tg):
    id: str
    sender: User | None = Field(default=None, alias="from")


class Update(_Tg):
    update_id: TgInt | None = None
    message: Message | None = None
    edited_message: Message | None = None
    callback_query: CallbackQuery | None = None


def _refusal(exc: ValidationError) -> InboundError:
    error = exc.errors(include_url=False)[0]
    field = ".".join(str(part) for part in error["loc"]) or "body"
    if error["type"] == "missing":
        return InboundError(field, "is required.")
    if field.endswith("chat.type"):
        return InboundError(field, ERR_CHAT_TYPE)
    if error["type"] in ("int_type", "int_parsing", "int_from_float"):
        return InboundError(field, "must be a whole number.")
    if error["type"] in ("model_type", "model_attributes_type", "dict_type"):
        return InboundError(field, "must be an object.")
    return InboundError(field, error["msg"] + ".")


def update_parse(raw: Any) -> Update:
    """The Update as we read it, or :class:`InboundError` naming the field at fault."""
    if not isinstance(raw, dict):
        raise InboundError("body", "must be a Telegram Update object.")
    try:
        return Update.model_validate(raw)
    except ValidationError as exc:
        raise _refusal(exc) from None


def update_message_id(raw: Any) -> str:
    """An update's receipt id as far as it can be read: ``<chat>:<message>``, else its update id."""
    if not isinstance(raw, dict):
        return ""
    for where in ("message", "edited_message"):
        message = raw.get(where)
        if isinstance(message, dict):
            chat = message.get("chat")
            chat_id = chat.get("id") if isinstance(chat, dict) else None
            if isinstance(chat_id, int) and isinstance(message.get("message_id"), int):
                return f"{chat_id}:{message['message_id']}"
    update_id = raw.get("update_id")
    return f"update:{update_id}" if isinstance(update_id, int) else ""


# ---------------------------------------------------------------------------
# What an Update asks of us


@dataclass(frozen=True)
class Migrate:
    """A group became a supergroup: its sessions move to the new chat id."""

    old_chat_id: int
    new_chat_id: int
    title: str = ""  # the supergroup's, when the update says it


@dataclass(frozen=True)
class Retitle:
    """A group was renamed (``new_chat_title``): its sessions' titles follow."""

    chat_id: int
    title: str


@dataclass(frozen=True)
class AnswerButton:
    """A button was pressed (``callback_query``): answer it, so it stops spinning."""

    callback_query_id: str


COMMAND = re.compile(r"^/(?P<name>[A-Za-z0-9_]+)(?:@(?P<bot>[A-Za-z0-9_]+))?(?=\s|$)")


def _command_for_us(text: str, *, bot_username: str) -> tuple[bool, str]:
    """Whether a message is ours to read, and its text with our own ``@name`` dropped.

    ``/cmd@ourbot`` is ours; ``/cmd@otherbot`` is not (nor, while our name is
    unknown, any command naming a bot); ``/cmd`` is ours in a DM and in a group.
    """
    match = COMMAND.match(text)
    if match is None or match.group("bot") is None:
        return True, text
    ours = bot_username.lstrip("@").casefold()
    if not ours or match.group("bot").casefold() != ours:
        return False, text
    return True, f"/{match.group('name')}{text[match.end() :]}"


def _sender(message: Message) -> tuple[str, str] | None:
    """The speaker's id (for routing) and name (for the assistant), or None if nobody speaks."""
    chat = message.chat
    if message.sender_chat is not None:
        if message.sender_chat.id == chat.id:  # an anonymous admin (GroupAnonymousBot)
            return str(chat.id), ANONYMOUS_ADMINS
        title = (message.sender_chat.title or message.sender_chat.username or "").strip()
        return str(message.sender_chat.id), f"the channel {title}" if title else "the channel"
    if message.sender is None:
        return None
    person = message.sender
    name = " ".join(p for p in (person.first_name, person.last_name or "") if p).strip()
    if person.username:
        name = f"{name} (@{person.username})" if name else f"@{person.username}"
    return str(person.id), name


def group_title(chat: Chat) -> str:
    """A group's title on one line, as a session's title and a key never read it."""
    return " ".join((chat.title or "").split())[: LIMITS.inbound_id_chars]


def _replied_to(message: Message) -> tuple[str, str]:
    """Who wrote the message this one answers, and its words; ("", "") if none or no words."""
    earlier = message.reply_to_message
    if earlier is None:
        return "", ""
    words = earlier.text if earlier.text is not None else earlier.caption
    if not words or not words.strip():
        return "", ""
    who = _sender(earlier)
    name = who[1] if who is not None else ""
    return name[: LIMITS.inbound_id_chars], words[: LIMITS.inbound_text_chars]


def telegram_inbound(update: Any, *, account: ChannelAccount | None = None, account_id: str = ""):
    """What an Update asks: :class:`Take`, :class:`Ignore` or :class:`Migrate`.

    Raises :class:`InboundError` naming the field for an Update we can't read.
    Message ids are only unique within a chat, so the inbound's ``message_id``
    is ``<chat id>:<message id>`` (and an edit taken as new adds its edit date).
    """
    account_id = account.account_id if account is not None else account_id
    bot_username = account.bot_username if account is not None else ""
    edits = account.edited_messages if account is not None else EditedMessages.IGNORE
    linked_posts = account.linked_channel_posts if account is not None else False

    parsed = update_parse(update)
    if parsed.callback_query is not None:
        return AnswerButton(parsed.callback_query.id)
    edited = parsed.message is None and parsed.edited_message is not None
    message = parsed.edited_message if edited else parsed.message
    if message is None:
        return Ignore("not a message (a poll, a member change…)")
    where = "edited_message" if edited else "message"
    chat = message.chat
    receipt = f"{chat.id}:{message.message_id}"
    if message.migrate_to_chat_id is not None:
        return Migrate(chat.id, message.migrate_to_chat_id)
    if message.migrate_from_chat_id is not None:
        return Migrate(message.migrate_from_chat_id, chat.id, group_title(chat))
    if message.new_chat_title is not None and chat.type != "private":
        return Retitle(chat.id, " ".join(message.new_chat_title.split())[: LIMITS.inbound_id_chars])
    # A bot speaking for itself; an anonymous admin and a channel come through Telegram's
    # own bots (GroupAnonymousBot, Channel_Bot) with the real speaker in sender_chat.
    if message.sender_chat is None and message.sender is not None and message.sender.is_bot:
        return Ignore("a bot's message: bots are never answered", receipt)
    if chat.type == "group":  # a basic group may have become a supergroup: go where it went
        successor = telegram_successor(account_id=account_id, chat_id=chat.id)
        if successor != chat.id:
            chat = chat.model_copy(update={"id": successor, "type": "supergroup"})
    if edited and edits != EditedMessages.NEW:
        return Ignore("an edit of a message already taken (this account ignores edits)", receipt)
    if chat.type == "channel":
        return Ignore("a channel's post: nobody to answer", receipt)
    if message.is_automatic_forward and not linked_posts:
        return Ignore(
            "a post the linked channel forwarded (this account doesn't answer those)", receipt
        )
    who = _sender(message)
    if who is None:
        return Ignore("no sender", receipt)
    peer, name = who
    words = "text" if message.text is not None else "caption"
    text = message.text if message.text is not None else message.caption
    if text is None or not text.strip():
        return Ignore("no words (a sticker, a photo without a caption…)", receipt)
    text_check(text, f"{where}.{words}")
    ours, text = _command_for_us(text, bot_username=bot_username)
    if not ours:
        return Ignore("a command for another bot", receipt)

    thread_id = message.message_thread_id if message.is_topic_message else None
    payload: dict[str, Any] = {
        "channel": CHANNEL,
        "account_id": account_id,
        "peer": peer,
        "sender_name": name[: LIMITS.inbound_id_chars],
        "message_id": receipt,
        "text": text,
    }
    replied_name, replied_words = _replied_to(message)
    if replied_words:
        payload.update(in_reply_to_name=replied_name, in_reply_to_text=replied_words)
    if chat.type == "private":
        payload["chat_type"] = ChatType.DM
        reply_to = reply_target(chat_id=chat.id)
    else:
        payload["group_name"] = group_title(chat)
        if thread_id is not None:
            payload.update(
                chat_type=ChatType.THREAD, group_id=str(chat.id), thread_id=str(thread_id)
            )
        else:
            payload.update(chat_type=ChatType.GROUP, group_id=str(chat.id))
        reply_to = reply_target(
            chat_id=chat.id, message_thread_id=thread_id, reply_to_message_id=message.message_id
        )
    if edited:
        payload["message_id"] += f":edited:{message.edit_date or 0}"
        payload["text"] = f"(edited) {text}"
    return Take(inbound_parse(payload), reply_to)


# ---------------------------------------------------------------------------
# A group that became a supergroup


def _same_chat(chat_id: int) -> Q:
    """Targets naming the chat, written as a number (our webhook) or as text (the inbound door)."""
    return Q(target__chat_id=chat_id) | Q(target__chat_id=str(chat_id))


def telegram_successor(*, account_id: str, chat_id: int) -> int:
    """The id a basic group moved to, once its migration is known; else its own id."""
    moved = (
        ChatMigration.objects.filter(channel=CHANNEL, account_id=account_id, old_id=str(chat_id))
        .values_list("new_id", flat=True)
        .first()
    )
    return int(moved) if moved is not None else chat_id


def _newer(one: Conversation, other: Conversation) -> bool:
    """Whether ``one`` is the later generation: started later (then made later)."""
    return (one.session_started_at, one.pk) > (other.session_started_at, other.pk)


def telegram_chat_migrate(
    *, account_id: str, old_chat_id: int, new_chat_id: int, title: str = ""
) -> int:
    """Move a group's sessions, with their history, and its unsent replies to its new chat id.

    Telegram tells twice (the old chat's ``migrate_to_chat_id``, the new one's
    ``migrate_from_chat_id``) and a refused send tells a third time: the second
    and later find nothing left to move. From then on a message still sent under the
    old id is routed to the new one (:func:`telegram_successor`). Where a session
    already lives under the new key, the two are weighed by their own times, never by
    which key they sit under: the later generation stays live, the earlier is archived
    and kept readable. Returns how many sessions moved.
    """
    old, new = str(old_chat_id), str(new_chat_id)
    moved = 0
    with transaction.atomic():
        ChatMigration.objects.get_or_create(
            channel=CHANNEL, account_id=account_id, old_id=old, defaults={"new_id": new}
        )
        origins = SessionOrigin.objects.select_related("conversation__agent").filter(
            channel=CHANNEL, account_id=account_id, group_id=old
        )
        for origin in origins:
            chat = origin.conversation
            fields: dict[str, Any] = {
                "group_id": new,
                "reply_to": {**origin.reply_to, "chat_id": new_chat_id},
            }
            if origin.chat_type == ChatType.THREAD and origin.parent_peer == old:
                fields["parent_peer"] = new
            SessionOrigin.objects.filter(pk=origin.pk).update(**fields)
            if chat.session_key and chat.agent is not None:
                moved_to = inbound_of(
                    origin, group_id=new, parent_peer=fields.get("parent_peer", origin.parent_peer)
                )
                key = session_key_for(chat.agent.slug, main_key_for(moved_to))
                there = (
                    Conversation.objects.filter(session_key=key, archived=False)
                    .exclude(pk=chat.pk)
                    .first()
                )
                if there is not None and not chat.archived:
                    # Two live generations for one key: the earlier steps back, kept.
                    earlier, later = (chat, there) if _newer(there, chat) else (there, chat)
                    SessionOrigin.objects.filter(conversation_id=earlier.pk).update(
                        ended_because=MIGRATED
                    )
                    conversation_archive(conversation=earlier)
                    SessionOrigin.objects.filter(
                        conversation_id=later.pk, previous__isnull=True
                    ).update(previous=earlier)
                Conversation.objects.filter(pk=chat.pk).update(session_key=key)
            moved += 1
        # A rule for the old group is a rule for the new one.
        for binding in Binding.objects.filter(channel=CHANNEL, peer=old):
            binding.peer = new
            binding.save(update_fields=["peer"])
        waiting = OutboxMessage.objects.filter(
            _same_chat(old_chat_id),
            channel=CHANNEL,
            account_id=account_id,
            state__in=[OutboxState.PENDING, OutboxState.SENDING, OutboxState.FAILED],
        )
        for queued in waiting:
            OutboxMessage.objects.filter(pk=queued.pk).update(
                target={**queued.target, "chat_id": new_chat_id},
                state=OutboxState.PENDING if queued.state == OutboxState.FAILED else queued.state,
                next_attempt_at=timezone.now(),
            )
        if title:
            group_retitle(channel=CHANNEL, account_id=account_id, group_id=new, title=title)
    log.info("telegram %s: chat %s became %s (%d sessions moved)", account_id, old, new, moved)
    return moved


# ---------------------------------------------------------------------------
# Out


def utf16_units(text: str) -> int:
    """Telegram's length: UTF-16 code units (an emoji outside the BMP counts two)."""
    return len(text.encode("utf-16-le")) // 2


def _fitting(text: str, limit: int) -> int:
    """How many characters of ``text`` fit in ``limit`` UTF-16 units (at least one)."""
    units = 0
    for i, ch in enumerate(text):
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > limit:
            return max(i, 1)
    return len(text)


def split_message(text: str, limit: int = LIMITS.telegram_message_chars) -> list[str]:
    """Cut ``text`` into parts of at most ``limit`` UTF-16 units, at line ends where possible."""
    parts = []
    rest = text
    while utf16_units(rest) > limit:
        fit = _fitting(rest, limit)
        cut = rest.rfind("\n", 0, fit)
        if cut <= 0:
            cut = fit
        parts.append(rest[:cut])
        rest = rest[cut:].lstrip("\n")
    if rest:
        parts.append(rest)
    return parts or [""]


class TelegramRefused(DeliveryError):
    """The Bot API said no: its status, its description and its ``parameters``."""

    def __init__(self, message: str, *, status: int, description: str, parameters: dict) -> None:
        retry_after = parameters.get("retry_after") if status == 429 else None
        super().__init__(
            message,
            permanent=400 <= status < 500 and status != 429,
            retry_after=float(retry_after) if retry_after else None,
        )
        self.status = status
        self.description = description
        self.parameters = parameters


THREAD_GONE = "message thread not found"
SAID_THREAD_GONE = (
    "Telegram no longer has this chat's topic, so the reply went to the group itself, "
    "outside any topic."
)


def _thread_gone_said(message: OutboxMessage) -> None:
    """Say in the chat that its reply left its lost topic, once per reply."""
    if message.conversation_id is None:
        return
    with transaction.atomic():
        chat = Conversation.objects.lock(message.conversation_id)
        entry_append(
            conversation=chat, role=EntryRole.CONCH, kind=EntryKind.NOTE, text=SAID_THREAD_GONE
        )
        events.publish_chat(chat)


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
        for index in range(message.parts_sent, len(parts)):
            self._send_part(token, message, parts[index], first=index == 0)
            outbox_part_sent(message=message)

    def _send_part(self, token: str, message: OutboxMessage, text: str, *, first: bool) -> None:
        """One part; cut smaller and sent again if Telegram finds it too long."""
        target = message.target
        body: dict[str, Any] = {"chat_id": target.get("chat_id"), "text": text}
        if target.get("message_thread_id") not in (None, ""):
            body["message_thread_id"] = target["message_thread_id"]
        if first and target.get("reply_to_message_id") not in (None, ""):
            body["reply_parameters"] = {
                "message_id": target["reply_to_message_id"],
                "allow_sending_without_reply": True,
            }
        try:
            self._call(token, "sendMessage", body)
        except TelegramRefused as exc:
            new_chat = exc.parameters.get("migrate_to_chat_id")
            if new_chat is not None and str(new_chat) != str(target.get("chat_id")):
                telegram_chat_migrate(
                    account_id=message.account_id,
                    old_chat_id=int(target["chat_id"]),
                    new_chat_id=int(new_chat),
                )
                message.target = {**target, "chat_id": int(new_chat)}
                return self._send_part(token, message, text, first=first)
            if THREAD_GONE in exc.description and "message_thread_id" in body:
                # The topic was deleted: the reply goes to the group itself, never lost,
                # and the chat says so.
                message.target = {
                    k: v for k, v in target.items() if k not in ("message_thread_id",)
                }
                OutboxMessage.objects.filter(pk=message.pk).update(target=message.target)
                _thread_gone_said(message)
                return self._send_part(token, message, text, first=first)
            if TOO_LONG in exc.description and len(text) > 1:
                halves = split_message(text, max(utf16_units(text) // 2, 1))
                for i, half in enumerate(halves):
                    self._send_part(token, message, half, first=first and i == 0)
                return None
            raise
        return None

    def _call(
        self, token: str, method: str, body: dict[str, Any], *, timeout: float = TIMEOUT
    ) -> dict[str, Any]:
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
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                answer = json.loads(exc.read() or b"{}")
            except ValueError:
                answer = {}
            if not isinstance(answer, dict):
                answer = {}
            description = scrub(str(answer.get("description") or exc.reason))
            parameters = answer.get("parameters")
            parameters = parameters if isinstance(parameters, dict) else {}
            words = (
                f"Telegram says slow down: {description}"
                if exc.code == 429
                else f"Telegram refused {method} ({exc.code}): {description}"
            )
            raise TelegramRefused(
                words, status=exc.code, description=description, parameters=parameters
            ) from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise DeliveryError(f"Telegram could not be reached: {scrub(str(exc))}") from None
        except ValueError:
            raise DeliveryError("Telegram answered with something that isn't JSON.") from None
        if not isinstance(answer, dict) or not answer.get("ok"):
            description = answer.get("description", "") if isinstance(answer, dict) else ""
            raise DeliveryError(
                f"Telegram refused {method}: {scrub(str(description))}", permanent=True
            )
        return answer


BUTTON_TIMEOUT = 5.0


def telegram_button_answer(account: ChannelAccount, callback_query_id: str) -> bool:
    """Answer a pressed button (``answerCallbackQuery``) so it stops spinning; whether
    Telegram took the answer. A failure is logged: the button stops on its own in time."""
    try:
        token = secret_readable(account.secret)
        if token:
            TelegramSender()._call(
                token,
                "answerCallbackQuery",
                {"callback_query_id": callback_query_id},
                timeout=BUTTON_TIMEOUT,
            )
            return True
    except (SecretsKeyError, DeliveryError) as exc:
        log.warning("telegram %s: a button's answer failed: %s", account.account_id, exc)
    return False


def telegram_bot_identify(account: ChannelAccount) -> str:
    """Ask Telegram who the account's bot is (``getMe``) and keep its @name. Returns the name.

    Raises :class:`DeliveryError` if Telegram can't be asked or won't say.
    """
    try:
        token = secret_readable(account.secret)
    except SecretsKeyError as exc:
        raise DeliveryError(str(exc)) from None
    if not token:
        raise DeliveryError(f"No bot token for the Telegram account {account.account_id!r}.")
    answer = TelegramSender()._call(token, "getMe", {})
    result = answer.get("result")
    username = result.get("username") if isinstance(result, dict) else None
    if not isinstance(username, str) or not username:
        raise DeliveryError("Telegram's getMe named no username.")
    ChannelAccount.objects.filter(pk=account.pk).update(bot_username=username)
    account.bot_username = username
    return username
