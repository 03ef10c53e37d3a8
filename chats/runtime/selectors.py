"""Reads: what the chat list, the tools and the watchers see. Query counts stay flat."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import QuerySet

from chats.models import Conversation, Status, Turn


@dataclass(frozen=True)
class RunningReply:
    number: int
    started_at: datetime
    folder: str
    place: str
    family: str
    step_started_at: datetime | None
    files_changed: tuple[str, ...]
    state: str
    started_by: str
    chain_id: str
    browser_open: bool = False


@dataclass(frozen=True)
class ChatSnapshot:
    """``ConversationManager.chats(...)``: a chat, and its running reply if it has one."""

    pk: int
    id: str
    title: str
    status: str
    origin: str
    origin_channel: str
    taint: str
    folder: str
    place: str
    archived: bool
    parent_id: int | None
    last_interaction_at: datetime
    reply: RunningReply | None = field(default=None)

    @property
    def working(self) -> bool:
        return self.status == Status.WORKING


_CHAT_FIELDS = (
    "pk",
    "public_id",
    "title",
    "status",
    "origin",
    "origin_channel",
    "taint",
    "folder",
    "place",
    "archived",
    "parent_id",
    "last_interaction_at",
)


def _reply_from(turn: dict) -> RunningReply:
    return RunningReply(
        number=turn["number"],
        started_at=turn["started_at"],
        folder=turn["folder"],
        place=turn["place"],
        family=turn["step_family"],
        step_started_at=turn["step_started_at"],
        files_changed=tuple(turn["files_changed"] or ()),
        state=turn["state"],
        started_by=turn["started_by"],
        chain_id=turn["chain_id"],
        browser_open=turn["browser_open"],
    )


_TURN_FIELDS = (
    "conversation_id",
    "number",
    "started_at",
    "folder",
    "place",
    "step_family",
    "step_started_at",
    "files_changed",
    "state",
    "started_by",
    "chain_id",
    "browser_open",
)


def chats_snapshot(
    *, owner_id: int, working: bool = False, chats: QuerySet | None = None, with_turns: bool = True
) -> list[ChatSnapshot]:
    """Every chat of this owner (or only those with a reply open), at most 2 queries.

    ``working=True`` reads only chats with a reply open: one query over the
    open turns, cheap enough for every step.
    """
    if working:
        rows = Turn.objects.filter(ended_at__isnull=True, conversation__owner_id=owner_id).values(
            *_TURN_FIELDS, *(f"conversation__{f}" for f in _CHAT_FIELDS if f != "pk")
        )
        snapshots = []
        for row in rows:
            chat = {f: row[f"conversation__{f}"] for f in _CHAT_FIELDS if f != "pk"}
            snapshots.append(_snapshot(row["conversation_id"], chat, _reply_from(row)))
        return snapshots
    base = chats if chats is not None else Conversation.objects.filter(owner_id=owner_id)
    chat_rows = list(base.values(*_CHAT_FIELDS))
    if not with_turns:
        return [_snapshot(row["pk"], row, None) for row in chat_rows]
    open_turns = {
        row["conversation_id"]: _reply_from(row)
        for row in Turn.objects.filter(
            ended_at__isnull=True, conversation__owner_id=owner_id
        ).values(*_TURN_FIELDS)
    }
    return [_snapshot(row["pk"], row, open_turns.get(row["pk"])) for row in chat_rows]


def _snapshot(pk: int, chat: dict, reply: RunningReply | None) -> ChatSnapshot:
    return ChatSnapshot(
        pk=pk,
        id=chat["public_id"],
        title=chat["title"],
        status=chat["status"],
        origin=chat["origin"],
        origin_channel=chat["origin_channel"],
        taint=chat["taint"],
        folder=chat["folder"],
        place=chat["place"],
        archived=chat["archived"],
        parent_id=chat["parent_id"],
        last_interaction_at=chat["last_interaction_at"],
        reply=reply,
    )


def open_turn(conversation: Conversation) -> Turn | None:
    return conversation.turns.filter(ended_at__isnull=True).first()
