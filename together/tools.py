"""The tools ``together`` gives the chats it offers them to, registered in ``chats.tools``."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from chats import events
from chats.limits import LIMITS
from chats.models import Effect, EntryKind, EntryRole
from chats.runtime.chats import ConchError, entry_append
from chats.tools.registry import (
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    register,
)
from together.listing import CHATS_LISTED, LOOKING_AT_CHATS, WHICH, ChatsLook, describe, list_chats
from together.messages import MESSAGING_A_CHAT, message_chat, stop_asks_first, stop_chat
from together.past import READ_CHAT, SEARCH_CHATS
from together.visibility import offers_together
from together.waits import WAITING, wait_for


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
            CHATS_LISTED,
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
    effect=Effect.READ,
    run=_list_chats,
    offered=offers_together,
)


# ---------------------------------------------------------------------------
# wait_for, message_chat, stop_chat


def _wait_for(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """The wait is made in the step's last transaction, with the reply letting go (ADR 0134,
    no crash window): a crash can't leave a stored wait whose reply is played again."""

    def begin() -> ToolResult:
        try:
            answer = wait_for(
                waiter=ctx.conversation,
                turn=ctx.turn,
                kind=args["kind"],
                target_id=args["id"],
                step_id=ctx.step_id,
            )
        except ConchError as exc:
            raise ToolError(str(exc)) from None
        if answer.let_go:
            ctx.let_go = answer.text
        return ToolResult(answer.text)

    ctx.at_step_end = begin
    return ToolResult("")


def _message_chat(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    try:
        sent = message_chat(
            sender=ctx.conversation,
            turn=ctx.turn,
            chat_id=args["chat"],
            text=args["text"],
            start_reply=bool(args.get("start_reply")),
        )
    except ConchError as exc:
        raise ToolError(str(exc)) from None
    return ToolResult(sent.answer)


def _stop_chat(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    try:
        return ToolResult(
            stop_chat(
                sender=ctx.conversation, turn=ctx.turn, chat_id=args["chat"], reason=args["reason"]
            )
        )
    except ConchError as exc:
        raise ToolError(str(exc)) from None


def _stop_asks_first(conversation) -> bool:
    return stop_asks_first(conversation)


WAIT_FOR = Tool(
    name="wait_for",
    description=(
        "Wait, without using the model, until another of the person's chats stops working (kind 'chat', its id "
        "from list_chats) or a task this chat started is done (kind 'task'). This reply ends now; a new one "
        "starts when it's done, with how it ended. Survives a restart."
    ),
    schema={
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": ["chat", "task"]},
            "id": {"type": "string", "minLength": 1, "maxLength": LIMITS.id_chars},
        },
        "required": ["kind", "id"],
        "additionalProperties": False,
    },
    family=WAITING,
    effect=Effect.READ,
    run=_wait_for,
    offered=offers_together,
)
MESSAGE_CHAT = Tool(
    name="message_chat",
    description=(
        "Send a message to another of the person's chats (its id from list_chats). It reads it at its next step, "
        "or when its next reply starts; start_reply starts that reply now. Bounded: a chain of replies may send "
        "8 messages and start 4 replies in all."
    ),
    schema={
        "type": "object",
        "properties": {
            "chat": {"type": "string", "minLength": 1, "maxLength": LIMITS.id_chars},
            "text": {"type": "string", "minLength": 1, "maxLength": LIMITS.message_chars},
            "start_reply": {"type": "boolean", "default": False},
        },
        "required": ["chat", "text"],
        "additionalProperties": False,
    },
    family=MESSAGING_A_CHAT,
    effect=Effect.WRITE,
    run=_message_chat,
    offered=offers_together,
)
STOP_CHAT = Tool(
    name="stop_chat",
    description="Stop another of the person's chats' running reply, saying why. It hears why at its next reply.",
    schema={
        "type": "object",
        "properties": {
            "chat": {"type": "string", "minLength": 1, "maxLength": LIMITS.id_chars},
            "reason": {"type": "string", "minLength": 1, "maxLength": LIMITS.stop_reason_chars},
        },
        "required": ["chat", "reason"],
        "additionalProperties": False,
    },
    family=MESSAGING_A_CHAT,
    effect=Effect.WRITE,
    run=_stop_chat,
    offered=offers_together,
    asks_first=_stop_asks_first,
)


def register_tools() -> None:
    for tool in (LIST_CHATS, WAIT_FOR, MESSAGE_CHAT, STOP_CHAT):
        register(tool)
    # Reading past chats (together.past).
    register(SEARCH_CHATS)
    register(READ_CHAT)
