"""An inbound message: its fields, and the one parser every door uses.

``POST /gateway/inbound``, ``manage.py conch_inbound`` and the Telegram
webhook all end in :func:`inbound_parse`, so the same body is refused the
same way everywhere, with the field at fault named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from chats.gateway.ladder import CHANNEL_PATTERN
from chats.gateway.models import ChatType
from chats.limits import LIMITS

DEFAULT_ACCOUNT = "default"

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

    ``peer`` is the sender. Which id a binding's ``peer`` is compared with is
    :attr:`routing_peer`: the sender in a DM, the group in a group, the thread
    in a thread, the job in a cron run (as OpenClaw's peer is the conversation).
    """

    channel: str
    chat_type: str
    message_id: str = ""
    text: str = ""
    account_id: str = DEFAULT_ACCOUNT
    peer: str = ""
    group_id: str = ""
    thread_id: str = ""
    parent_peer: str = ""
    guild_id: str = ""
    member_roles: tuple[str, ...] = ()
    team_id: str = ""
    job_id: str = ""

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
    def thread_parent(self) -> str:
        """A thread's parent conversation: the given parent peer, else its group."""
        if self.chat_type != ChatType.THREAD:
            return ""
        return self.parent_peer or self.group_id

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FIELDS} | {
            "member_roles": list(self.member_roles)
        }


def _text_field(raw: dict[str, Any], name: str, *, limit: int = LIMITS.inbound_id_chars) -> str:
    value = raw.get(name)
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InboundError(name, "must be text (or a whole number for an id).")
    value = text_check(str(value), name).strip()
    if len(value) > limit:
        raise InboundError(name, f"is at most {limit} characters.")
    if any(ord(ch) < 32 for ch in value):
        raise InboundError(name, "must not contain control characters.")
    return value


def inbound_parse(raw: Any) -> Inbound:
    """Check a body and make the :class:`Inbound`. Raises :class:`InboundError` naming the field."""
    if not isinstance(raw, dict):
        raise InboundError("body", "must be a JSON object.")
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise InboundError(
            unknown[0], f"is not a field of an inbound message ({', '.join(FIELDS)})."
        )

    channel = _text_field(raw, "channel", limit=32).lower()
    if not channel:
        raise InboundError("channel", "is required.")
    if not CHANNEL_PATTERN.match(channel):
        raise InboundError("channel", "must be letters, digits, - or _ (at most 32).")

    chat_type = raw.get("chat_type")
    if chat_type is None or chat_type == "":
        raise InboundError("chat_type", "is required.")
    if chat_type not in ChatType.values:
        raise InboundError("chat_type", f"must be one of: {', '.join(ChatType.values)}.")

    fields = {
        name: _text_field(raw, name)
        for name in (
            "account_id",
            "peer",
            "group_id",
            "thread_id",
            "parent_peer",
            "guild_id",
            "team_id",
            "job_id",
        )
    }
    fields["account_id"] = fields["account_id"] or DEFAULT_ACCOUNT
    if fields["account_id"] == "*":
        raise InboundError("account_id", "names one account; '*' is only for bindings.")

    message_id = _text_field(raw, "message_id", limit=LIMITS.inbound_message_id_chars)
    if not message_id:
        raise InboundError("message_id", "is required (it makes a repeated delivery harmless).")

    roles = raw.get("member_roles", [])
    if roles is None:
        roles = []
    if not isinstance(roles, list) or not all(
        isinstance(r, str | int) and not isinstance(r, bool) for r in roles
    ):
        raise InboundError("member_roles", "must be a list of role ids.")
    if len(roles) > LIMITS.inbound_roles:
        raise InboundError("member_roles", f"has at most {LIMITS.inbound_roles} roles.")
    roles = [text_check(str(r), "member_roles").strip() for r in roles]
    member_roles = tuple(sorted({r for r in roles if r}))
    if any(len(r) > LIMITS.inbound_id_chars for r in member_roles):
        raise InboundError(
            "member_roles", f"each role id is at most {LIMITS.inbound_id_chars} characters."
        )
    if any(any(ord(ch) < 32 for ch in r) for r in member_roles):
        raise InboundError("member_roles", "must not contain control characters.")
    if member_roles and not fields["guild_id"]:
        raise InboundError("member_roles", "roles belong to a guild: guild_id is required.")

    text = raw.get("text")
    if not isinstance(text, str):
        raise InboundError("text", "is required, as text.")
    text = text_check(text, "text").strip()
    if not text:
        raise InboundError("text", "needs some words.")
    if len(text) > LIMITS.inbound_text_chars:
        raise InboundError("text", f"is at most {LIMITS.inbound_text_chars} characters.")

    if chat_type in (ChatType.DM, ChatType.GROUP, ChatType.THREAD) and not fields["peer"]:
        raise InboundError("peer", f"is required for a {chat_type} (the sender).")
    if chat_type == ChatType.GROUP and not fields["group_id"]:
        raise InboundError("group_id", "is required for a group.")
    if chat_type == ChatType.THREAD:
        if not fields["thread_id"]:
            raise InboundError("thread_id", "is required for a thread.")
        if not (fields["group_id"] or fields["parent_peer"]):
            raise InboundError("parent_peer", "a thread needs its parent: parent_peer or group_id.")
    if chat_type == ChatType.CRON and not fields["job_id"]:
        raise InboundError("job_id", "is required for a cron run.")

    return Inbound(
        channel=channel,
        chat_type=chat_type,
        message_id=message_id,
        text=text,
        member_roles=member_roles,
        **fields,
    )
