"""An inbound message: its fields, and the one parser every door uses.

``POST /gateway/inbound``, ``manage.py conch_inbound``, the Telegram webhook
and the routing playground all end in :func:`inbound_parse`, which checks the
body with one pydantic model (:class:`InboundBody`), so the same body is
refused the same way everywhere, with the field at fault named.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from chats.gateway.ids import CHANNEL, CRON, DEFAULT_ACCOUNT, DIRECT, GROUP, normalize_account_id
from chats.gateway.ladder import CHANNEL_PATTERN
from chats.gateway.models import ChatType
from chats.limits import LIMITS

# The kind of peer each chat type's routing peer is (a thread is a channel, as in OpenClaw).
PEER_KIND: dict[str, str] = {
    ChatType.DM: DIRECT,
    ChatType.GROUP: GROUP,
    ChatType.THREAD: CHANNEL,
    ChatType.CRON: CRON,
}

ERR_NOT_JSON = "must be JSON ({detail})."
ERR_TOO_DEEP = (
    f"is nested too deeply: at most {LIMITS.inbound_depth_levels} levels of objects and lists."
)
ERR_TOO_BIG = f"is too large: at most {LIMITS.inbound_body_bytes:,} bytes."
ERR_SURROGATE = "must be Unicode text: it holds a lone surrogate (an unpaired \\ud800-\\udfff)."
ERR_NUL = "must not contain NUL characters."

FIELDS = (
    "channel",
    "account_id",
    "peer",
    "sender_name",
    "chat_type",
    "group_id",
    "thread_id",
    "parent_peer",
    "guild_id",
    "member_roles",
    "team_id",
    "job_id",
    "message_id",
    "text",
    "group_name",
    "in_reply_to_name",
    "in_reply_to_text",
)


class InboundError(ValueError):
    """A body that can't be taken in. ``field`` names the part at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class BodyTooLarge(InboundError):
    """A body over :data:`LIMITS.inbound_body_bytes`: the web doors answer 413 rather than 400."""

    def __init__(self) -> None:
        super().__init__("body", ERR_TOO_BIG)


def _depth_over_limit(value: Any) -> bool:
    """Whether objects and lists nest deeper than the limit; iterative, so no depth can break it."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > LIMITS.inbound_depth_levels:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def inbound_json(raw: bytes | str) -> Any:
    """Decode a door's JSON body, refusing what can't be read or nests too deeply.

    Raises :class:`InboundError` naming ``body``. The size limit is the caller's
    to enforce, before it reads: by here the bytes are already in memory.
    """
    try:
        value = json.loads(raw or b"")
    except RecursionError:
        raise InboundError("body", ERR_TOO_DEEP) from None
    except ValueError as exc:  # bad bytes (UnicodeDecodeError), a 5,000-digit number…
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise InboundError("body", ERR_NOT_JSON.format(detail=detail)) from None
    if _depth_over_limit(value):
        raise InboundError("body", ERR_TOO_DEEP)
    return value


def text_check(value: str, field: str) -> str:
    """Refuse text no database can store as it is; returns it unchanged.

    JSON's ``\\ud800`` escapes decode to a lone surrogate, which has no UTF-8
    form, and PostgreSQL's text can't hold NUL: either would fail at the write.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InboundError(field, ERR_SURROGATE) from None
    if "\x00" in value:
        raise InboundError(field, ERR_NUL)
    return value


@dataclass(frozen=True, slots=True)
class Inbound:
    """One message from a chat app or a schedule, as the gateway routes it.

    ``peer`` is the sender, ``sender_name`` how they are called (a first name and
    @username, "the group's admins"), shown where several people talk; the id
    alone routes. Which id a binding's ``peer`` is compared with is
    :attr:`routing_peer`: the sender in a DM, the group in a group, the thread
    in a thread, the job in a cron run (as OpenClaw's peer is the conversation).
    """

    channel: str
    chat_type: str
    message_id: str = ""
    text: str = ""
    account_id: str = DEFAULT_ACCOUNT
    peer: str = ""
    sender_name: str = ""
    group_id: str = ""
    thread_id: str = ""
    parent_peer: str = ""
    guild_id: str = ""
    member_roles: tuple[str, ...] = ()
    team_id: str = ""
    job_id: str = ""
    # What a group is called on its app (a Telegram group's title): its session's title.
    group_name: str = ""
    # The message this one answers, when it answers one: who wrote it, and its words,
    # shown to the assistant fenced as that person's words.
    in_reply_to_name: str = ""
    in_reply_to_text: str = ""

    @property
    def routing_peer(self) -> str:
        if self.chat_type == ChatType.GROUP:
            return self.group_id
        if self.chat_type == ChatType.THREAD:
            return self.thread_id
        if self.chat_type == ChatType.CRON:
            return self.job_id
        return self.peer

    @property
    def peer_kind(self) -> str:
        """The kind of :attr:`routing_peer`: ``direct``, ``group``, ``channel`` or ``cron``."""
        return PEER_KIND[self.chat_type]

    @property
    def thread_parent(self) -> str:
        """A thread's parent conversation: the given parent peer, else its group."""
        if self.chat_type != ChatType.THREAD:
            return ""
        return self.parent_peer or self.group_id

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FIELDS} | {
            "member_roles": list(self.member_roles)
        }


@dataclass(frozen=True)
class Take:
    """What a chat app's payload asks, when it is a person's words: route them, and
    send the reply to ``reply_to`` (:func:`chats.gateway.outbox.reply_target`)."""

    inbound: Inbound
    reply_to: dict


@dataclass(frozen=True)
class Ignore:
    """Nothing for us; ``message_id`` is set when there was a message, to keep it in the admin."""

    reason: str
    message_id: str = ""


# The words for each refusal. A field's own words come first; pydantic's error
# types stand for the rules the model states (a type, a length, a pattern).
ERR_NOT_AN_OBJECT = "must be a JSON object."
ERR_UNKNOWN_FIELD = f"is not a field of an inbound message ({', '.join(FIELDS)})."
ERR_REQUIRED = "is required."
ERR_ID_TYPE = "must be text (or a whole number for an id)."
ERR_CONTROL = "must not contain control characters."
ERR_CHANNEL = "must be letters, digits, - or _ (at most 32)."
ERR_CHAT_TYPE = f"must be one of: {', '.join(ChatType.values)}."
ERR_ACCOUNT_STAR = "names one account; '*' is only for bindings."
ERR_MESSAGE_ID = "is required (it makes a repeated delivery harmless)."
ERR_ROLES = "must be a list of role ids."
ERR_TOO_MANY_ROLES = f"has at most {LIMITS.inbound_roles} roles."
ERR_ROLE_TOO_LONG = f"each role id is at most {LIMITS.inbound_id_chars} characters."
ERR_ROLES_NEED_GUILD = "roles belong to a guild: guild_id is required."
ERR_TEXT = "is required, as text."
ERR_NO_WORDS = "needs some words."
ERR_TOO_LONG = "is at most {max_length} characters."
ERR_PEER = "is required for a {chat_type} (the sender)."
ERR_GROUP_ID = "is required for a group."
ERR_THREAD_ID = "is required for a thread."
ERR_THREAD_PARENT = "a thread needs its parent: parent_peer or group_id."
ERR_JOB_ID = "is required for a cron run."


def _refuse(message: str, field: str | None = None) -> PydanticCustomError:
    """A refusal in our own words; ``field`` names it where pydantic can't (a model rule)."""
    return PydanticCustomError("inbound", "{why}", {"why": message, "field": field})


def _id_given(value: Any) -> Any:
    """An id as given: absent is empty, a whole number is its digits, text is checked
    for what no database stores. Anything else is left for the type to refuse."""
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str):
        try:
            return text_check(value, "")
        except InboundError as exc:
            raise _refuse(exc.message) from None
    return value


def _no_control(value: str) -> str:
    if any(ord(ch) < 32 for ch in value):
        raise _refuse(ERR_CONTROL)
    return value


def _channel_given(value: Any) -> Any:
    value = _id_given(value)
    return value.strip().lower() if isinstance(value, str) else value


def _text_given(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return text_check(value, "text")
        except InboundError as exc:
            raise _refuse(exc.message) from None
    return value


def _roles_given(value: Any) -> Any:
    return [] if value is None else value


def _roles_kept(roles: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted({role for role in roles if role}))


# Pydantic applies a field's annotations inside out: the constraints on the
# string first, then the after-validators; a before-validator, written last, runs
# before all of them, on the value as given.

# An id: whole numbers welcome, surrounding space dropped, no control characters.
Id = Annotated[
    str,
    StringConstraints(strict=True, strip_whitespace=True, max_length=LIMITS.inbound_id_chars),
    AfterValidator(_no_control),
    BeforeValidator(_id_given),
]
MessageId = Annotated[
    str,
    StringConstraints(
        strict=True, strip_whitespace=True, min_length=1, max_length=LIMITS.inbound_message_id_chars
    ),
    AfterValidator(_no_control),
    BeforeValidator(_id_given),
]
Channel = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=32, pattern=CHANNEL_PATTERN.pattern),
    BeforeValidator(_channel_given),
]
Roles = Annotated[
    tuple[Id, ...],
    Field(max_length=LIMITS.inbound_roles),
    AfterValidator(_roles_kept),
    BeforeValidator(_roles_given),
]
Text = Annotated[
    str,
    StringConstraints(
        strict=True, strip_whitespace=True, min_length=1, max_length=LIMITS.inbound_text_chars
    ),
    BeforeValidator(_text_given),
]
# Words that may be left out (the message a reply answers).
MaybeText = Annotated[
    str,
    StringConstraints(strict=True, strip_whitespace=True, max_length=LIMITS.inbound_text_chars),
    BeforeValidator(_text_given),
]


class InboundBody(BaseModel):
    """An inbound message's body, as every door takes it. Fields are checked in this
    order, and the first one at fault is named; unknown fields before any."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    channel: Channel
    chat_type: ChatType
    account_id: Id = DEFAULT_ACCOUNT
    peer: Id = ""
    sender_name: Id = ""
    group_id: Id = ""
    thread_id: Id = ""
    parent_peer: Id = ""
    guild_id: Id = ""
    team_id: Id = ""
    job_id: Id = ""
    message_id: MessageId
    member_roles: Roles = ()
    text: Text
    group_name: Id = ""
    in_reply_to_name: Id = ""
    in_reply_to_text: MaybeText = ""

    @field_validator("account_id")
    @classmethod
    def _one_account(cls, value: str) -> str:
        if value == "*":
            raise _refuse(ERR_ACCOUNT_STAR)
        return normalize_account_id(value)

    @model_validator(mode="after")
    def _what_each_chat_type_needs(self) -> InboundBody:
        if self.member_roles and not self.guild_id:
            raise _refuse(ERR_ROLES_NEED_GUILD, "member_roles")
        kind = self.chat_type
        if kind in (ChatType.DM, ChatType.GROUP, ChatType.THREAD) and not self.peer:
            raise _refuse(ERR_PEER.format(chat_type=kind.value), "peer")
        if kind == ChatType.GROUP and not self.group_id:
            raise _refuse(ERR_GROUP_ID, "group_id")
        if kind == ChatType.THREAD:
            if not self.thread_id:
                raise _refuse(ERR_THREAD_ID, "thread_id")
            if not (self.group_id or self.parent_peer):
                raise _refuse(ERR_THREAD_PARENT, "parent_peer")
        if kind == ChatType.CRON and not self.job_id:
            raise _refuse(ERR_JOB_ID, "job_id")
        return self


# Words for pydantic's own error types, by field (``None``: any field).
_WORDS: dict[tuple[str | None, str], str] = {
    (None, "missing"): ERR_REQUIRED,
    (None, "string_type"): ERR_ID_TYPE,
    (None, "string_too_long"): ERR_TOO_LONG,
    ("channel", "string_too_short"): ERR_REQUIRED,
    ("channel", "string_pattern_mismatch"): ERR_CHANNEL,
    ("chat_type", "enum"): ERR_CHAT_TYPE,
    ("message_id", "missing"): ERR_MESSAGE_ID,
    ("message_id", "string_too_short"): ERR_MESSAGE_ID,
    ("member_roles", "tuple_type"): ERR_ROLES,
    ("member_roles", "string_type"): ERR_ROLES,
    ("member_roles", "too_long"): ERR_TOO_MANY_ROLES,
    ("member_roles", "string_too_long"): ERR_ROLE_TOO_LONG,
    ("text", "missing"): ERR_TEXT,
    ("text", "string_type"): ERR_TEXT,
    ("text", "string_too_short"): ERR_NO_WORDS,
}


def _refusal(exc: ValidationError) -> InboundError:
    """The first fault, in the gateway's words, naming its field."""
    errors = exc.errors(include_url=False)
    unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
    if unknown:
        return InboundError(unknown[0], ERR_UNKNOWN_FIELD)
    error = errors[0]
    context = error.get("ctx") or {}
    field = str(error["loc"][0]) if error["loc"] else context.get("field") or "body"
    if error["type"] == "inbound":
        return InboundError(field, context["why"])
    if field == "chat_type" and error.get("input") in (None, ""):
        return InboundError(field, ERR_REQUIRED)
    words = _WORDS.get((field, error["type"])) or _WORDS.get((None, error["type"]))
    if words is None:
        return InboundError(field, error["msg"] + ".")
    return InboundError(field, words.format(**context))


def inbound_parse(raw: Any) -> Inbound:
    """Check a body and make the :class:`Inbound`. Raises :class:`InboundError` naming the field."""
    if not isinstance(raw, dict):
        raise InboundError("body", ERR_NOT_AN_OBJECT)
    try:
        body = InboundBody.model_validate(raw)
    except ValidationError as exc:
        raise _refusal(exc) from None
    fields = {name: getattr(body, name) for name in FIELDS}
    return Inbound(**fields | {"chat_type": body.chat_type.value})
