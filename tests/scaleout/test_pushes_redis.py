"""On Redis, a process's tabs hear their owner's events through one listener (chats/pushes.py)."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.layers import channel_layers
from django.db import close_old_connections, transaction
from django.test import override_settings

from chats import events
from chats.models import Conversation, Status
from conch.settings import redis_channel_layer
from tests.factories import ChatFactory
from tests.scaleout.conftest import REDIS_URL
from tests.web.sockets import seq_of, session_cookie, socket

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

TIMEOUT = 10


def status_changed(conversation: Conversation, status: str) -> None:
    with transaction.atomic():
        Conversation.objects.filter(pk=conversation.pk).update(status=status)
        conversation.status = status
        events.publish_chat(conversation, events.STATUS)


@pytest.fixture
def redis_layer(scaleout):
    layers = {"default": redis_channel_layer(REDIS_URL, prefix=scaleout.channel_prefix)}
    with override_settings(CHANNEL_LAYERS=layers):
        yield channel_layers["default"]


async def test_every_event_reaches_every_tab_while_the_tabs_own_channels_receive_too(
    redis_layer, owner, agent, workspace
):
    """Each tab's consumer receives on a channel of its own (for its session's sign-out)
    beside the process's listener. channels_redis hears a process's channels on one key
    only if they share its prefix: with another, the owner's events waited whenever a
    tab's channel held the receive, which it does after the listener's first event."""
    chat = await database_sync_to_async(ChatFactory)(owner=owner, folder=str(workspace))
    cookie = await database_sync_to_async(session_cookie)(owner)
    tabs = [socket(cookie=cookie) for _ in range(2)]
    try:
        for tab in tabs:
            connected, _ = await tab.connect(timeout=TIMEOUT)
            assert connected
            assert seq_of(await tab.receive_from(timeout=TIMEOUT))[1] == "hello"
        for status in (Status.WORKING, Status.IDLE, Status.NEEDS_YOU):
            await database_sync_to_async(status_changed)(chat, status)
            pushes = await asyncio.gather(*(tab.receive_from(timeout=TIMEOUT) for tab in tabs))
            assert all(f"is-{status}" in push for push in pushes)
    finally:
        for tab in tabs:
            await tab.disconnect()
        await database_sync_to_async(close_old_connections)()
        await redis_layer.flush()
