"""What ``conch_play`` (``chats/play.py``) asks of ``together``.

``chats`` never imports ``together``, so the play looks this module up by
name when the app is installed. It holds everything the play needs to know
about ADR 0134's records: the person's presses on held message cards, and
the message cards, waits and chains it reports. Everything here reads or
writes through ``together``'s own services; a press is the same
``held_message_pass`` / ``held_message_dismiss`` the page's button calls.

Ids are whatever the records hold (``m_1``, ``chain_1``, ``t_1`` inside
``counted_ids()``); nothing here prints a time, so a report stays the same
bytes every run.
"""

from __future__ import annotations

from typing import Any

from chats.models import Conversation, EntryKind, Turn
from chats.runtime.chats import ConchError
from together.messages import CHAT_MESSAGE, held_message_dismiss, held_message_pass
from together.models import Chain, ChainPair, ChatMessage, Wait

# The event each change of a message's state is published as: the report's message history.
MESSAGE_EVENT = CHAT_MESSAGE
PASS = "pass"
DISMISS = "dismiss"
PRESSES = {PASS: held_message_pass, DISMISS: held_message_dismiss}

ERR_NOT_COME_YET = "message {number} hasn't come to this chat yet ({came} came so far)."


def arrived(chat: Conversation) -> list[ChatMessage]:
    """The messages that came to ``chat``, in the order they arrived: message 1, 2, …"""
    return list(ChatMessage.objects.filter(receiver=chat).order_by("pk"))


def held_press(*, chat: Conversation, number: int, action: str) -> ChatMessage:
    """The person presses Pass it on or Dismiss on the ``number``-th message that came to ``chat``.

    Raises ConchError if it hasn't come yet, or isn't held any more.
    """
    came = arrived(chat)
    if not 1 <= number <= len(came):
        raise ConchError(ERR_NOT_COME_YET.format(number=number, came=len(came)))
    return PRESSES[action](message=came[number - 1])


def _reply_number(turn_pk: int | None, numbers: dict[int, int]) -> int | None:
    return numbers.get(turn_pk) if turn_pk is not None else None


def chat_messages(chat: Conversation) -> list[dict[str, Any]]:
    """The chat's ``chat.message`` cards, in its transcript's order, each with its message as it is now.

    ``number`` is the message's place among those that came to this chat (the
    number a press names); it is None on the sending side.
    """
    cards = list(
        chat.entries.filter(kind=EntryKind.CARD, data__card="chat.message").order_by("seq")
    )
    ids = [card.data.get("message_id") for card in cards]
    messages = {m.message_id: m for m in ChatMessage.objects.filter(message_id__in=ids)}
    numbers = {m.message_id: n for n, m in enumerate(arrived(chat), start=1)}
    turns = dict(
        Turn.objects.filter(
            pk__in=[m.read_in_turn_id for m in messages.values() if m.read_in_turn_id]
        ).values_list("pk", "number")
    )
    rows = []
    for card in cards:
        message = messages.get(card.data.get("message_id"))
        if message is None:
            continue
        to = card.data.get("side") == "to"
        rows.append(
            {
                "id": message.message_id,
                "side": "to" if to else "from",
                "number": None if to else numbers.get(message.message_id),
                "chat": message.receiver_public_id if to else message.sender_public_id,
                "title": message.receiver_title if to else message.sender_title,
                "card": card.text,
                "text": message.text,
                "start_reply": message.start_reply,
                "chain": message.chain_id,
                "state": message.state,
                "reason": message.reason,
                "passed_on": message.passed_on_at is not None,
                "read_in_reply": _reply_number(message.read_in_turn_id, turns),
            }
        )
    return rows


def chat_waits(chat: Conversation) -> list[dict[str, Any]]:
    """The chat's waits (``wait_for``), oldest first: what for, and how each ended."""
    return [
        {
            "kind": wait.kind,
            "target": wait.target_public_id,
            "title": wait.target_title,
            "chain": wait.chain_id,
            "state": wait.state,
            "headline": wait.outcome.get("headline", ""),
            "bare": bool(wait.outcome.get("bare", False)),
        }
        for wait in Wait.objects.filter(waiter=chat).order_by("pk")
    ]


def _chain_order(chain_id: str) -> tuple[int, str]:
    return (len(chain_id), chain_id)  # chain_2 before chain_10


def chains() -> list[dict[str, Any]]:
    """Every chain that sent a message: its counts against MESSAGE_LIMITS, and each pair's."""
    ids = dict(Conversation.objects.values_list("pk", "public_id"))
    pairs: dict[str, list[dict[str, Any]]] = {}
    for pair in ChainPair.objects.order_by("pk"):
        if pair.count:
            pairs.setdefault(pair.chain_id, []).append(
                {
                    "from": ids.get(pair.sender_pk, "(deleted)"),
                    "to": ids.get(pair.receiver_pk, "(deleted)"),
                    "count": pair.count,
                }
            )
    return [
        {
            "id": chain.id,
            "messages": chain.messages,
            "replies_started": chain.replies_started,
            "pairs": pairs.get(chain.id, []),
        }
        for chain in sorted(Chain.objects.all(), key=lambda c: _chain_order(c.id))
    ]
