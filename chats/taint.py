"""A chat's taint: what it has read from outside, or whose words are in it. It only grows.

:func:`taint_raise` is the one way it grows, for the tools that read from
outside, the gateway's doors and ``together`` alike.
"""

from __future__ import annotations

from django.db import transaction

from chats import events
from chats.models import TAINT_ORDER, Conversation, Taint


def taint_raise(*, conversation: Conversation, taint: str, why: str = "") -> bool:
    """Raise a chat's taint; it only ever grows. Returns whether it changed.

    Written with a conditional update so two raisers can't lower each other.
    """
    if TAINT_ORDER[Taint(taint)] <= TAINT_ORDER[Taint(conversation.taint)]:
        return False
    lower = [t for t, rank in TAINT_ORDER.items() if rank < TAINT_ORDER[Taint(taint)]]
    with transaction.atomic():
        changed = Conversation.objects.filter(pk=conversation.pk, taint__in=lower).update(
            taint=taint
        )
        if changed:
            conversation.taint = taint
            events.publish_chat(conversation, taint=taint, why=why)
    return bool(changed)
