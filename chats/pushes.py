"""A server process's pushes: each event heard once here, rendered once, sent to every tab.

A process holds one listener per owner with tabs open in it (:class:`OwnerTabs`):
one channel of its own in the owner's group, whatever the number of tabs. An
event reaches the process once through the channel layer (the in-memory queue,
or one message through Redis), its parts are rendered once on
:data:`RENDER_THREAD`, and the same text goes to each tab, in the order the
events were numbered. A tab costs one socket write a run of events that shows it
something, nothing more: no channel-layer message, task wake-up or thread hop of its
own.

The renders run on a thread of their own, which keeps its database connection,
not on the thread Channels gives the views, so a push never queues behind a view
and a view never behind a hundred pushes. What needs no database (a running reply's
words, a run's marker alone) renders on another, :data:`WORDS_THREAD`, so words
never wait there behind a page; and a chat's part still rendering holds back only
the tabs showing that chat (:class:`Lane`), each tab's pushes still in order.

A running reply's words take no number (``events.UNNUMBERED_TYPES``) and wait for
nothing: each chat's newest words go to the tabs showing it as soon as the last of
them went, ahead of a page of that chat still rendering. Once that page is sent
(its running reply's words drawn empty, as they are never stored), the words heard
since the chat's last numbered event go again after it (:meth:`OwnerTabs.words_send`).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from channels.layers import BaseChannelLayer
from django.db import connections

from chats import events, regions

log = logging.getLogger(__name__)

# Every push is rendered here, one at a time and in the order the events came: off
# the thread the views share, and on one connection, kept between renders.
RENDER_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="conch-render")
# What renders without the database (a run's marker alone, a running reply's words)
# renders here: a chat's page rendering on RENDER_THREAD never holds up another's words.
WORDS_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="conch-render-words")
# A listener whose channel layer failed tries again after this long.
RETRY_SECONDS = 1.0
# At most this many events in one push, however many were heard while the last rendered.
MAX_RUN = 500


def rendered(render: Callable[..., str], kwargs: dict[str, Any]) -> str:
    """Run on :data:`RENDER_THREAD`, whose connection stays open between renders."""
    try:
        return render(**kwargs)
    finally:
        _keep_connections()


def _keep_connections() -> None:
    """Keep the render thread's connections, whatever CONN_MAX_AGE says, unless one broke.

    It is one thread a process, so one connection (one PostgreSQL slot, where every
    other thread closes its own after each use): opening one for every push cost more
    than the push (a connection and its sign-in on PostgreSQL, the file and its
    PRAGMAs on SQLite). One that failed is tested, as Django does, and dropped if dead.
    """
    for conn in connections.all(initialized_only=True):
        if conn.connection is None or not conn.errors_occurred:
            continue
        if conn.is_usable():
            conn.errors_occurred = False
        else:
            conn.close()


async def render(render: Callable[..., str], **kwargs: Any) -> str:
    """``render(**kwargs)`` on :data:`RENDER_THREAD`, awaited from the event loop."""
    return await asyncio.wrap_future(RENDER_THREAD.submit(rendered, render, kwargs))


async def render_words(render: Callable[..., str], **kwargs: Any) -> str:
    """``render(**kwargs)``, which reads no database, on :data:`WORDS_THREAD`."""
    return await asyncio.wrap_future(WORDS_THREAD.submit(render, **kwargs))


class Lane:
    """The pushes waiting for the tabs showing one chat, in order, behind a part of that
    chat still rendering: each the run, what every tab gets, and the chat's part (a
    render under way, or None when the run has none for it)."""

    def __init__(self) -> None:
        self.waiting: deque[tuple[regions.PushRun, str, asyncio.Future[str] | None]] = deque()
        self.task: asyncio.Task[None] | None = None


class Tab(Protocol):
    """What a listener needs of a tab: the chat it shows, the person's time zone (the
    page's times are said in it), and a way to send it text."""

    showing: str | None
    zone: ZoneInfo

    async def push(self, text: str) -> None: ...


# A chat as the tabs showing it in one time zone see it: a chat's part is rendered once
# for each (nearly always one), and its lane holds back only those tabs.
View = tuple[str, ZoneInfo]


def view_of(tab: Tab) -> tuple[str | None, ZoneInfo]:
    return (tab.showing, tab.zone)


class OwnerTabs:
    """This process's tabs of one owner, and the one channel that hears the owner's
    events for all of them.

    What is heard while a push renders waits, and goes out as one push for the run of
    events (:class:`chats.regions.PushRun`): a burst of events costs a render a chat it
    changed, not one an event, and the last of them reaches the tabs no later for it.

    A tab is added before it reads the number its hello carries (see
    :meth:`chats.consumers.WorkspaceConsumer.connect`) and is sent nothing until it
    is :meth:`ready`: pushes meanwhile wait for it in order, so no event falls
    between its hello and its first push.

    A run that shows a tab nothing (another chat's running words: no row, no part of
    the chat it shows) is not sent to it: its numbers go with the next push the tab is
    sent, whose marker then starts at the first of them (``data-first``), so the page
    sees no gap. Ten replies writing at once cost each tab the words of the chat it
    shows, not a push for every word of the ten.
    """

    def __init__(self, owner_id: int, layer: BaseChannelLayer) -> None:
        self.owner_id = owner_id
        self.layer = layer
        self.group = events.owner_group(owner_id)
        self.tabs: dict[Tab, list[str] | None] = {}  # each tab, and what waits for it
        self.owed: dict[Tab, int] = {}  # each tab's first number not sent it since its last push
        self.lanes: dict[View, Lane] = {}  # by chat and zone, while a part of it renders
        self.channel = ""
        self.heard: list[dict[str, Any]] = []
        # Each chat's running reply's newest words, heard since its last numbered event
        # that redraws its page, and the task sending a chat's words while it does.
        self.words: dict[str, regions.Words] = {}
        self.words_sending: dict[str, asyncio.Task[None]] = {}
        self.words_again: set[str] = set()  # newer words came while they were sent
        self._more = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._joined: asyncio.Task[None] = asyncio.ensure_future(self._join())

    async def _join(self) -> None:
        self.channel = await self.layer.new_channel()
        await self.layer.group_add(self.group, self.channel)
        self._tasks = [
            asyncio.ensure_future(self._hear()),
            asyncio.ensure_future(self._push_heard()),
        ]

    async def joined(self) -> None:
        await asyncio.shield(self._joined)

    async def _hear(self) -> None:
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # the layer failed (Redis went away): the pages see the gap
                log.warning("could not hear %s; trying again", self.group, exc_info=True)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            kind = message.get("type")
            if kind == "conch.event":
                self.take([message])
            elif kind == events.EVENTS_MESSAGE:  # those that waited for one send, together
                self.take(message.get("events") or ())

    def take(self, messages: Iterable[dict[str, Any]]) -> None:
        """Events heard: the numbered ones wait for the next push of their run; a reply's
        words go to the tabs showing its chat, now."""
        numbered = False
        for message in messages:
            chat = message.get("conversation_id")
            if message.get("event") in events.UNNUMBERED_TYPES:
                words = regions.words_of(message.get("data"))
                if chat and words is not None:
                    self.words[chat] = words
                    self.words_send(chat)
                continue
            if chat and regions.chat_part(message.get("event", "")) is not None:
                # The page it redraws reads the chat afresh: words heard before it may
                # be stored in it by then, and must not be shown again after it.
                self.words.pop(chat, None)
            self.heard.append(message)
            numbered = True
        if numbered:
            self._more.set()

    def words_send(self, chat: str) -> None:
        """Send the chat's newest words to the tabs showing it; if a send of its words is
        under way, once that one is done (what comes meanwhile goes as one, the newest)."""
        sending = self.words_sending.get(chat)
        if sending is not None and not sending.done():
            self.words_again.add(chat)
            return
        self.words_sending[chat] = asyncio.ensure_future(self._send_words(chat))

    async def _send_words(self, chat: str) -> None:
        this = asyncio.current_task()
        try:
            while True:
                self.words_again.discard(chat)
                words = self.words.get(chat)
                if words is None or not any(tab.showing == chat for tab in self.tabs):
                    return
                try:
                    text = await render_words(regions.render_words, words=words)
                except Exception:  # unnumbered: the next words, or the page, show them
                    log.exception("could not render a reply's words for %s", chat)
                    return
                for tab in [tab for tab in self.tabs if tab.showing == chat]:
                    await self._send_one(tab, text)
                if chat not in self.words_again:
                    return
        finally:
            if self.words_sending.get(chat) is this:
                del self.words_sending[chat]

    async def _push_heard(self) -> None:
        while True:
            await self._more.wait()
            self._more.clear()
            heard, self.heard = self.heard, []
            for run in runs(heard):
                try:
                    await self.push(run)
                except Exception:  # at most once: each page sees the gap at the next number
                    log.exception("could not push events %s to %s", run.first, run.last)

    async def push(self, run: regions.PushRun) -> None:
        """One run of events to every tab here: what every tab gets, rendered once, then
        to the tabs showing a chat the run changed, that chat's part too, rendered once
        for each time zone those tabs are in (nearly always one).

        A chat's part (its page, its transcript) goes to the chat's :class:`Lane`, and
        the next run is taken up while it renders: the tabs showing that chat get it, and
        what follows for them, in order, as it is ready; the other tabs don't wait for it.
        """
        shown: set[View] = {
            (tab.showing, tab.zone)
            for tab in self.tabs
            if tab.showing is not None and tab.showing in run.parts
        }
        every_render = asyncio.ensure_future(
            (render if run.rows else render_words)(
                regions.render_run, owner_id=self.owner_id, run=run
            )
        )
        chat_renders = {
            (chat, zone): asyncio.ensure_future(
                render(
                    regions.render_run_for_chat,
                    owner_id=self.owner_id,
                    conversation_id=chat,
                    parts=run.parts[chat],
                    zone=zone,
                )
            )
            for chat, zone in shown
        }
        queued = False
        try:
            every = await every_render
            # A chat whose tabs wait behind a part still rendering: this run waits there too.
            for view, lane in self.lanes.items():
                if view not in chat_renders:
                    self._queue(view, lane, run, every, None)
            for view, chat_render in chat_renders.items():
                self._queue(view, self.lanes.setdefault(view, Lane()), run, every, chat_render)
            queued = True
            # The tabs elsewhere need nothing more: sent now, while the chats' parts render.
            elsewhere = [tab for tab in self.tabs if view_of(tab) not in self.lanes]
            await self._send(every, elsewhere, run, not run.rows)
        finally:
            every_render.cancel()
            if not queued:
                for pending in chat_renders.values():
                    pending.cancel()

    def _queue(
        self,
        view: View,
        lane: Lane,
        run: regions.PushRun,
        every: str,
        page: asyncio.Future[str] | None,
    ) -> None:
        lane.waiting.append((run, every, page))
        if lane.task is None:
            lane.task = asyncio.ensure_future(self._send_lane(view, lane))

    async def _send_lane(self, view: View, lane: Lane) -> None:
        """Send what waits in a chat's lane to the tabs showing it (in its zone), in order,
        each as soon as its part is rendered; the lane goes once nothing waits in it."""
        try:
            while lane.waiting:
                run, every, rendering = lane.waiting[0]
                page = ""
                try:
                    if rendering is not None:
                        page = await rendering
                except asyncio.CancelledError:
                    raise
                except Exception:  # at most once: each page sees the gap at the next number
                    log.exception("could not push events %s to %s", run.first, run.last)
                    lane.waiting.popleft()
                    continue
                lane.waiting.popleft()
                text = f"{every}\n{page}" if page else every
                showing = [tab for tab in self.tabs if view_of(tab) == view]
                await self._send(text, showing, run, not run.rows and not page)
                if page and view[0] in self.words:  # drawn with its words empty: again
                    self.words_send(view[0])
        finally:
            if self.lanes.get(view) is lane:
                del self.lanes[view]
            for _, _, rendering in lane.waiting:
                if rendering is not None:
                    rendering.cancel()

    async def _send(
        self, text: str, tabs: list[Tab], run: regions.PushRun, numbers_only: bool
    ) -> None:
        """``text`` to these tabs; if it is only the run's numbers, they are owed instead."""
        for tab in tabs:
            if tab not in self.tabs:  # it left meanwhile
                continue
            if numbers_only:
                self.owed.setdefault(tab, run.first)
                continue
            owed = self.owed.pop(tab, None)
            await self._send_one(tab, text if owed is None else regions.run_marked_from(text, owed))

    async def _send_one(self, tab: Tab, text: str) -> None:
        """``text`` to the tab, or, until it is :meth:`ready`, to what waits for it."""
        waiting = self.tabs.get(tab)
        if tab not in self.tabs:
            return
        if waiting is not None:
            waiting.append(text)
            return
        try:
            await tab.push(text)
        except Exception:
            log.warning("could not send a push to a tab", exc_info=True)

    def add(self, tab: Tab) -> None:
        self.tabs[tab] = []

    async def ready(self, tab: Tab) -> None:
        """Send the tab what waited for it, then everything as it comes."""
        while True:
            waiting = self.tabs.get(tab)
            if not waiting:
                break
            self.tabs[tab] = []
            for text in waiting:
                await tab.push(text)
        if tab in self.tabs:
            self.tabs[tab] = None

    def close(self) -> None:
        """The owner's last tab here left: stop listening and leave the group."""
        for task in [*self._tasks, *self.words_sending.values()]:
            task.cancel()
        for lane in list(self.lanes.values()):
            if lane.task is not None:
                lane.task.cancel()
        asyncio.ensure_future(self._leave())

    async def _leave(self) -> None:
        try:
            await self._joined
            await self.layer.group_discard(self.group, self.channel)
        except Exception:  # the group forgets a channel nobody reads anyway (expiry)
            log.warning("could not leave %s", self.group, exc_info=True)


def runs(heard: list[dict[str, Any]]) -> list[regions.PushRun]:
    """The events heard, in their numbers' order, as runs of consecutive numbers. A
    number missing (lost on the way) ends a run, so the page sees the gap and refetches."""
    found: list[regions.PushRun] = []
    for message in sorted(heard, key=lambda message: message["seq"]):
        seq, run = message["seq"], found[-1] if found else None
        args = (message["event"], seq, message.get("conversation_id"), message.get("data"))
        if run is not None and seq == run.last + 1 and seq - run.first < MAX_RUN:
            run.add(*args)
        elif run is None or seq > run.last:  # a number heard twice is pushed once
            found.append(regions.PushRun.of(*args))
    return found


# Each event loop's listeners (a test may run several loops one after another).
_listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, OwnerTabs]] = (
    weakref.WeakKeyDictionary()
)


def listeners() -> dict[int, OwnerTabs]:
    """This loop's listeners, by owner."""
    return _listeners.setdefault(asyncio.get_running_loop(), {})


async def tab_add(tab: Tab, *, owner_id: int, layer: BaseChannelLayer) -> OwnerTabs:
    """Hear the owner's events for this tab: through the process's listener, made for
    the owner's first tab here. Call :meth:`OwnerTabs.ready` once the tab may be sent to."""
    here = listeners()
    owner_tabs = here.get(owner_id)
    if owner_tabs is None:
        owner_tabs = here[owner_id] = OwnerTabs(owner_id, layer)
    owner_tabs.add(tab)
    try:
        await owner_tabs.joined()
    except BaseException:  # the layer failed it: the next tab makes a listener afresh
        owner_tabs.tabs.pop(tab, None)
        if here.get(owner_id) is owner_tabs:
            del here[owner_id]
        raise
    return owner_tabs


def tab_remove(tab: Tab, *, owner_id: int) -> None:
    """The tab hears no more; the owner's last tab here takes the listener with it."""
    here = listeners()
    owner_tabs = here.get(owner_id)
    if owner_tabs is None or tab not in owner_tabs.tabs:
        return
    del owner_tabs.tabs[tab]
    owner_tabs.owed.pop(tab, None)
    if not owner_tabs.tabs:
        del here[owner_id]
        owner_tabs.close()
