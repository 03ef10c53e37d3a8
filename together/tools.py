"""The tools ``together`` gives the chats it offers them to, registered in ``chats.tools``."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from chats import events
from chats.models import EntryKind, EntryRole
from chats.runtime.services import entry_append
from chats.tools.registry import LOOKING_AT_CHATS, Tool, ToolContext, ToolResult, register
from together.listing import WHICH, ChatsLook, describe, list_chats
from together.visibility import offers_together


def chats_look_record(*, conversation, turn, look: ChatsLook) -> None:
    """The OtherChatsLook card in the chat that looked, and its ``chats.listed`` event."""
    rows = [
        {
            "id": r.id,
            "title": r.title,
            "state": r.state,
            "doing": r.doing,
            "changing": r.changing,
            "same_folder": r.same_folder,
            "folder": r.folder,
            "came_from": r.came_from,
            "untrusted": r.untrusted,
        }
        for r in look.rows
    ]
    data = {
        "card": "chats.listed",
        "working": look.working,
        "needs_you": look.needs_you,
        "rows": rows,
    }
    with transaction.atomic():
        entry_append(
            conversation=conversation,
            role=EntryRole.CONCH,
            kind=EntryKind.CARD,
            turn=turn,
            text=look.headline,
            data=data,
        )
        events.publish(
            events.CHATS_LISTED,
            owner_id=conversation.owner_id,
            conversation_id=conversation.public_id,
            data={"working": look.working, "needs_you": look.needs_you},
        )


def _list_chats(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    look = list_chats(conversation=ctx.conversation, which=args.get("which") or "all")
    chats_look_record(conversation=ctx.conversation, turn=ctx.turn, look=look)
    return ToolResult(describe(look))


LIST_CHATS = Tool(
    name="list_chats",
    description=(
        "See what the person's other chats are doing right now: which are working, in which folder, "
        "which files their running reply changed, and which need the person. which='working' lists only busy ones."
    ),
    schema={
        "type": "object",
        "properties": {"which": {"type": "string", "enum": list(WHICH), "default": "all"}},
        "additionalProperties": False,
    },
    family=LOOKING_AT_CHATS,
    effect="read",
    run=_list_chats,
    offered=offers_together,
)


def register_tools() -> None:
    register(LIST_CHATS)
