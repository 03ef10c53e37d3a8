"""The workspace socket: transport only. It subscribes to the owner's group and pushes."""

from __future__ import annotations

import asyncio

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from chats import events


class WorkspaceConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        events.bind_loop(asyncio.get_running_loop())
        self.group = events.owner_group(user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def conch_event(self, message: dict) -> None:
        await self.send_json(
            {
                "event": message["event"],
                "seq": message["seq"],
                "conversation_id": message.get("conversation_id"),
                "data": message.get("data", {}),
            }
        )
