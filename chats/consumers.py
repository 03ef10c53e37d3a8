"""The workspace socket: transport only. It subscribes to the owner's group and pushes.

Each push is HTML for htmx's ws extension: first the event's sequence
number (``#conch-seq``), then the regions the event touches, as out-of-band
swaps rendered by :mod:`chats.regions`, the same partials the views render.
A tab names the chat it shows in the URL (``/ws/?chat=c_…``); only that
chat's page regions are pushed to it, beside the sidebar row.

A push costs the same with one tab open or a hundred: each part of it is
rendered once per server process (:class:`SharedRenders`), and every tab it
goes to gets the same text. The renders run on a thread of their own
(:data:`RENDER_THREAD`), which keeps its database connection, not on the
thread Channels gives the views.

A socket lives no longer than the session that opened it (chats/signout.py):
it closes with :data:`CLOSE_UNAUTHENTICATED` on ``session.ended``, when the
session expires, and when a check every :data:`SESSION_RECHECK_SECONDS` finds
it gone. The page then reloads, which takes it to the sign-in.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.db import close_old_connections
from django.utils import timezone

from chats import events, regions, signout

log = logging.getLogger(__name__)

# Not signed in, or no longer: refused before the handshake, or closed after it.
CLOSE_UNAUTHENTICATED = 4401
# The session could not be checked (the database failed): the page retries.
CLOSE_CHECK_FAILED = 1011
# How often a socket asks whether its session still exists, for deletions that no
# signal reports (raw SQL, another process on the in-memory channel layer).
SESSION_RECHECK_SECONDS = 60.0
# Wake this long after the expiry, so the check sees the session as expired.
EXPIRY_MARGIN_SECONDS = 0.05

# Every push is rendered here, one at a time and in the order the events came: off
# the thread the views share, and on one connection, kept between renders.
RENDER_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="conch-render")


def _rendered(render: Callable[..., str], kwargs: dict[str, Any]) -> str:
    """Run on :data:`RENDER_THREAD`: the connection is dropped only if it broke or aged
    (CONN_MAX_AGE), as Channels' ``database_sync_to_async`` would."""
    close_old_connections()
    try:
        return render(**kwargs)
    finally:
        close_old_connections()


class SharedRenders:
    """The parts of this process's pushes, each rendered once for every tab it goes to.

    The first tab to get an event starts each part it needs; the others take the
    same text, during the render or after it. A part is kept ``keep_seconds``, long
    enough for every tab of the process to have taken the event, and at most
    ``max_kept`` parts at once. A render that fails fails for every tab alike.
    """

    def __init__(
        self, *, keep_seconds: float = 30.0, max_kept: int = 1024, executor=RENDER_THREAD
    ) -> None:
        self.keep_seconds = keep_seconds
        self.max_kept = max_kept
        self.executor = executor
        self._kept: OrderedDict[tuple, tuple[float, Future[str]]] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, key: tuple, render: Callable[..., str], **kwargs: Any) -> Future[str]:
        """The part ``key``: the render already under way or done, or a new one."""
        now = time.monotonic()
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                return kept[1]
            while self._kept and (
                len(self._kept) >= self.max_kept
                or next(iter(self._kept.values()))[0] < now - self.keep_seconds
            ):
                self._kept.popitem(last=False)
            future = self.executor.submit(_rendered, render, kwargs)
            self._kept[key] = (now, future)
            return future

    async def text(self, key: tuple, render: Callable[..., str], **kwargs: Any) -> str:
        # Shielded: a tab that closes while it waits leaves the render to the others.
        return await asyncio.shield(asyncio.wrap_future(self.start(key, render, **kwargs)))


SHARED_RENDERS = SharedRenders()


class WorkspaceConsumer(AsyncWebsocketConsumer):
    ended = False
    groups_joined: tuple[str, ...] = ()
    session_watch: asyncio.Task | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        session_key = getattr(self.scope.get("session"), "session_key", None)
        if user is None or not user.is_authenticated or not session_key:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        events.bind_loop(asyncio.get_running_loop())
        self.owner_id = user.pk
        self.session_key = session_key
        query = parse_qs(self.scope.get("query_string", b"").decode("latin1"))
        self.showing = (query.get("chat") or [None])[0] or None
        self.groups_joined = (events.owner_group(user.pk), signout.session_group(session_key))
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        # Asked after joining the session's group: a sign-out racing this connect
        # has either deleted the session by now or will be heard in the group.
        state = await self._session_state()
        if state is None:
            await self._leave()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        await self.accept()
        self.session_watch = asyncio.create_task(self._watch_session(state.expires_at))
        # The number the page should be at: a page that is behind refetches.
        hello = RENDER_THREAD.submit(_rendered, _render_hello, {"owner_id": self.owner_id})
        await self.send(text_data=await asyncio.wrap_future(hello))

    async def disconnect(self, code: int) -> None:
        if self.session_watch is not None:
            self.session_watch.cancel()
        await self._leave()

    async def receive(self, text_data=None, bytes_data=None) -> None:
        """The page only listens; what it sends goes through the views, with CSRF."""

    async def conch_event(self, message: dict) -> None:
        if self.ended:
            return
        try:
            html = await self._push(message)
        except Exception:  # at most once: the page sees the gap at the next number
            log.exception("could not render the push for %s", message.get("event"))
            return
        if not self.ended:  # the session may have ended while this rendered
            await self.send(text_data=html)

    async def _push(self, message: dict) -> str:
        """The event's part for every tab, and, if this tab shows its chat, that chat's part."""
        event, seq, chat = message["event"], message["seq"], message.get("conversation_id")
        key = (self.owner_id, seq, event, chat)
        every = SHARED_RENDERS.text(
            (*key, "every"),
            regions.render_push,
            owner_id=self.owner_id,
            event=event,
            seq=seq,
            conversation_id=chat,
        )
        if self.showing is None or self.showing != chat:
            return await every
        shown = SHARED_RENDERS.text(
            (*key, "chat"),
            regions.render_push_for_chat,
            owner_id=self.owner_id,
            event=event,
            conversation_id=chat,
            data=message.get("data"),
        )
        every_text, shown_text = await asyncio.gather(every, shown)
        return f"{every_text}\n{shown_text}" if shown_text else every_text

    async def session_ended(self, message: dict) -> None:
        await self._end(CLOSE_UNAUTHENTICATED)

    async def _end(self, code: int) -> None:
        if self.ended:
            return
        self.ended = True
        await self._leave()  # nothing more reaches it, even before the close completes
        await self.close(code=code)

    async def _leave(self) -> None:
        joined, self.groups_joined = self.groups_joined, ()
        for group in joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def _watch_session(self, expires_at) -> None:
        """Close the socket when its session expires or is found gone."""
        while not self.ended:
            wait = SESSION_RECHECK_SECONDS
            if expires_at is not None:
                until = (expires_at - timezone.now()).total_seconds() + EXPIRY_MARGIN_SECONDS
                wait = min(wait, until)
            await asyncio.sleep(max(wait, 0.0))
            try:
                state = await self._session_state()
            except Exception:
                log.warning("could not check a socket's session; closing it", exc_info=True)
                await self._end(CLOSE_CHECK_FAILED)
                return
            if state is None:
                await self._end(CLOSE_UNAUTHENTICATED)
                return
            expires_at = state.expires_at

    @database_sync_to_async
    def _session_state(self) -> signout.SessionState | None:
        return signout.session_state(session_key=self.session_key, user_id=self.owner_id)


def _render_hello(*, owner_id: int) -> str:
    """The number the page should be at: a page that is behind refetches."""
    return regions.render_seq(events.current_seq(owner_id), kind="hello")
