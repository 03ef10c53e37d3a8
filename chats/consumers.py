"""The workspace socket: transport only. It subscribes to the owner's group and pushes.

Each push is HTML for htmx's ws extension: first the event's sequence
number (``#conch-seq``), then the regions the event touches, as out-of-band
swaps rendered by :mod:`chats.regions`, the same partials the views render.
A tab names the chat it shows in the URL (``/ws/?chat=c_…``); only that
chat's page regions are pushed to it, beside the sidebar row.
"""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from chats import events, regions

CLOSE_UNAUTHENTICATED = 4401


class WorkspaceConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        events.bind_loop(asyncio.get_running_loop())
        self.owner_id = user.pk
        query = parse_qs(self.scope.get("query_string", b"").decode("latin1"))
        self.showing = (query.get("chat") or [None])[0] or None
        self.group = events.owner_group(user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        # The number the page should be at: a page that is behind refetches.
        seq = await database_sync_to_async(events.current_seq)(self.owner_id)
        await self.send(text_data=regions.render_seq(seq, kind="hello"))

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        """The page only listens; what it sends goes through the views, with CSRF."""

    async def conch_event(self, message: dict) -> None:
        html = await self._render(message)
        await self.send(text_data=html)

    @database_sync_to_async
    def _render(self, message: dict) -> str:
        return regions.render_event(
            owner_id=self.owner_id,
            event=message["event"],
            seq=message["seq"],
            conversation_id=message.get("conversation_id"),
            showing=self.showing,
            data=message.get("data"),
        )
