"""A push costs the same with one tab open or twenty.

Each event is heard once per process and each part of its push rendered once
(chats/pushes.py), on the render thread, and every tab it goes to gets the
same text. A change to one chat sends its row alone, never the whole list.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import contextmanager
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.db import close_old_connections, connection, transaction
from django.db.backends.utils import CursorWrapper
from django.utils import timezone

from chats import events, pushes, regions
from chats.models import Conversation, Status
from chats.runtime import selectors
from tests.factories import ChatFactory, ConversationFactory
from tests.web.sockets import seq_of, session_cookie, socket
from tests.web.test_consumer import pushed_row

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 10


@pytest.fixture
def cookie(owner):
    return session_cookie(owner)


@pytest.fixture
def chat(owner, agent, workspace):
    return ChatFactory(owner=owner, title="Fix the login bug", folder=str(workspace))


class Counts:
    """The renders of each part, the thread each ran on, and every query of every thread."""

    def __init__(self) -> None:
        self.renders: list[str] = []
        self.threads: set[str] = set()
        self.queries = 0


@pytest.fixture
def counts(monkeypatch):
    seen = Counts()
    for name in ("render_run", "render_run_for_chat"):
        real = getattr(regions, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            seen.renders.append(_name)
            seen.threads.add(threading.current_thread().name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(regions, name, counted)
    real_execute = CursorWrapper._execute

    def execute(self, *args, **kwargs):
        seen.queries += 1
        return real_execute(self, *args, **kwargs)

    monkeypatch.setattr(CursorWrapper, "_execute", execute)
    return seen


@contextmanager
def counting(counts: Counts):
    """How many renders and queries the block caused."""
    renders, queries = len(counts.renders), counts.queries
    result = Counts()
    yield result
    result.renders = counts.renders[renders:]
    result.queries = counts.queries - queries


async def open_tabs(cookie, count: int, chat=None) -> list:
    path = f"/ws/?chat={chat.public_id}" if chat else "/ws/"
    tabs = []
    for _ in range(count):
        tab = socket(cookie=cookie, path=path)
        connected, _ = await tab.connect(timeout=TIMEOUT)
        assert connected
        seq_of(await tab.receive_from(timeout=TIMEOUT))  # its hello
        tabs.append(tab)
    return tabs


async def close_tabs(tabs) -> None:
    for tab in tabs:
        await tab.disconnect()
    # Channels' communicator stops its thread closing connections while it sends or
    # receives; closed here, so PostgreSQL can drop the test database at the end.
    await database_sync_to_async(close_old_connections)()


async def receive_all(tabs) -> list[str]:
    return list(await asyncio.gather(*(tab.receive_from(timeout=TIMEOUT) for tab in tabs)))


def status_changed(conversation: Conversation, status: str) -> None:
    """What the runtime does when a chat's status changes: a ``status`` event."""
    with transaction.atomic():
        Conversation.objects.filter(pk=conversation.pk).update(status=status)
        conversation.status = status
        events.publish_chat(conversation, events.STATUS)


async def event_cost(cookie, chat, counts, *, tabs: int) -> Counts:
    """One status change to ``chat``, seen by ``tabs`` tabs (half of them showing it)."""
    showing = await open_tabs(cookie, (tabs + 1) // 2, chat=chat)
    elsewhere = await open_tabs(cookie, tabs // 2)
    try:
        with counting(counts) as cost:
            await database_sync_to_async(status_changed)(chat, Status.NEEDS_YOU)
            pushes = await receive_all(showing + elsewhere)
        assert all(f"row-{chat.public_id}" in push for push in pushes)
        assert all('id="transcript"' in push for push in pushes[: len(showing)])
        return cost
    finally:
        await close_tabs(showing + elsewhere)


async def test_an_event_costs_the_same_renders_and_queries_for_1_tab_as_for_20(
    cookie, chat, counts
):
    one = await event_cost(cookie, chat, counts, tabs=1)
    twenty = await event_cost(cookie, chat, counts, tabs=20)

    # One render of the part every tab gets, one of the part the chat's own tabs add.
    assert sorted(one.renders) == ["render_run", "render_run_for_chat"]
    assert sorted(twenty.renders) == sorted(one.renders)
    assert twenty.queries == one.queries


async def test_pushes_render_on_the_render_thread_not_the_views_one(cookie, chat, counts):
    tabs = await open_tabs(cookie, 2, chat=chat)
    try:
        await database_sync_to_async(status_changed)(chat, Status.WORKING)
        await receive_all(tabs)
    finally:
        await close_tabs(tabs)

    assert counts.threads and all(name.startswith("conch-render") for name in counts.threads)


async def test_every_tab_gets_the_same_text(owner, cookie, chat, agent, workspace):
    other = await database_sync_to_async(ChatFactory)(
        owner=owner, title="Release notes", folder=str(workspace)
    )
    showing = await open_tabs(cookie, 4, chat=chat)
    elsewhere = await open_tabs(cookie, 3) + await open_tabs(cookie, 3, chat=other)
    try:
        await database_sync_to_async(status_changed)(chat, Status.NEEDS_YOU)
        shown = await receive_all(showing)
        seen = await receive_all(elsewhere)
    finally:
        await close_tabs(showing + elsewhere)

    assert len(set(seen)) == 1 and len(set(shown)) == 1
    # The chat's own tabs get what every tab gets, then that chat's page.
    assert shown[0].startswith(seen[0] + "\n")
    assert 'id="chat-controls"' in shown[0] and 'id="chat-controls"' not in seen[0]


async def test_a_status_change_among_50_chats_pushes_its_row_alone(
    owner, agent, cookie, chat, counts
):
    await database_sync_to_async(ConversationFactory.create_batch)(49, owner=owner, agent=agent)
    tabs = await open_tabs(cookie, 2)
    try:
        with counting(counts) as cost:
            await database_sync_to_async(status_changed)(chat, Status.NEEDS_YOU)
            pushes = await receive_all(tabs)
    finally:
        await close_tabs(tabs)

    assert pushes[0].count('<li id="row-') == 1
    assert pushed_row(pushes[0]).startswith(f'<li id="row-{chat.public_id}" class="chat-row')
    assert "data-needs-you" in pushes[0]
    assert cost.renders == ["render_run"]


def test_a_pushed_rows_cost_does_not_grow_with_the_chats(
    owner, agent, chat, django_assert_num_queries
):
    def row_queries() -> int:
        with django_assert_num_queries(3):  # the chat, the open replies, what it holds for you
            run = regions.PushRun.of(events.STATUS, 1, chat.public_id, None)
            return len(regions.render_run(owner_id=owner.pk, run=run))

    row_queries()
    ConversationFactory.create_batch(50, owner=owner, agent=agent)
    row_queries()


def test_the_rows_sort_key_orders_them_as_the_list_does(owner, agent):
    now = timezone.now()
    chats = ConversationFactory.create_batch(6, owner=owner, agent=agent)
    # Two at the very same moment (the primary key decides), one pinned, one older.
    Conversation.objects.filter(pk__in=[chats[1].pk, chats[2].pk]).update(last_interaction_at=now)
    Conversation.objects.filter(pk=chats[3].pk).update(
        pinned=True, last_interaction_at=now - timedelta(days=400)
    )
    Conversation.objects.filter(pk=chats[4].pk).update(
        last_interaction_at=now - timedelta(microseconds=1)
    )

    rows = selectors.chat_list_rows(owner_id=owner.pk)
    by_key = sorted(rows, key=selectors.row_sort_key, reverse=True)

    assert [row.pk for row in by_key] == [row.pk for row in rows]
    assert rows[0].pk == chats[3].pk


@pytest.fixture
def closes(monkeypatch) -> list[str]:
    """The threads that close a connection (the test's own SQLite ignores a close)."""
    from django.db import connections

    closed: list[str] = []
    wrapper = type(connections["default"])
    real_close = wrapper.close

    def close(self) -> None:
        closed.append(threading.current_thread().name)
        real_close(self)

    monkeypatch.setattr(wrapper, "close", close)
    return closed


def test_the_render_thread_keeps_its_connection_even_where_others_close_theirs(closes):
    """Every other thread closes a PostgreSQL connection after each use (CONN_MAX_AGE 0);
    the render thread is one a process, and a connection a push cost more than the push."""
    import time

    from django.db import connections

    def aged(**_) -> str:  # as CONN_MAX_AGE 0 leaves it: due to close after each use
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        connections["default"].close_at = time.monotonic()
        return ""

    for _ in range(3):
        pushes.RENDER_THREAD.submit(pushes.rendered, aged, {}).result()

    assert closes == []
    pushes.RENDER_THREAD.submit(setattr, connections["default"], "close_at", None).result()


def test_the_render_thread_drops_a_connection_that_broke(closes, monkeypatch):
    from django.db import DatabaseError, connections

    def broken(**_) -> str:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        connections["default"].errors_occurred = True  # as a failed statement leaves it
        raise DatabaseError("the server went away")

    wrapper = type(connections["default"])
    monkeypatch.setattr(wrapper, "is_usable", lambda self: False)
    with pytest.raises(DatabaseError):
        pushes.RENDER_THREAD.submit(pushes.rendered, broken, {}).result()

    assert closes == ["conch-render_0"]


async def test_an_event_reaches_the_process_once_whatever_the_number_of_tabs(cookie, chat, owner):
    """One listener of the process is in the owner's group, not each tab: an event is one
    message through the channel layer (one through Redis) for 1 tab or 20."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    tabs = await open_tabs(cookie, 10, chat=chat) + await open_tabs(cookie, 10)
    try:
        assert len(layer.groups[events.owner_group(owner.pk)]) == 1
        await database_sync_to_async(status_changed)(chat, Status.WORKING)
        pushes = await receive_all(tabs)
        assert all(f"row-{chat.public_id}" in push for push in pushes)
    finally:
        await close_tabs(tabs)
    assert events.owner_group(owner.pk) not in layer.groups  # the last tab took it along


@contextmanager
def render_thread_held(thread=pushes.RENDER_THREAD):
    """The render thread busy until the block ends, as a slow render would keep it."""
    release = threading.Event()
    busy = thread.submit(release.wait, TIMEOUT)
    try:
        yield
    finally:
        release.set()
        busy.result(TIMEOUT)


async def test_events_heard_while_a_push_renders_go_out_as_one_push_a_render_a_chat(
    owner, agent, cookie, chat, counts, monkeypatch
):
    other = await database_sync_to_async(ChatFactory)(owner=owner, agent=agent, title="Other")
    rendering = asyncio.Event()
    real_render = pushes.render

    def render(*args, **kwargs):
        rendering.set()
        return real_render(*args, **kwargs)

    monkeypatch.setattr(pushes, "render", render)
    showing = await open_tabs(cookie, 2, chat=chat)
    elsewhere = await open_tabs(cookie, 2)
    tabs = showing + elsewhere
    try:
        with counting(counts) as cost:
            with render_thread_held():
                await database_sync_to_async(status_changed)(chat, Status.WORKING)
                # Heard, and its push waits for the render thread.
                await asyncio.wait_for(rendering.wait(), TIMEOUT)
                for status in (Status.IDLE, Status.NEEDS_YOU):
                    await database_sync_to_async(status_changed)(chat, status)
                await database_sync_to_async(status_changed)(other, Status.WORKING)
            first = await receive_all(tabs)
            run = await receive_all(tabs)
    finally:
        await close_tabs(tabs)

    seqs = [seq_of(push)[0] for push in first]
    assert len(set(seqs)) == 1 and all("data-first" not in push for push in first)
    marker = f'data-seq="{seqs[0] + 3}" data-kind="event" data-first="{seqs[0] + 1}"'
    assert all(push.startswith(f'<span id="conch-seq" {marker}') for push in run)
    # Each chat's row once, as it is after the run; the shown chat's page once.
    for push in run:
        assert push.count(f'<li id="row-{chat.public_id}"') == 1
        assert push.count(f'<li id="row-{other.public_id}"') == 1
        assert "is-needs_you" in push.split(f'<li id="row-{chat.public_id}"', 1)[1]
    assert all(push.count('id="chat-controls"') == 1 for push in run[: len(showing)])
    assert all('id="chat-controls"' not in push for push in run[len(showing) :])
    assert sorted(cost.renders) == sorted(["render_run", "render_run_for_chat"] * 2)


def words_written(conversation: Conversation, text: str) -> None:
    """A running reply's words so far, each an event of its own (none rides on another)."""
    events.publish(
        events.REPLY_TEXT,
        owner_id=conversation.owner_id,
        conversation_id=conversation.public_id,
        data={"turn": 1, "text": text},
    )


async def test_words_go_out_alone_unnumbered_the_newest_once_the_last_went(
    owner, agent, cookie, chat, monkeypatch
):
    """A reply's words take no number: they go to the tabs showing their chat in pushes
    of their own, marked as words, and while one is sent the words heard meanwhile wait,
    and only the newest go next. A tab that doesn't show the chat is sent nothing for
    them, and no page's numbers move: the next event follows the hello with no gap."""
    other = await database_sync_to_async(ChatFactory)(owner=owner, agent=agent, title="Other")
    rendering = asyncio.Event()
    real_render = pushes.render_words

    def render(*args, **kwargs):
        rendering.set()
        return real_render(*args, **kwargs)

    monkeypatch.setattr(pushes, "render_words", render)
    hello = await database_sync_to_async(events.current_seq)(owner.pk)
    showing = await open_tabs(cookie, 1, chat=chat)
    tabs = showing + await open_tabs(cookie, 1)
    try:
        with render_thread_held(pushes.WORDS_THREAD):
            await database_sync_to_async(words_written)(chat, "Hel")
            await asyncio.wait_for(rendering.wait(), TIMEOUT)  # its push waits to render
            await database_sync_to_async(words_written)(chat, "Hello")
            await database_sync_to_async(words_written)(chat, "Hello, world")
            await database_sync_to_async(words_written)(other, "Elsewhere")
        first = await showing[0].receive_from(TIMEOUT)
        newest = await showing[0].receive_from(TIMEOUT)
        await database_sync_to_async(status_changed)(chat, Status.NEEDS_YOU)
        shown, elsewhere = await receive_all(tabs)
    finally:
        await close_tabs(tabs)

    words_marker = '<span id="conch-seq" data-seq="0" data-kind="words"'
    assert first.startswith(words_marker) and "<p>Hel</p>" in first
    assert newest.startswith(words_marker) and "<p>Hello, world</p>" in newest
    assert "Elsewhere" not in first + newest + shown + elsewhere
    # The status: the next number after the hello, to both tabs, and nothing else before it.
    for push in (shown, elsewhere):
        assert push.startswith(f'<span id="conch-seq" data-seq="{hello + 1}" data-kind="event"')
        assert "data-first" not in push.split(">", 1)[0]
    assert "reply-1-text" not in elsewhere and 'id="chat-controls"' in shown


async def test_a_chats_page_still_rendering_holds_back_no_words_and_is_followed_by_them(
    owner, agent, cookie, chat, monkeypatch
):
    """A chat's page renders on the render thread while replies' words come: the words
    reach the tabs showing their chat at once, that chat's too, ahead of its page. The
    page, read afresh, draws the running reply's words empty (they are never stored), so
    the newest words heard since the event that redraws it go again after it."""
    other = await database_sync_to_async(ChatFactory)(owner=owner, agent=agent, title="Other")
    page_rendering, page_may_end = threading.Event(), threading.Event()
    real = regions.render_run_for_chat

    def render_run_for_chat(*, conversation_id, parts, **kwargs):
        if conversation_id == chat.public_id and parts[0].kind == regions.REGIONS:
            page_rendering.set()
            page_may_end.wait(TIMEOUT)  # a slow page
        return real(conversation_id=conversation_id, parts=parts, **kwargs)

    monkeypatch.setattr(regions, "render_run_for_chat", render_run_for_chat)
    on_chat = await open_tabs(cookie, 1, chat=chat)
    on_other = await open_tabs(cookie, 1, chat=other)
    try:
        await database_sync_to_async(words_written)(chat, "Said before the status")
        before = await on_chat[0].receive_from(TIMEOUT)
        await database_sync_to_async(status_changed)(chat, Status.NEEDS_YOU)
        assert await asyncio.to_thread(page_rendering.wait, TIMEOUT)
        await database_sync_to_async(words_written)(other, "Hi from the other")
        await database_sync_to_async(words_written)(chat, "Hi from this one")
        row, words = (
            await on_other[0].receive_from(TIMEOUT),
            await on_other[0].receive_from(TIMEOUT),
        )
        ahead = await on_chat[0].receive_from(TIMEOUT)
        assert not page_may_end.is_set()  # all of that while the page was still rendering
        page_may_end.set()
        page, again = await on_chat[0].receive_from(TIMEOUT), await on_chat[0].receive_from(TIMEOUT)
        # Once a later event redraws the page, words heard before it don't go again.
        await database_sync_to_async(status_changed)(chat, Status.WORKING)
        redrawn = await on_chat[0].receive_from(TIMEOUT)
        await database_sync_to_async(words_written)(chat, "After the redraw")
        after = await on_chat[0].receive_from(TIMEOUT)  # the next push: nothing came between
    finally:
        page_may_end.set()
        await close_tabs(on_chat + on_other)

    assert "<p>Said before the status</p>" in before
    assert f'<li id="row-{chat.public_id}"' in row and "is-needs_you" in row
    assert "<p>Hi from the other</p>" in words and 'data-kind="words"' in words
    assert "<p>Hi from this one</p>" in ahead and 'data-kind="words"' in ahead
    assert 'id="chat-controls"' in page and "is-needs_you" in page
    assert again.startswith('<span id="conch-seq" data-seq="0" data-kind="words"')
    assert "<p>Hi from this one</p>" in again and "before the status" not in again
    # In order, and no gap: the words took no number.
    assert "<p>After the redraw</p>" in after
    assert seq_of(redrawn)[0] == seq_of(page)[0] + 1
    assert "data-first" not in page.split(">", 1)[0] + redrawn.split(">", 1)[0]


async def test_events_sent_together_reach_the_tabs_as_one_push(owner, cookie, chat):
    """Events that waited for one send go in one channel-layer message (chats/events.py):
    the listener hears each of them, and the tabs get them as one run."""
    from channels.layers import get_channel_layer

    tab = socket(cookie=cookie, path=f"/ws/?chat={chat.public_id}")
    connected, _ = await tab.connect(timeout=TIMEOUT)
    try:
        assert connected
        hello = seq_of(await tab.receive_from(timeout=TIMEOUT))[0]
        words = {"turn": 1, "text": "Hi"}
        together = [
            events.Event(events.STATUS, owner.pk, hello + 1, chat.public_id).as_message(),
            events.Event(events.TASK_CHANGED, owner.pk, hello + 2, None).as_message(),
            events.Event(
                events.REPLY_TEXT, owner.pk, events.UNNUMBERED, chat.public_id, words
            ).as_message(),
        ]
        await get_channel_layer().group_send(
            events.owner_group(owner.pk), {"type": events.EVENTS_MESSAGE, "events": together}
        )
        # The words at once, the run's one push, and the words again after its page.
        pushed = [await tab.receive_from(timeout=TIMEOUT) for _ in range(3)]
    finally:
        await close_tabs([tab])
    [push] = [push for push in pushed if 'data-kind="event"' in push.split(">", 1)[0]]
    marker = f'data-seq="{hello + 2}" data-kind="event" data-first="{hello + 1}"'
    assert push.startswith(f'<span id="conch-seq" {marker}')
    assert 'id="chat-controls"' in push
    said = [other for other in pushed if other is not push]
    assert pushed[-1] in said and len(said) == 2
    for words_push in said:
        assert words_push.startswith('<span id="conch-seq" data-seq="0" data-kind="words"')
        assert "<p>Hi</p>" in words_push


async def test_a_push_heard_while_a_tab_connects_waits_for_its_hello(cookie, chat, monkeypatch):
    """A tab hears its owner's events from before it asks its hello's number; one that
    comes meanwhile is sent after the hello, never before it (or before the handshake)."""
    from chats import signout

    real = signout.session_state

    def state_with_an_event_meanwhile(**kwargs):
        status_changed(chat, Status.WORKING)  # committed and heard before the tab is ready
        return real(**kwargs)

    monkeypatch.setattr(signout, "session_state", state_with_an_event_meanwhile)
    tab = socket(cookie=cookie, path=f"/ws/?chat={chat.public_id}")
    connected, _ = await tab.connect(timeout=TIMEOUT)
    try:
        assert connected
        hello = seq_of(await tab.receive_from(timeout=TIMEOUT))
        push = await tab.receive_from(timeout=TIMEOUT)
    finally:
        await close_tabs([tab])
    assert hello[1] == "hello"
    assert seq_of(push) == (hello[0], "event")  # the hello already counts it: no refetch
    assert "is-working" in push


def _heard(seq: int, event: str = events.STATUS, chat: str | None = "c_one", **data) -> dict:
    return {
        "type": "conch.event",
        "event": event,
        "seq": seq,
        "conversation_id": chat,
        "data": data,
    }


def test_a_missing_number_ends_a_run_so_the_page_sees_the_gap():
    found = pushes.runs([_heard(5), _heard(2), _heard(3), _heard(3), _heard(6)])

    # In their numbers' order, the number heard twice pushed once; 4 never came.
    assert [(run.first, run.last) for run in found] == [(2, 3), (5, 6)]


def test_a_run_carries_at_most_max_run_events():
    found = pushes.runs([_heard(seq) for seq in range(1, 2 * pushes.MAX_RUN + 2)])

    assert [run.last - run.first + 1 for run in found] == [pushes.MAX_RUN, pushes.MAX_RUN, 1]


def test_a_chats_page_gets_each_part_once_and_nothing_a_later_part_shows_anew():
    card = sorted(events.CARD_EVENT_TYPES - events.ROW_CARD_EVENT_TYPES)[0]  # together's
    run = regions.PushRun.of(card, 1, "c_one", {})
    run.add(card, 2, "c_one", {})
    assert run.parts["c_one"] == [regions.ChatPart(regions.TRANSCRIPT)]
    assert run.rows == []  # a card alone changes no row

    run.add(events.STATUS, 3, "c_one", {})  # every region, the transcript too
    run.add(card, 4, "c_one", {})
    run.add(card, 5, "c_one", {})
    run.add(events.TASK_CHANGED, 6, None, {})  # no chat's: nothing to show on one
    assert run.parts["c_one"] == [
        regions.ChatPart(regions.REGIONS),
        regions.ChatPart(regions.TRANSCRIPT),
    ]
    assert run.rows == ["c_one"] and list(run.parts) == ["c_one"]
    assert (run.first, run.last) == (1, 6)
