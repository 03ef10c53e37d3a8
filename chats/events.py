"""The one way a change reaches browsers and watchers.

Services call :func:`publish` inside their transaction. The event goes out only
after the transaction commits (``transaction.on_commit``), numbered then with the
owner's next sequence number, the whole transaction's events in one statement: to
the owner's Channels group, where each server process's listener renders the same
partials the views render for all its tabs (chats/pushes.py), and to in-process
subscribers such as the runner and the waits.

Channel layers deliver at most once, so an event is a hint. A page that sees
a gap in the numbers, or reconnects, fetches its state again. An app publishes
its own event types once it has added them (:func:`event_type_add`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction

from chats.models import Conversation, EventStream

log = logging.getLogger(__name__)

CONVERSATION_UPDATED = "conversation.updated"
STATUS = "status"
CONVERSATION_DELETED = "conversation.deleted"
TASK_CHANGED = "task.changed"
# A reply's words so far, while a model writes them: shown live, never stored.
REPLY_TEXT = "reply.text"

# Every type publish() takes: the runtime's own, and those apps add.
EVENT_TYPES: set[str] = {
    CONVERSATION_UPDATED,
    STATUS,
    CONVERSATION_DELETED,
    TASK_CHANGED,
    REPLY_TEXT,
}
# Those that take no number (:func:`publish`): a running reply's words, many a second,
# each superseding the last. Numbering them cost a statement on the owner's stream row
# per word, and held each behind the pushes rendering before it; a page drawn afresh
# needs none of them (the next words come within a moment), so one lost leaves no gap.
UNNUMBERED_TYPES: frozenset[str] = frozenset({REPLY_TEXT})
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


def _group_send_many(
    group: str, messages: list[dict[str, Any]], newest_of: str | None = None
) -> None:
    """Send these to the group in order, in one hop to the event loop (not one each).

    From a thread other than the server loop's (a request's, a runner's), the sends are
    handed to the loop and the thread goes on: it used to wait for the loop to send them,
    a loop busy with the very requests queued behind that thread. The loop sends what it
    is handed in the order it was handed, one batch after another; only when it is
    :data:`HANDED_MAX` batches behind does a thread wait, as before, for its own.

    ``newest_of``: the last message is the newest of that key's (see :func:`publish`);
    while it waits to be sent, a newer one of the key takes its place.
    """
    from channels.layers import InMemoryChannelLayer, get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return
    if isinstance(layer, InMemoryChannelLayer) and not layer.groups.get(group):
        # No page of this process listens (the in-memory layer is this process's alone):
        # nothing to hand the loop, which would wake only to send to no one, taking the
        # GIL from the thread that wrote (~0.1 ms a message at the gateway's door). A page
        # that joins later is told the number after joining, so it sees what it missed.
        return
    loop = _server_loop
    if loop is not None and loop.is_running() and not loop.is_closed():
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not loop:
            with _handed_lock:
                behind = _handed_count[0]
                _handed_count[0] += 1
                for message in messages:
                    chat = message.get("conversation_id")
                    if chat:
                        key = newest_of if message is messages[-1] else None
                        _waiting_last[chat] = (key, message, loop)
            sent: concurrent.futures.Future[None] | None = None
            if behind >= HANDED_MAX:
                sent = concurrent.futures.Future()
            loop.call_soon_threadsafe(_hand, layer, group, messages, sent)
            if sent is not None:
                sent.result(timeout=10 + len(messages) / 1_000)
            return
    if loop is not None and not loop.is_running() and not loop.is_closed():
        # The server's loop is bound but not running: not started yet, or stopped (Ctrl-C,
        # SIGTERM) while a request or a reply was still writing. asgiref would hand the sends
        # from a request's thread to that loop and wait for it forever, holding SQLite's
        # writer turn, so the runner never stopped and the server never exited.
        if isinstance(layer, InMemoryChannelLayer):
            return  # its only listeners are that loop's sockets: there are none to tell
        async_to_sync(_send_all, force_new_loop=True)(layer, group, messages)  # Redis's
        return
    async_to_sync(_send_all)(layer, group, messages)


# How many batches threads may hand the loop before a thread waits for its own.
HANDED_MAX = 1_000
# Handed and not yet sent, counted by the threads as they hand them: a hint (a batch
# handed to a loop that closed before taking it stays counted).
_handed_count = [0]
_handed_lock = threading.Lock()
# Those the loop has taken, oldest first; read and changed on the loop only.
_handed: deque[tuple[Any, str, list[dict[str, Any]], concurrent.futures.Future[None] | None]] = (
    deque()
)
_sender: asyncio.Task[None] | None = None  # the task sending them, while there are any
# Each chat's last event handed to the loop, while it waits there to be sent: the key it
# is the newest of (None for any other event), its message, and the loop. Under
# _handed_lock: a thread hands and rides, the loop takes.
_waiting_last: dict[str, tuple[str | None, dict[str, Any], asyncio.AbstractEventLoop]] = {}


def _newest_ride(key: str, conversation_id: str, data: dict[str, Any]) -> bool:
    """Put ``data`` in the place of the chat's last event handed, if it is still waiting
    to be sent and is the newest of ``key``: it goes out with these, in its place, under
    its number. Whether it did (else the caller publishes an event of its own)."""
    with _handed_lock:
        waiting = _waiting_last.get(conversation_id)
        if waiting is None or waiting[0] != key:
            return False
        _, message, loop = waiting
        if loop.is_closed() or not loop.is_running():  # never to be sent
            del _waiting_last[conversation_id]
            return False
        message["data"] = data
        return True


def _taken(messages: list[dict[str, Any]]) -> None:
    """On the loop, as it starts sending these: no newer event rides on them any more."""
    with _handed_lock:
        _handed_count[0] -= 1
        for message in messages:
            chat = message.get("conversation_id")
            if not chat:
                continue
            waiting = _waiting_last.get(chat)
            if waiting is not None and waiting[1] is message:
                del _waiting_last[chat]


def _hand(layer, group: str, messages: list[dict[str, Any]], sent) -> None:
    """On the loop: queue a batch, and start the sender if it isn't running."""
    global _sender
    _handed.append((layer, group, messages, sent))
    loop = asyncio.get_running_loop()
    # A sender of a loop that was closed before it ran (a test's) never will: start anew.
    if _sender is None or _sender.done() or _sender.get_loop() is not loop:
        _sender = loop.create_task(_send_handed())


# The channel-layer message that carries several events of one owner, in their order.
EVENTS_MESSAGE = "conch.events"
# The most events one such message carries.
EVENTS_PER_MESSAGE = 200


def _events_only(messages: list[dict[str, Any]]) -> bool:
    return all(message.get("type") == "conch.event" for message in messages)


def _take_for(layer, group: str) -> list[tuple[Any, str, list[dict[str, Any]], Any]]:
    """Take from the queue the batches of events for this group that may go with the one
    being sent, in their order, up to EVENTS_PER_MESSAGE events: those before the first
    batch for the group that isn't events alone (which keeps its place after them)."""
    taken: list[tuple[Any, str, list[dict[str, Any]], Any]] = []
    kept: deque = deque()
    count = 0
    blocked = False
    while _handed:
        item = _handed.popleft()
        if item[1] != group or item[0] is not layer:
            kept.append(item)
        elif blocked or not _events_only(item[2]) or count + len(item[2]) > EVENTS_PER_MESSAGE:
            blocked = True  # what comes after it for the group waits behind it
            kept.append(item)
        else:
            taken.append(item)
            count += len(item[2])
    _handed.extend(kept)
    return taken


async def _send_handed() -> None:
    """Send what was handed, in order. The events that wait for one group while a send is
    in flight go in the next send together, as one message (EVENTS_MESSAGE): a listener
    hears them in one receive, and the channel layer costs a round trip a send, not one an
    event, however fast a reply's words come."""
    global _sender
    this = asyncio.current_task()
    try:
        while _handed:
            first = _handed.popleft()
            layer, group, messages, _ = first
            batches = [first]
            if _events_only(messages) and len(messages) < EVENTS_PER_MESSAGE:
                batches += _take_for(layer, group)
            together = [message for batch in batches for message in batch[2]]
            for batch in batches:
                _taken(batch[2])
            try:
                if len(batches) == 1:
                    await _send_all(layer, group, messages)
                else:
                    await layer.group_send(group, {"type": EVENTS_MESSAGE, "events": together})
            except Exception:  # at most once: a page that misses it sees the gap and refetches
                log.warning("could not send %s to the channel layer", group, exc_info=True)
            for batch in batches:
                if batch[3] is not None:
                    batch[3].set_result(None)
    finally:
        if _sender is this:
            _sender = None


async def _send_all(layer, group: str, messages: list[dict[str, Any]]) -> None:
    for n, message in enumerate(messages):
        if n:
            await asyncio.sleep(0)  # let the pages' consumers take each one in turn
        await layer.group_send(group, message)


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


class _Numbering:
    """The events one transaction publishes, numbered together as it commits.

    Numbered in one statement for the whole transaction, once it is done writing: on
    PostgreSQL after its commit, so a writer never holds the owner's stream row while it
    works; on SQLite as the transaction's last statement before its COMMIT, since SQLite
    lets one writer in at a time anyway: the numbers are in commit order all the same,
    and the change and its numbers are one commit, not two. Either way a page that reads
    the sequence number before its state (``regions.page_context``) stays right. Any
    event numbered at or below the number it read belongs to a transaction that had
    committed before that read, so its change is in what the page reads next.
    """

    __slots__ = ("failed", "hooks", "owners", "seqs")

    def __init__(self, hooks: list) -> None:
        self.hooks = hooks  # the connection's on-commit list this transaction fills
        self.owners: list[int] = []  # each event's owner, in publishing order
        self.seqs: list[int] | None = None  # their numbers, once numbered
        self.failed = False  # numbering them failed (logged once)

    def take(self, owner_id: int, count: int) -> int:
        """Hold ``count`` places for the owner's events; the first one's position."""
        position = len(self.owners)
        self.owners.extend([owner_id] * count)
        return position

    def numbered(self) -> list[int] | None:
        """:meth:`number`, or None if the numbering statement failed (it is logged).

        The transaction has committed by then: its writer is not told the change failed,
        since it didn't. Its events go to this process's watchers unnumbered, and to no
        page; the numbers they would have had are skipped at the owner's next numbering,
        so every page sees a gap there and fetches what it missed.
        """
        if self.failed:
            return None
        try:
            return self.number()
        except Exception:
            self.failed = True
            log.exception("could not number the events of a committed transaction")
            _skip_later(Counter(self.owners))
            return None

    def number(self) -> list[int]:
        """Every held place's number: one statement an owner, the first hook to run."""
        if self.seqs is None:
            counts = Counter(self.owners)
            # Numbers owed to events whose numbering failed are skipped before these: a gap.
            owed = _skipped_take(list(counts))
            try:
                last = {
                    owner_id: _next_seq(owner_id, n + owed.get(owner_id, 0))
                    for owner_id, n in counts.items()
                }
            except BaseException:
                _skip_later(owed)  # still owed
                raise
            seqs = [0] * len(self.owners)
            for position in range(len(self.owners) - 1, -1, -1):  # each owner's last first
                owner_id = self.owners[position]
                seqs[position] = last[owner_id]
                last[owner_id] -= 1
            self.seqs = seqs
        return self.seqs


def _numbering(count: int, owner_id: int) -> tuple[_Numbering, int]:
    """This transaction's numbering (a new one if it has none yet, or it was numbered
    already) and the position of ``count`` new places in it.

    A transaction is known by the connection's list of on-commit hooks: Django makes a
    new one when a transaction commits or rolls back (or a savepoint rolls back, which
    starts a new numbering: events the rollback dropped only leave a gap, a hint).
    """
    conn = transaction.get_connection()
    numbering = getattr(conn, "conch_numbering", None)
    if (
        numbering is None
        or numbering.seqs is not None
        or numbering.hooks is not conn.run_on_commit
        or not conn.in_atomic_block
    ):
        numbering = _Numbering(conn.run_on_commit)
        setattr(conn, "conch_numbering", numbering)  # noqa: B010 (one per connection)
        as_it_commits = getattr(conn, "before_commit", None)
        if as_it_commits is not None and conn.in_atomic_block:
            # SQLite (conch.sqlite3): numbered as the last statement before COMMIT (_Numbering).
            as_it_commits.append(numbering.numbered)
    return numbering, numbering.take(owner_id, count)


def _next_seq(owner_id: int, count: int = 1) -> int:
    """Take ``count`` sequence numbers for the owner in one statement; returns the last.

    Runs after the commit of the transaction that published them, in autocommit: the
    row is held only for this statement. On SQLite it runs inside that transaction, just
    before its COMMIT (``conch.sqlite3``'s ``before_commit``), where the database's
    write lock is held already.
    """
    table = EventStream._meta.db_table
    sql = f"UPDATE {table} SET seq = seq + %s WHERE owner_id = %s RETURNING seq"
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(sql, [count, owner_id])
        row = cursor.fetchone()
    if row is None:  # the owner's first event ever: make the stream, then take them
        EventStream.objects.get_or_create(owner_id=owner_id)
        return _next_seq(owner_id, count)
    return row[0]


# Seq a value no page ever takes: an event of UNNUMBERED_TYPES, or one whose numbering
# failed (see _Numbering.numbered).
UNNUMBERED = 0
# Each owner's numbers owed to events whose numbering failed: skipped at the next numbering.
_skipped: dict[int, int] = {}
_skipped_lock = threading.Lock()


def _skip_later(owed: Mapping[int, int]) -> None:
    """Owe these owners these many numbers, skipped at their next numbering."""
    with _skipped_lock:
        for owner_id, count in owed.items():
            _skipped[owner_id] = _skipped.get(owner_id, 0) + count


def _skipped_take(owners: list[int]) -> dict[int, int]:
    """What these owners are owed, no longer owed: their numbering skips it."""
    with _skipped_lock:
        return {owner_id: _skipped.pop(owner_id) for owner_id in owners if owner_id in _skipped}


def current_seq(owner_id: int) -> int:
    return EventStream.objects.filter(owner_id=owner_id).values_list("seq", flat=True).first() or 0


def publish(
    event_type: str,
    *,
    owner_id: int,
    conversation_id: str | None = None,
    data: dict[str, Any] | None = None,
    newest_of: str | None = None,
) -> None:
    """Send the event once the surrounding transaction commits, numbered then.

    ``newest_of``: a key (a running reply's) of events of which only the newest matters
    (the words so far). Outside a transaction, while the chat's last event handed to the
    loop is one of the key's and is still waiting to be sent, this event's data goes in
    its place: no number, no statement and no send of its own, and no subscriber hears
    it. So words come as fast as the channel layer takes them, and what comes meanwhile
    is one send, not a queue.

    An event of :data:`UNNUMBERED_TYPES` takes no number (its ``seq`` is
    :data:`UNNUMBERED`): it is sent as soon as its transaction, if any, commits, and the
    pages show it as it comes, never counting it in their numbers.
    """
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    data = dict(data or {})
    if (
        newest_of is not None
        and conversation_id
        and not transaction.get_connection().in_atomic_block
        and _newest_ride(newest_of, conversation_id, data)
    ):
        return
    if event_type in UNNUMBERED_TYPES:
        event = Event(event_type, owner_id, UNNUMBERED, conversation_id, data)
        transaction.on_commit(lambda: _deliver(event, newest_of))
        return
    numbering, position = _numbering(1, owner_id)

    def deliver() -> None:
        seqs = numbering.numbered()
        seq = seqs[position] if seqs is not None else UNNUMBERED
        _deliver(Event(event_type, owner_id, seq, conversation_id, data), newest_of)

    transaction.on_commit(deliver)


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
    """:func:`publish` for each of these chats, numbered together and sent in one go.

    For bulk changes (maintenance pruning thousands of sessions): every page and
    watcher gets exactly the events that one ``publish`` each would have sent.
    """
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    if event_type in UNNUMBERED_TYPES:
        raise ValueError(f"{event_type!r} takes no number: publish it alone")
    if not conversation_ids:
        return
    ids = list(conversation_ids)
    numbering, first = _numbering(len(ids), owner_id)
    data = dict(data or {})

    def deliver() -> None:
        numbered = numbering.numbered()
        seqs = (
            numbered[first : first + len(ids)] if numbered is not None else [UNNUMBERED] * len(ids)
        )
        _deliver_many(
            [
                Event(event_type, owner_id, seq, conversation_id, dict(data))
                for seq, conversation_id in zip(seqs, ids, strict=True)
            ]
        )

    transaction.on_commit(deliver)


def _deliver(event: Event, newest_of: str | None = None) -> None:
    _deliver_many([event], newest_of)


def _deliver_many(batch: list[Event], newest_of: str | None = None) -> None:
    """Deliver events of one owner, in order: to this process's watchers, and (numbered)
    to the owner's pages."""
    with _subscribers_lock:
        subscribers = list(_subscribers)
    for event in batch:
        for callback in subscribers:
            try:
                callback(event)
            except Exception:  # a watcher's bug must not stop the others, nor the writer
                log.exception("event subscriber failed on %s", event.type)
    if batch[0].seq == UNNUMBERED and batch[0].type not in UNNUMBERED_TYPES:
        return  # its numbering failed: the pages learn of it by the gap it left
    # Every event goes to the group, those that take no number too: a page that missed a
    # numbered one would see a gap.
    try:
        _group_send_many(
            owner_group(batch[0].owner_id),
            [event.as_message() for event in batch],
            newest_of,
        )
    except Exception:  # at most once: a page that misses it sees the gap and refetches
        log.warning("could not send %s to the channel layer", batch[0].type, exc_info=True)
