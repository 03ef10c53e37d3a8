"""The workspace page's regions, rendered in one place.

The full page, the HTMX swap after a POST, the refetch after a gap, and the
socket push all render the same named partials of ``workspace.html``. The
views and the consumer call these functions; neither builds HTML itself.

Everything here reads (through the selectors) and renders. Model text stays
plain strings, so the template's autoescape covers it; the one exception is the
assistant's words, which the ``markdown`` filter renders and nh3 cleans
(chats/markdown.py). Nothing here is marked safe.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.template.loader import render_to_string

from chats import cards, events, hooks
from chats.models import Conversation, Inbound, Mode, Status, Turn, TurnState
from chats.runtime import selectors
from chats.tools.registry import THINKING

PAGE = "workspace.html"

# The chat page's regions that a change can touch, in page order.
CHAT_REGIONS = ("chat-title", "chat-settings", "chat-controls", "transcript")
# Events that change what a chat's row or page shows.
SHOWN_EVENTS = frozenset(
    {
        events.CONVERSATION_UPDATED,
        events.STATUS,
        events.CONVERSATION_DELETED,
        events.TASK_CHANGED,
    }
)


@dataclass(frozen=True)
class Badge:
    """A chat's state as the badge says it: "working" and what it is doing, or needs you…"""

    status: str
    label: str
    doing: str = ""
    since: datetime | None = None


def badge_for(status: str, *, family: str = "", step_started_at: datetime | None = None) -> Badge:
    label = Status(status).label if status in Status.values else status
    if status != Status.WORKING:
        return Badge(status, label)
    if family:
        return Badge(status, label, family, step_started_at)
    return Badge(status, label, THINKING)


def row_badge(row: selectors.ChatSnapshot) -> Badge:
    reply = row.reply
    return badge_for(
        row.status,
        family=reply.family if reply else "",
        step_started_at=reply.step_started_at if reply else None,
    )


def chat_badge(conversation: Conversation, open_turn: Turn | None) -> Badge:
    return badge_for(
        conversation.status,
        family=open_turn.step_family if open_turn else "",
        step_started_at=open_turn.step_started_at if open_turn else None,
    )


# ---------------------------------------------------------------------------
# Contexts


def with_held(rows: list[selectors.ChatSnapshot]) -> list[selectors.ChatSnapshot]:
    """The rows, each with what is held for the person in it ("1 held"): one query per app."""
    held = hooks.held_for_you([row.pk for row in rows]) if rows else {}
    return [replace(row, held=held[row.pk]) if row.pk in held else row for row in rows]


def list_context(*, owner_id: int, current_chat_id: str | None = None) -> dict[str, Any]:
    rows = with_held(selectors.chat_list_rows(owner_id=owner_id))
    return {
        "rows": rows,
        "current_chat_id": current_chat_id,
        # The tab's title counts these, "(2) Conch"; conch.js recounts the rows after a push.
        "needs_count": sum(1 for row in rows if row.needs_you),
    }


def transcript_context(*, conversation: Conversation) -> dict[str, Any]:
    """The transcript, with each card explained as it is now (chats/cards.py)."""
    blocks = selectors.chat_transcript(conversation=conversation)
    cards.cards_load(conversation=conversation, blocks=blocks)
    return {
        "chat": conversation,
        "blocks": blocks,
        "inbounds": Inbound.choices,
        "queued": selectors.chat_queued(conversation=conversation),
    }


def chat_context(*, conversation: Conversation) -> dict[str, Any]:
    open_turn = selectors.open_turn(conversation)
    pending = (
        open_turn
        if open_turn is not None
        and open_turn.state == TurnState.NEEDS_YOU
        and open_turn.pending_action
        else None
    )
    return {
        **transcript_context(conversation=conversation),
        "chat_badge": chat_badge(conversation, open_turn),
        "open_turn": open_turn,
        "pending": pending,
        "asked": conversation.status == Status.NEEDS_YOU and pending is None,
        "tasks": selectors.chat_tasks(conversation=conversation),
        "modes": Mode.choices,
    }


def page_context(*, owner_id: int, conversation: Conversation | None = None) -> dict[str, Any]:
    """Everything the full page shows. The sequence number is read first, so any
    change after it arrives with a higher number and is never mistaken for old."""
    seq = events.current_seq(owner_id)
    context = {
        "seq": seq,
        **list_context(
            owner_id=owner_id,
            current_chat_id=conversation.public_id if conversation else None,
        ),
    }
    if conversation is not None:
        context.update(chat_context(conversation=conversation))
    return context


# ---------------------------------------------------------------------------
# Rendering


def render_region(name: str, context: dict[str, Any]) -> str:
    return render_to_string(f"{PAGE}#{name}", context).strip()


def render_seq(seq: int, *, kind: str = "event") -> str:
    """The marker every push starts with; conch.js reads it to notice gaps."""
    return render_region("seq", {"seq": seq, "seq_kind": kind, "oob": True})


def render_list_bundle(*, owner_id: int, current_chat_id: str | None = None) -> str:
    context = {**list_context(owner_id=owner_id, current_chat_id=current_chat_id), "oob": True}
    return render_region("chat-list", context)


def render_chat_bundle(*, owner_id: int, conversation: Conversation) -> str:
    """The list and every region of one chat's page, as out-of-band swaps."""
    context = {
        **list_context(owner_id=owner_id, current_chat_id=conversation.public_id),
        **chat_context(conversation=conversation),
        "oob": True,
    }
    return "\n".join(render_region(name, context) for name in ("chat-list", *CHAT_REGIONS))


def render_error(slot: str, message: str) -> str:
    """A refusal, into the page's error slot (``flash`` or ``composer-error``)."""
    return render_region("error", {"slot": slot, "message": message, "oob": True})


def _owned_chat(owner_id: int, public_id: str) -> Conversation | None:
    return (
        Conversation.objects.select_related("agent")
        .filter(owner_id=owner_id, public_id=public_id)
        .first()
    )


def render_push(
    *,
    owner_id: int,
    event: str,
    seq: int,
    conversation_id: str | None,
) -> str:
    """What every tab of the owner gets for one event, the same bytes for each: the
    sequence marker, then, if the event can change its chat's row, that row alone."""
    parts = [render_seq(seq)]
    if conversation_id and (event in SHOWN_EVENTS or event in events.ROW_CARD_EVENT_TYPES):
        parts.append(render_row_push(owner_id=owner_id, conversation_id=conversation_id))
    return "\n".join(parts)


def render_push_for_chat(
    *,
    owner_id: int,
    event: str,
    conversation_id: str | None,
    data: dict[str, Any] | None = None,
) -> str:
    """What the tabs showing the event's chat add to :func:`render_push`, the same
    bytes for each: a reply's live words into its running reply, the transcript after
    a card changed, or every region of the chat's page ("deleted", once it is gone).
    Empty when the event shows nothing there, or the chat is not the owner's."""
    if not conversation_id:
        return ""
    if event == events.REPLY_TEXT:
        if not data or not data.get("turn"):
            return ""
        context = {"turn_number": data["turn"], "text": str(data.get("text", "")), "oob": True}
        return render_region("reply-text", context)
    if event not in events.CARD_EVENT_TYPES and event not in SHOWN_EVENTS:
        return ""
    conversation = _owned_chat(owner_id, conversation_id)
    if event in events.CARD_EVENT_TYPES:
        if conversation is None:
            return ""
        context = {**transcript_context(conversation=conversation), "oob": True}
        return render_region("transcript", context)
    if conversation is None:
        return render_region("chat-gone", {"oob": True})
    context = {**chat_context(conversation=conversation), "oob": True}
    return "\n".join(render_region(name, context) for name in CHAT_REGIONS)


def render_event(
    *,
    owner_id: int,
    event: str,
    seq: int,
    conversation_id: str | None,
    showing: str | None,
    data: dict[str, Any] | None = None,
) -> str:
    """What one tab, showing the chat ``showing`` (or none), is pushed for one event.

    The socket renders the two halves once for all the tabs it serves
    (chats/consumers.py); this joins them as it does.
    """
    push = render_push(owner_id=owner_id, event=event, seq=seq, conversation_id=conversation_id)
    if showing is None or showing != conversation_id:
        return push
    page = render_push_for_chat(
        owner_id=owner_id, event=event, conversation_id=conversation_id, data=data
    )
    return f"{push}\n{page}" if page else push


def render_row_push(*, owner_id: int, conversation_id: str) -> str:
    """One chat's sidebar row for every page's list, which conch.js puts in its place
    (``data-sort``) and marks if it is the tab's chat; a row no longer listed (deleted,
    archived) is taken away. A list never comes whole, whatever the number of chats."""
    row = selectors.chat_row(owner_id=owner_id, public_id=conversation_id)
    if row is None or not selectors.row_is_listed(row):
        return render_region("row-push", {"row": None, "gone_id": conversation_id})
    return render_region("row-push", {"row": with_held([row])[0]})
