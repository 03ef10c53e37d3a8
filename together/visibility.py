"""Who may look at your other chats, and which chats are yours (ADR 0059 as ADR 0134 restates it).

``offers_together`` is the rule for every tool that looks across chats
(``list_chats``, ``wait_for`` a chat, ``message_chat``, ``stop_chat``, and
reading past chats): a chat you're in, or your own chat from a chat app.
``is_yours`` is which chats those tools may see or touch at all. A chat that
isn't yours looks like no chat: it is never listed, counted, waited on or
written to.
"""

from __future__ import annotations

from django.db.models import Q

from chats.models import Conversation, Origin, Taint

# Chats that are never yours to look at or act on, whoever owns the row.
NOT_YOURS_ORIGINS = (Origin.PEER, Origin.CLIENT, Origin.ARTIFACT)
# Chats never offered the tools that look across chats.
NOT_OFFERED_ORIGINS = (Origin.ROUTINE, Origin.TASK, *NOT_YOURS_ORIGINS)


def offers_together(conversation: Conversation) -> bool:
    """A chat you're in, or your own chat from a chat app; never one with someone else's words."""
    if conversation.taint == Taint.PERSON:
        return False
    return conversation.origin in (Origin.OWN, Origin.CHAT_APP)


def is_yours(conversation: Conversation, *, owner_id: int) -> bool:
    """Yours: the same owner, not an outside agent's, another app's or an artifact's, no one else's words."""
    return (
        conversation.owner_id == owner_id
        and conversation.origin not in NOT_YOURS_ORIGINS
        and conversation.taint != Taint.PERSON
    )


def yours_q(owner_id: int, prefix: str = "") -> Q:
    """``is_yours`` as a filter, so a count never includes a chat that isn't yours."""
    return (
        Q(**{f"{prefix}owner_id": owner_id})
        & ~Q(**{f"{prefix}origin__in": NOT_YOURS_ORIGINS})
        & ~Q(**{f"{prefix}taint": Taint.PERSON})
    )
