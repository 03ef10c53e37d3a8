"""A chat's taint: what it has read from outside, or whose words are in it. It only grows.

:func:`taint_raise` is the one way it grows, for the tools that read from
outside (through :func:`taint_outside`, which gives every outside read its one level),
the gateway's doors and ``together`` alike. Each rise is written down
where it happens, in the same transaction, as a :class:`~chats.models.TaintRise`
with its :class:`Cause`: the chat's trust timeline, which says why a chat is
careful. A chat made careful from its start (a task of a careful chat, a chat
app's group) is written down by :func:`taint_rise_record` as it is made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from chats import events
from chats.models import TAINT_ORDER, Conversation, Taint, TaintCause, TaintRise, Turn


@dataclass(frozen=True)
class Cause:
    """Why a taint rises: what came in, and where from. Build one with the constructors below.

    ``source`` is the chat the taint came from; its own latest rise at that moment is
    kept beside this one, so the timeline can say why that chat was careful in turn.
    """

    kind: TaintCause
    url: str = ""
    path: str = ""
    source: Conversation | None = None
    turn: Turn | None = None
    step_id: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def page(cls, url: str, *, turn: Turn | None = None, step: int | None = None) -> Cause:
        return cls(TaintCause.PAGE, url=url, turn=turn, step_id=step)

    @classmethod
    def message(
        cls, source: Conversation | None, *, message_id: str, turn: Turn | None = None
    ) -> Cause:
        return cls(TaintCause.MESSAGE, source=source, turn=turn, detail={"message": message_id})

    @classmethod
    def wait(
        cls, source: Conversation, *, turn: Turn | None = None, step: int | None = None
    ) -> Cause:
        return cls(TaintCause.WAIT, source=source, turn=turn, step_id=step)

    @classmethod
    def task(
        cls, source: Conversation | None, *, task_id: str, turn: Turn | None = None, step=None
    ) -> Cause:
        return cls(
            TaintCause.TASK, source=source, turn=turn, step_id=step, detail={"task": task_id}
        )

    @classmethod
    def chat_read(
        cls,
        source: Conversation | None,
        *,
        chat_id: str,
        turn: Turn | None = None,
        step: int | None = None,
    ) -> Cause:
        return cls(
            TaintCause.CHAT_READ, source=source, turn=turn, step_id=step, detail={"chat": chat_id}
        )

    @classmethod
    def routine(cls, source: Conversation, *, routine_id: str, name: str) -> Cause:
        return cls(TaintCause.ROUTINE, source=source, detail={"routine": routine_id, "name": name})

    @classmethod
    def stranger(cls, *, channel: str, sender: str, message_id: str = "") -> Cause:
        """Someone else's words: the chat app, who wrote them, and that app's id of the
        message that carried them in (the chat's own transcript holds its words)."""
        detail = {"channel": channel, "sender": sender}
        if message_id:
            detail["message"] = message_id
        return cls(TaintCause.STRANGER, detail=detail)

    @classmethod
    def imported(
        cls,
        *,
        archive: str,
        claimed: str = "",
        claims: list[dict[str, Any]] | None = None,
        claims_left_out: int = 0,
    ) -> Cause:
        """An archive's sessions imported: the taint it claimed, and the timeline it claimed,
        as it states it (``chats.gateway.interop.timeline_claims``), never as the record."""
        detail: dict[str, Any] = {"archive": archive, "claimed": claimed, "claims": claims or []}
        if claims_left_out:
            detail["claims_left_out"] = claims_left_out
        return cls(TaintCause.IMPORT, detail=detail)

    @classmethod
    def mcp(
        cls, *, server: str, tool: str, url: str = "", turn: Turn | None = None, step=None
    ) -> Cause:
        return cls(
            TaintCause.MCP,
            url=url,
            turn=turn,
            step_id=step,
            detail={"server": server, "tool": tool},
        )

    @classmethod
    def command_network(
        cls, *, sandboxed: bool, turn: Turn | None = None, step: int | None = None
    ) -> Cause:
        """A command that could reach the network: in the sandbox with the network its
        persona allows, or without the sandbox (``sandboxed`` says which)."""
        return cls(
            TaintCause.COMMAND_NETWORK, turn=turn, step_id=step, detail={"sandboxed": sandboxed}
        )

    @classmethod
    def parent(cls, parent: Conversation) -> Cause:
        return cls(TaintCause.PARENT, source=parent)

    @classmethod
    def previous(cls, previous: Conversation) -> Cause:
        return cls(TaintCause.PREVIOUS, source=previous)

    def words(self) -> str:
        """The cause in a few of Conch's words, for the chat's event."""
        return str(TaintCause(self.kind).label)


def taint_outside(*, conversation: Conversation, cause: Cause) -> bool:
    """Mark a chat as reading from outside, before it reads: a web page, an MCP tool's
    answer, a command that could reach the network. Every such read gives the same
    level, ``untrusted``, kept here; a chat already careful stays as it is (it only grows).
    """
    return taint_raise(conversation=conversation, taint=Taint.UNTRUSTED, cause=cause)


def taint_raise(*, conversation: Conversation, taint: str, cause: Cause) -> bool:
    """Raise a chat's taint, and write down why; it only ever grows. Returns whether it changed.

    The chat's row is locked, so two raisers can't lower each other, and the rise and
    its record are one transaction: there is never a rise without its cause.
    """
    if TAINT_ORDER[Taint(taint)] <= TAINT_ORDER[Taint(conversation.taint)]:
        return False
    with transaction.atomic():
        locked = Conversation.objects.locked().only("pk", "taint").get(pk=conversation.pk)
        before = locked.taint
        if TAINT_ORDER[Taint(taint)] <= TAINT_ORDER[Taint(before)]:
            conversation.taint = before
            return False
        Conversation.objects.filter(pk=conversation.pk).update(taint=taint)
        taint_rise_record(conversation=conversation, before=before, after=taint, cause=cause)
        conversation.taint = taint
        events.publish_chat(conversation, taint=taint, why=cause.words())
    return True


def taint_rise_record(
    *, conversation: Conversation, before: str, after: str, cause: Cause
) -> TaintRise:
    """Write one rise down: in the transaction that raised it (or made the chat as careful)."""
    source = cause.source
    source_rise = None
    source_taint = ""
    if source is not None:
        source_taint = (
            Conversation.objects.filter(pk=source.pk).values_list("taint", flat=True).first()
            or source.taint
        )
        source_rise = (
            TaintRise.objects.filter(conversation_id=source.pk, at__lte=timezone.now())
            .order_by("-at", "-id")
            .first()
        )
    return TaintRise.objects.create(
        conversation=conversation,
        before=before,
        after=after,
        cause=cause.kind,
        url=cause.url[:2_000],
        path=cause.path[:2_000],
        source=source,
        source_taint=source_taint,
        source_rise=source_rise,
        turn=cause.turn,
        step_id=cause.step_id,
        detail=cause.detail,
    )
