"""What ADR 0134's cards show in a chat's transcript, as they are now.

Each card is an ``Entry`` of kind ``card`` written when something happened
(a look at the other chats, a message, a wait, a stop). What it shows is read
here when the transcript is rendered, so a card is kept current: a message's
card says the message's state *now*, a wait's says how it ended once it has.
Each loader reads every card of its kind in one query (``chats.cards``), and
a card links to another chat only while that chat exists and is the owner's.

Every string here is a plain string: the template's autoescape covers it, and
the partials put words that came from a model under ``hx-disable``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from django.urls import reverse

from chats.hooks import card_loader_add
from chats.models import Conversation, Entry, Status
from chats.timeline import rises_to_person
from together.listing import ChatsLook
from together.messages import WHY_SOMEONE_ELSES_WORDS
from together.models import ChatMessage, MessageState, Wait, WaitKind, WaitState

LOOK = "chats.listed"
MESSAGE = "chat.message"
WAIT = "wait"
STOPPED = "chat.stopped"


@dataclass(frozen=True)
class ChatRef:
    """Another chat as a card names it: its title, and its id while it can be opened."""

    title: str
    id: str | None = None


def _open_chats(owner_id: int, ids: set[str]) -> dict[str, str]:
    """Which of these chats still exist and are this owner's, with their titles now: one query."""
    ids.discard("")
    if not ids:
        return {}
    return dict(
        Conversation.objects.filter(owner_id=owner_id, public_id__in=ids).values_list(
            "public_id", "title"
        )
    )


def _ref_to(chat: Conversation | None, *, owner_id: int, title: str) -> ChatRef:
    """A chat the card's row points at (a foreign key, set to null when it was deleted)."""
    if chat is None or chat.owner_id != owner_id:
        return ChatRef(title=title)
    return ChatRef(title=chat.title, id=chat.public_id)


def _data(entry: Entry) -> dict:
    return entry.data if isinstance(entry.data, dict) else {}


# ---------------------------------------------------------------------------
# OtherChatsLook: "Checked on your other chats · 1 working · 1 needs you"


@dataclass(frozen=True)
class LookRow:
    chat: ChatRef
    state: str
    state_label: str
    doing: str
    changing: str
    folder: str
    came_from: str
    untrusted: bool


@dataclass(frozen=True)
class LookCard:
    headline: str
    rows: tuple[LookRow, ...]
    kind: str = "look"


def _state_label(state: str) -> str:
    return Status(state).label if state in Status.values else str(state)


def load_looks(conversation: Conversation, entries: list[Entry]) -> Mapping[int, LookCard]:
    rows_of = {
        entry.pk: [r for r in _data(entry).get("rows", []) if isinstance(r, dict)]
        for entry in entries
    }
    open_chats = _open_chats(
        conversation.owner_id, {str(r.get("id") or "") for rows in rows_of.values() for r in rows}
    )
    cards = {}
    for entry in entries:
        data = _data(entry)
        look = ChatsLook(
            rows=(),
            working=int(data.get("working") or 0),
            needs_you=int(data.get("needs_you") or 0),
        )
        rows = tuple(
            LookRow(
                # The title as it was when the chat looked: the row is that moment's.
                chat=ChatRef(
                    title=str(r.get("title") or "untitled"),
                    id=r["id"] if r.get("id") in open_chats else None,
                ),
                state=str(r.get("state") or ""),
                state_label=_state_label(str(r.get("state") or "")),
                doing=str(r.get("doing") or "") if r.get("state") == Status.WORKING else "",
                changing=str(r.get("changing") or ""),
                folder="" if r.get("same_folder") else str(r.get("folder") or ""),
                came_from=str(r.get("came_from") or ""),
                untrusted=bool(r.get("untrusted")),
            )
            for r in rows_of[entry.pk]
        )
        cards[entry.pk] = LookCard(headline=look.headline, rows=rows)
    return cards


# ---------------------------------------------------------------------------
# ChatMessageCard: "To “Fix the login”", "From “Release notes” · another chat, not you"


@dataclass(frozen=True)
class MessageCard:
    message_id: str
    side: str  # "to": this chat sent it; "from": it came to this chat
    other: ChatRef
    words: str
    state: str
    state_label: str
    reason: str
    asks_for_reply: bool
    kind: str = "message"
    # Not delivered because someone else's words came into the chat it went to: the rise
    # in that chat's trust timeline that brought them (on this page, or on that chat's).
    rise_href: str = ""

    @property
    def came_here(self) -> bool:
        return self.side == "from"

    @property
    def held_here(self) -> bool:
        """Only the chat it was sent to offers Pass it on and Dismiss."""
        return self.came_here and self.state == MessageState.HELD


def _message_state_label(message: ChatMessage, *, side: str) -> str:
    """The card's badge: the message's state now, and for one not read yet, what happens
    next from where this card stands (never just "waiting")."""
    if message.state == MessageState.WAITING:
        how = "passed on" if message.passed_on_at else "sent"
        if side == "to":
            return f"{how}: not read yet"
        how = "passed on" if message.passed_on_at else "not read yet"
        if message.start_reply:
            return f"{how}: a reply here starts with it"
        return f"{how}: this chat reads it when it next works"
    return (
        MessageState(message.state).label if message.state in MessageState.values else message.state
    )


def load_messages(conversation: Conversation, entries: list[Entry]) -> Mapping[int, MessageCard]:
    ids = {str(_data(e).get("message_id")) for e in entries if _data(e).get("message_id")}
    messages = {
        m.message_id: m
        for m in ChatMessage.objects.filter(message_id__in=ids).select_related("sender", "receiver")
    }
    owner_id = conversation.owner_id
    rises = rises_to_person(
        {
            m.receiver_id
            for m in messages.values()
            if _not_delivered_for_trust(m) and m.receiver_id is not None
        }
    )
    cards = {}
    for entry in entries:
        data = _data(entry)
        message = messages.get(str(data.get("message_id")))
        side = data.get("side")
        if message is None or side not in ("to", "from"):
            continue
        # A card belongs to the chat on its side of the message, and to no other.
        if side == "to" and message.sender_id != conversation.pk:
            continue
        if side == "from" and message.receiver_id != conversation.pk:
            continue
        if side == "to":
            other = _ref_to(message.receiver, owner_id=owner_id, title=message.receiver_title)
        else:
            other = _ref_to(message.sender, owner_id=owner_id, title=message.sender_title)
        cards[entry.pk] = MessageCard(
            message_id=message.message_id,
            side=side,
            other=other,
            words=message.text,
            state=message.state,
            state_label=_message_state_label(message, side=side),
            reason=message.reason
            if message.state in (MessageState.REFUSED, MessageState.NOT_DELIVERED)
            else "",
            asks_for_reply=message.start_reply,
            rise_href=_rise_href(message, other, rises, here=side == "from"),
        )
    return cards


def _not_delivered_for_trust(message: ChatMessage) -> bool:
    return message.state == MessageState.NOT_DELIVERED and message.reason == WHY_SOMEONE_ELSES_WORDS


def _rise_href(
    message: ChatMessage, receiver: ChatRef, rises: Mapping[int, tuple], *, here: bool
) -> str:
    """The receiver's rise that brought someone else's words in, if that is why the
    message wasn't delivered: on this page for the receiver's card, else on the
    receiver's page while it is the owner's."""
    rise = rises.get(message.receiver_id or 0)
    if not _not_delivered_for_trust(message) or rise is None:
        return ""
    anchor = f"#rise-{rise[0]}"
    if here:
        return anchor
    return reverse("chats:chat", args=[receiver.id]) + anchor if receiver.id else ""


# ---------------------------------------------------------------------------
# WaitNote: "Waiting for “Fix the login”", then how it ended


@dataclass(frozen=True)
class WaitCard:
    target: ChatRef
    what: str  # "chat" or "task"
    state: str
    headline: str
    kind: str = "wait"

    @property
    def waiting(self) -> bool:
        return self.state == WaitState.WAITING


def _wait_target(wait: Wait, owner_id: int) -> ChatRef:
    if wait.kind == WaitKind.CHAT:
        return _ref_to(wait.target_chat, owner_id=owner_id, title=wait.target_title)
    task_chat = wait.target_task.chat if wait.target_task is not None else None
    ref = _ref_to(task_chat, owner_id=owner_id, title=wait.target_title)
    return ChatRef(title=wait.target_title, id=ref.id)


def load_waits(conversation: Conversation, entries: list[Entry]) -> Mapping[int, WaitCard]:
    pks = {_data(e).get("wait") for e in entries}
    waits = {
        w.pk: w
        for w in Wait.objects.filter(
            pk__in=[pk for pk in pks if isinstance(pk, int)], waiter=conversation
        ).select_related("target_chat", "target_task__chat")
    }
    cards = {}
    for entry in entries:
        wait = waits.get(_data(entry).get("wait", 0))
        if wait is None:
            continue
        target = _wait_target(wait, conversation.owner_id)
        if wait.state == WaitState.WOKEN:
            headline = (wait.outcome or {}).get("headline") or f"“{wait.target_title}” is done"
        elif wait.state == WaitState.CANCELLED:
            headline = f"Stopped waiting for “{wait.target_title}”"
        else:
            headline = f"Waiting for “{wait.target_title}”"
        cards[entry.pk] = WaitCard(
            target=target, what=wait.kind, state=wait.state, headline=str(headline)
        )
    return cards


# ---------------------------------------------------------------------------
# Stopped by another chat


@dataclass(frozen=True)
class StoppedCard:
    by: ChatRef
    reason: str
    kind: str = "stopped"


def load_stops(conversation: Conversation, entries: list[Entry]) -> Mapping[int, StoppedCard]:
    open_chats = _open_chats(
        conversation.owner_id, {str(_data(e).get("by") or "") for e in entries}
    )
    cards = {}
    for entry in entries:
        data = _data(entry)
        by = str(data.get("by") or "")
        if by in open_chats:
            ref = ChatRef(title=open_chats[by], id=by)
        else:
            ref = ChatRef(title=str(data.get("by_title") or "another chat"))
        cards[entry.pk] = StoppedCard(by=ref, reason=str(data.get("reason") or ""))
    return cards


def register_cards() -> None:
    card_loader_add(LOOK, load_looks)
    card_loader_add(MESSAGE, load_messages)
    card_loader_add(WAIT, load_waits)
    card_loader_add(STOPPED, load_stops)
