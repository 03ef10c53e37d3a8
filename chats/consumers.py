"""The workspace socket: transport only. It subscribes to the owner's group and pushes.

Each push is HTML for htmx's ws extension: first the event's sequence
number (``#conch-seq``), then the regions the event touches, as out-of-band
swaps rendered by :mod:`chats.regions`, the same partials the views render.
A tab names the chat it shows in the URL (``/ws/?chat=c_…``); only that
chat's page regions are pushed to it, beside the sidebar row.

A push costs the same with one tab open or a hundred: the process hears each
event once and renders it once (:mod:`chats.pushes`), and every tab it goes to
gets the same text, written to its socket and nothing more.

A socket lives no longer than the session that opened it (chats/signout.py):
it closes with :data:`CLOSE_UNAUTHENTICATED` on ``session.ended``, when the
session expires, and when a check every :data:`SESSION_RECHECK_SECONDS` finds
it gone. The page then reloads, which takes it to the sign-in.

A socket with no session is accepted and closed at once with that same code,
never refused at the handshake: a browser sees a refused handshake only as
1006, which reads as "the server is away", so a tab whose sign-out it missed
(its socket was down at that moment) would say "reconnecting…" forever. Nothing
is sent before the close, and another site's page is still refused by the origin
check in front of this consumer.
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.utils import timezone

from chats import events, pushes, regions, signout
from conch.http import TIME_ZONE_COOKIE, zone_named

log = logging.getLogger(__name__)

# Not signed in, or no longer: closed with this code, which the page answers by reloading.
CLOSE_UNAUTHENTICATED = 4401
# The session could not be checked (the database failed): the page retries.
CLOSE_CHECK_FAILED = 1011
# How often a socket asks whether its session still exists, for deletions that no
# signal reports (raw SQL, another process on the in-memory channel layer).
SESSION_RECHECK_SECONDS = 60.0
# Wake this long after the expiry, so the check sees the session as expired.
EXPIRY_MARGIN_SECONDS = 0.05


class WorkspaceConsumer(AsyncWebsocketConsumer):
    ended = False
    owner_tabs: pushes.OwnerTabs | None = None
    groups_joined: tuple[str, ...] = ()
    session_watch: asyncio.Task | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        session_key = getattr(self.scope.get("session"), "session_key", None)
        if user is None or not user.is_authenticated or not session_key:
            await self._signed_out()
            return
        events.bind_loop(asyncio.get_running_loop())
        self.owner_id = user.pk
        self.session_key = session_key
        query = parse_qs(self.scope.get("query_string", b"").decode("latin1"))
        self.showing = (query.get("chat") or [None])[0] or None
        # The browser's time zone, from the cookie its handshake carries, as the page's own.
        self.zone = zone_named((self.scope.get("cookies") or {}).get(TIME_ZONE_COOKIE, ""))
        self.groups_joined = (signout.session_group(session_key),)
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        # The owner's events come through the process's listener; they wait for this
        # tab until its hello is sent, so none falls between the two.
        self.owner_tabs = owner_tabs = await pushes.tab_add(
            self, owner_id=self.owner_id, layer=self.channel_layer
        )
        # Asked after joining the session's group: a sign-out racing this connect
        # has either deleted the session by now or will be heard in the group.
        state = await self._session_state()
        if state is None:
            await self._leave()
            await self._signed_out()
            return
        await self.accept()
        self.session_watch = asyncio.create_task(self._watch_session(state.expires_at))
        # The number the page should be at: a page that is behind refetches.
        await self.send(text_data=await pushes.render(_render_hello, owner_id=self.owner_id))
        await owner_tabs.ready(self)

    async def _signed_out(self) -> None:
        """Tell the page its session is gone: accepted and closed at once, nothing sent."""
        self.ended = True
        await self.accept()
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def disconnect(self, code: int) -> None:
        if self.session_watch is not None:
            self.session_watch.cancel()
        await self._leave()

    async def receive(self, text_data=None, bytes_data=None) -> None:
        """The page only listens; what it sends goes through the views, with CSRF."""

    async def push(self, text: str) -> None:
        """An event's push, from the process's listener (chats/pushes.py)."""
        if not self.ended:  # the session may have ended while it rendered
            await self.send(text_data=text)

    async def session_ended(self, message: dict) -> None:
        await self._end(CLOSE_UNAUTHENTICATED)

    async def _end(self, code: int) -> None:
        if self.ended:
            return
        self.ended = True
        await self._leave()  # nothing more reaches it, even before the close completes
        await self.close(code=code)

    async def _leave(self) -> None:
        if self.owner_tabs is not None:
            pushes.tab_remove(self, owner_id=self.owner_id)
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
