"""A thread that publishes hands its events to the server's loop and goes on: it never
waits for the loop to send them, the loop sends them in the order they were handed, and
only a loop far behind makes a thread wait for its own, and a loop that has stopped holds
no thread at all (chats/events.py)."""

from __future__ import annotations

import asyncio
import collections
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer

from chats import events

WAIT = 10  # seconds: a test that fails fails at this, never hangs


class SlowLayer:
    """A channel layer whose every send yields to the loop, as Redis's does."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []  # each send: its number, or its events' numbers
        self.messages: list[tuple[str, dict]] = []
        self.all_sent = threading.Event()
        self.expected = 0

    async def group_send(self, group: str, message: dict) -> None:
        await asyncio.sleep(0)
        self.messages.append((group, message))
        if message.get("type") == events.EVENTS_MESSAGE:  # several, sent together
            self.sent.append((group, [one.get("n") for one in message["events"]]))
        else:
            self.sent.append((group, message.get("n")))
        if len(self.sent) == self.expected:
            self.all_sent.set()


@pytest.fixture
def layer(monkeypatch):
    made = SlowLayer()
    monkeypatch.setattr("channels.layers.get_channel_layer", lambda: made)
    return made


@pytest.fixture
def server_loop(monkeypatch):
    """The server's event loop, on a thread of its own, bound as ``conch serve`` binds it."""
    loop = asyncio.new_event_loop()
    running = threading.Event()
    loop.call_soon_threadsafe(running.set)  # its first callback, once it runs
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    # A bound loop that isn't running yet is one events must not hand to: the test
    # starts once this one runs, however busy the machine (it raced under pytest-xdist).
    assert running.wait(WAIT), "the loop's thread never ran it"
    monkeypatch.setattr(events, "_server_loop", loop)
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(WAIT)
    loop.close()


def busy(loop) -> threading.Event:
    """Hold the loop (it is serving something else) until the returned event is set."""
    free = threading.Event()
    loop.call_soon_threadsafe(free.wait, WAIT)
    return free


def test_a_thread_goes_on_while_the_loop_is_busy_and_its_events_follow(layer, server_loop):
    free = busy(server_loop)
    layer.expected = 3
    events._group_send_many("owner.1", [{"n": 1}, {"n": 2}])  # returns: the loop is held
    events._group_send_many("owner.1", [{"n": 3}])
    assert layer.sent == []
    free.set()
    assert layer.all_sent.wait(WAIT)
    assert layer.sent == [("owner.1", 1), ("owner.1", 2), ("owner.1", 3)]


def test_batches_from_several_threads_go_out_whole_and_in_the_order_handed(layer, server_loop):
    free = busy(server_loop)
    layer.expected = 6
    for batch in ([1, 2], [3, 4], [5, 6]):
        thread = threading.Thread(
            target=events._group_send_many, args=("owner.1", [{"n": n} for n in batch])
        )
        thread.start()
        thread.join(WAIT)
    free.set()
    assert layer.all_sent.wait(WAIT)
    assert [n for _, n in layer.sent] == [1, 2, 3, 4, 5, 6]  # never interleaved


def test_a_loop_far_behind_makes_the_thread_wait_for_its_own(layer, server_loop, monkeypatch):
    monkeypatch.setattr(events, "HANDED_MAX", 1)
    free = busy(server_loop)
    layer.expected = 2
    events._group_send_many("owner.1", [{"n": 1}])
    # One batch waits already: the next thread waits for its own to be sent.
    done = threading.Event()
    thread = threading.Thread(
        target=lambda: (events._group_send_many("owner.1", [{"n": 2}]), done.set())
    )
    thread.start()
    assert not done.wait(0.2)
    free.set()
    assert done.wait(WAIT)
    thread.join(WAIT)
    assert [n for _, n in layer.sent] == [1, 2]


def _published_as_the_server_stops(monkeypatch, layer) -> bool:
    """A request's sync part, on its own thread, publishes after the server's loop has
    stopped (Ctrl-C, SIGTERM): whether its send returned. A send that waits for the stopped
    loop is let go afterwards (the loop runs once more), so a failing test never hangs."""
    monkeypatch.setattr("channels.layers.get_channel_layer", lambda: layer)
    loop = asyncio.new_event_loop()
    monkeypatch.setattr(events, "_server_loop", loop)
    in_view, stopped, returned = threading.Event(), threading.Event(), threading.Event()

    def view() -> None:
        in_view.set()
        stopped.wait(WAIT)
        events._group_send_many("owner.1", [{"type": "conch.event", "n": 1}])
        returned.set()

    request_thread = ThreadPoolExecutor(max_workers=1)  # as conch/handler.py keeps one
    loop.create_task(sync_to_async(view, thread_sensitive=False, executor=request_thread)())
    serving = threading.Thread(target=loop.run_forever, daemon=True)
    serving.start()
    assert in_view.wait(WAIT)
    loop.call_soon_threadsafe(loop.stop)
    serving.join(WAIT)
    stopped.set()
    took_it = returned.wait(2)
    if not took_it:
        loop.run_until_complete(asyncio.sleep(0.2))  # the stuck send goes, the thread with it
    request_thread.shutdown(wait=False)
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    return took_it


def test_an_event_published_as_the_server_stops_does_not_hold_its_thread(monkeypatch):
    # The in-memory layer's only listeners were the stopped loop's sockets: nothing to send.
    assert _published_as_the_server_stops(monkeypatch, InMemoryChannelLayer())


def test_an_event_published_as_the_server_stops_still_reaches_redis(monkeypatch):
    # Another server's pages listen on Redis: the send goes, on a loop of its own.
    layer = SlowLayer()
    assert _published_as_the_server_stops(monkeypatch, layer)
    assert layer.sent == [("owner.1", 1)]


def test_an_event_no_page_of_this_process_listens_for_is_not_handed_to_the_loop(
    server_loop, monkeypatch
):
    """On the in-memory layer (this process's alone) a group with no member has no one to
    tell: waking the loop would only take the GIL from the writer. A page that joins later
    says hello with the number read after joining (tests/web/test_consumer.py), so it
    sees any event it missed by the gap."""
    layer = InMemoryChannelLayer()
    monkeypatch.setattr("channels.layers.get_channel_layer", lambda: layer)
    real_hand = events._hand
    handed: list[str] = []

    def hand(layer, group, messages, sent) -> None:
        handed.append(group)
        real_hand(layer, group, messages, sent)

    monkeypatch.setattr(events, "_hand", hand)
    events._group_send_many("owner.1", [{"type": "conch.event", "n": 1}])
    assert handed == []

    def on_loop(coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, server_loop).result(WAIT)

    channel = on_loop(layer.new_channel())
    on_loop(layer.group_add("owner.1", channel))  # a page of this process listens now
    events._group_send_many("owner.1", [{"type": "conch.event", "n": 2}])
    assert on_loop(layer.receive(channel))["n"] == 2  # the loop has run what it was handed
    assert handed == ["owner.1"]
    events._group_send_many("owner.2", [{"type": "conch.event", "n": 3}])  # not its group
    assert handed == ["owner.1"]


def event(n: int, kind: str = "conch.event") -> dict:
    return {"type": kind, "n": n}


def test_events_that_wait_for_one_group_go_in_one_send_in_their_order(layer, server_loop):
    """What waits for a group while a send is in flight goes in the next send, as one
    message: the channel layer costs a round trip a send, not one an event. Anything else
    for the group (not an event) keeps its place, and what came after it waits behind it."""
    free = busy(server_loop)
    layer.expected = 4
    events._group_send_many("owner.1", [event(1)])
    events._group_send_many("owner.2", [event(2)])
    events._group_send_many("owner.1", [event(3), event(4)])
    events._group_send_many("owner.1", [event(5, kind="session.ended")])
    events._group_send_many("owner.1", [event(6)])
    free.set()
    assert layer.all_sent.wait(WAIT)
    assert layer.sent == [
        ("owner.1", [1, 3, 4]),
        ("owner.2", 2),
        ("owner.1", 5),
        ("owner.1", 6),
    ]


WORDS = "reply-text:7"  # the key a running reply's words are the newest of


def words(owner, chat: str, text: str) -> None:
    events.publish(
        events.REPLY_TEXT,
        owner_id=owner.pk,
        conversation_id=chat,
        data={"turn": 1, "text": text},
        newest_of=WORDS if chat == "c_one" else f"{WORDS}-{chat}",
    )


def sent_events(layer) -> list[dict]:
    found = []
    for _, message in layer.messages:
        found.extend(
            message["events"] if message.get("type") == events.EVENTS_MESSAGE else [message]
        )
    return found


@pytest.mark.django_db(transaction=True)
def test_a_replys_newer_words_go_in_the_place_of_its_event_still_waiting(
    layer, server_loop, owner, published
):
    """Only a running reply's newest words matter: while its last event waits for the loop,
    newer words go out in its place, with no send of their own. Another chat's events
    between don't stop them; one of its own chat's does, so nothing overtakes an event
    published after it. Words take no number; the status between them takes the next."""
    free = busy(server_loop)
    layer.expected = 1
    words(owner, "c_one", "Hel")
    words(owner, "c_one", "Hello")  # in the place of "Hel"
    words(owner, "c_two", "Hi")
    words(owner, "c_one", "Hello, w")  # still in the place of "Hel"
    events.publish(events.STATUS, owner_id=owner.pk, conversation_id="c_one")
    words(owner, "c_one", "Hello, world")  # after the status: an event of its own
    free.set()
    assert layer.all_sent.wait(WAIT)

    sent = sent_events(layer)
    status = events.current_seq(owner.pk)
    none = events.UNNUMBERED
    assert [(m["seq"], m["event"], m["conversation_id"], m["data"].get("text")) for m in sent] == [
        (none, events.REPLY_TEXT, "c_one", "Hello, w"),
        (none, events.REPLY_TEXT, "c_two", "Hi"),
        (status, events.STATUS, "c_one", None),
        (none, events.REPLY_TEXT, "c_one", "Hello, world"),
    ]
    # Only the events sent, not those that rode on them, reached this process's subscribers.
    assert [(e.type, e.data.get("text")) for e in published] == [
        (events.REPLY_TEXT, "Hel"),
        (events.REPLY_TEXT, "Hi"),
        (events.STATUS, None),
        (events.REPLY_TEXT, "Hello, world"),
    ]
    # Once sent, nothing rides on it: the next words are an event of their own.
    layer.all_sent.clear()
    layer.expected += 1
    words(owner, "c_one", "Hello, world!")
    assert layer.all_sent.wait(WAIT)
    assert [(e.seq, e.data["text"]) for e in published[4:]] == [(none, "Hello, world!")]
    assert events.current_seq(owner.pk) == status  # the words took no number


@pytest.mark.django_db(transaction=True)
def test_newer_words_never_ride_on_an_event_a_stopped_loop_will_not_send(layer, owner, monkeypatch):
    """The server's loop stopped with a reply's words still waiting in it: newer words are
    an event of their own, which still reaches the channel layer, not lost with that one."""
    # What this loop is handed stays here, never sent: the next tests start afresh.
    monkeypatch.setattr(events, "_handed", collections.deque())
    monkeypatch.setattr(events, "_handed_count", [0])
    monkeypatch.setattr(events, "_waiting_last", {})
    monkeypatch.setattr(events, "_sender", None)
    loop = asyncio.new_event_loop()
    monkeypatch.setattr(events, "_server_loop", loop)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    free = busy(loop)
    words(owner, "c_one", "Hel")  # handed to the loop, which is held
    loop.call_soon_threadsafe(loop.stop)  # it stops before its sender ever runs
    free.set()
    thread.join(WAIT)
    try:
        words(owner, "c_one", "Hello")
        assert [m["data"]["text"] for m in sent_events(layer)] == ["Hello"]
    finally:
        never_ran = asyncio.all_tasks(loop)
        for task in never_ran:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*never_ran, return_exceptions=True))
        loop.close()
