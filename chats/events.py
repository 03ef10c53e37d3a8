"""The one way a change reaches browsers and watchers.

Services call :func:`publish` inside their transaction. The event gets the
owner's next sequence number there, and goes out only after the transaction
commits (``transaction.on_commit``): to the owner's Channels group, where the
consumer renders the same partials the views render, and to in-process
subscribers such as the runner and the waits.

Channel layers deliver at most once, so an event is a hint. A page that sees
a gap in the numbers, or reconnects, fetches its state again. An app publishes
its own event types once it has added them (:func:`event_type_add`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction
from django.db.models import F

from chats.models import Conversation, EventStream

log = logging.getLogger(__name__)

CONVERSATION_UPDATED = "conversation.updated"
STATUS = "status"
CONVERSATION_DELETED = "conversation.deleted"
TASK_CHANGED = "task.changed"
TURN_RUNNABLE = "turn.runnable"
# A reply's words so far, while a model writes them: shown live, never stored.
REPLY_TEXT = "reply.text"

# Every type publish() takes: the runtime's own, and those apps add.
EVENT_TYPES: set[str] = {
    CONVERSATION_UPDATED,
    STATUS,
    CONVERSATION_DELETED,
    TASK_CHANGED,
    TURN_RUNNABLE,
    REPLY_TEXT,
}
# Those that change only a card in a chat's transcript: a page redraws that transcript.
CARD_EVENT_TYPES: set[str] = set()
# Card events that can also change what the chat's row says is held for you ("1 held").
ROW_CARD_EVENT_TYPES: set[str] = set()


def event_type_add(event_type: str, *, card: bool = False, row: bool = False) -> None:
    """Let :func:`publish` take an app's own event type (``together``'s ``chats.listed``).

    ``card``: the event changes only a card in its chat's transcript, not the chat's row.
    ``row``: a card event that can change the chat's row too (what it holds for the person).
    """
    EVENT_TYPES.add(event_type)
    if card:
        CARD_EVENT_TYPES.add(event_type)
        if row:
            ROW_CARD_EVENT_TYPES.add(event_type)


@dataclass(frozen=True)
class Event:
    type: str
    owner_id: int
    seq: int
    conversation_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def as_message(self) -> dict[str, Any]:
        """The Channels message; ``type`` routes to the consumer's ``conch_event``."""
        return {
            "type": "conch.event",
            "event": self.type,
            "seq": self.seq,
            "conversation_id": self.conversation_id,
            "data": self.data,
        }


def owner_group(owner_id: int) -> str:
    return f"owner.{owner_id}"


_server_loop: asyncio.AbstractEventLoop | None = None


def bind_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Remember the server's event loop (the consumers call this on connect).

    The in-memory channel layer's queues belong to that loop; a runner thread
    must hand its sends to it rather than run them on a loop of its own.
    """
    global _server_loop
    _server_loop = loop


def _group_send_many(group: str, messages: list[dict[str, Any]]) -> None:
    """Send these to the group in order, in one hop to the event loop (not one each)."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return

    async def send_all() -> None:
        for n, message in enumerate(messages):
            if n:
                await asyncio.sleep(0)  # let the pages' consumers take each one in turn
            await layer.group_send(group, message)

    loop = _server_loop
    if loop is not None and loop.is_running() and not loop.is_closed():
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not loop:
            timeout = 10 + len(messages) / 1_000
            asyncio.run_coroutine_threadsafe(send_all(), loop).result(timeout=timeout)
            return
    async_to_sync(send_all)()


def group_notify(group: str, message: dict[str, Any]) -> None:
    """Send one unnumbered message to a group now: not a change to anyone's chats
    but word to the sockets themselves (a session ended). At most once, like events."""
    try:
        _group_send_many(group, [message])
    except Exception:
        log.warning("could not send %s to the channel layer", message.get("type"), exc_info=True)


Subscriber = Callable[[Event], None]
_subscribers: list[Subscriber] = []
_subscribers_lock = threading.Lock()


def subscribe(callback: Subscriber) -> Callable[[], None]:
    """Call ``callback`` with every event this process publishes. Returns an unsubscribe."""
    with _subscribers_lock:
        _subscribers.append(callback)

    def unsubscribe() -> None:
        with _subscribers_lock:
            if callback in _subscribers:
                _subscribers.remove(callback)

    return unsubscribe


def _next_seq(owner_id: int, count: int = 1) -> int:
    """Take ``count`` sequence numbers for the owner; returns the last of them."""
    with transaction.atomic():
        updated = EventStream.objects.filter(owner_id=owner_id).update(seq=F("seq") + count)
        if not updated:
            EventStream.objects.get_or_create(owner_id=owner_id)
            EventStream.objects.filter(owner_id=owner_id).update(seq=F("seq") + count)
        return EventStream.objects.values_list("seq", flat=True).get(owner_id=owner_id)


def current_seq(owner_id: int) -> int:
    return EventStream.objects.filter(owner_id=owner_id).values_list("seq", flat=True).first() or 0


def publish(
    event_type: str,
    *,
    owner_id: int,
    conversation_id: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Number the event now, send it once the surrounding transaction commits."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    seq = _next_seq(owner_id)
    event = Event(event_type, owner_id, seq, conversation_id, dict(data or {}))
    transaction.on_commit(lambda: _deliver(event))


def publish_chat(
    conversation: Conversation, event_type: str = CONVERSATION_UPDATED, **data: Any
) -> None:
    """:func:`publish` a change to one chat, with its status: what its row and page show."""
    publish(
        event_type,
        owner_id=conversation.owner_id,
        conversation_id=conversation.public_id,
        data={"status": conversation.status, **data},
    )


def publish_many(
    event_type: str,
    *,
    owner_id: int,
    conversation_ids: list[str],
    data: dict[str, Any] | None = None,
) -> None:
    """:func:`publish` for each of these chats, numbered in one write and sent in one go.

    For bulk changes (maintenance pruning thousands of sessions): every page and
    watcher gets exactly the events that one ``publish`` each would have sent.
    """
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    if not conversation_ids:
        return
    first = _next_seq(owner_id, len(conversation_ids)) - len(conversation_ids) + 1
    batch = [
        Event(event_type, owner_id, first + n, conversation_id, dict(data or {}))
        for n, conversation_id in enumerate(conversation_ids)
    ]
    transaction.on_commit(lambda: _deliver_many(batch))


def _deliver(event: Event) -> None:
    _deliver_many([event])


def _deliver_many(batch: list[Event]) -> None:
    """Deliver events of one owner, in order."""
    with _subscribers_lock:
        subscribers = list(_subscribers)
    for event in batch:
        for callback in subscribers:
            try:
                callback(event)
            except Exception:  # a watcher's bug must not stop the others, nor the writer
                log.exception("event subscriber failed on %s", event.type)
    # Every numbered event goes to the group, turn.runnable too: the pages only
    # take its number from it, but without it they would see a gap and refetch.
    try:
        _group_send_many(owner_group(batch[0].owner_id), [event.as_message() for event in batch])
    except Exception:  # at most once: a page that misses it sees the gap and refetches
        log.warning("could not send %s to the channel layer", batch[0].type, exc_info=True)
