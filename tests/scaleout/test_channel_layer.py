"""The Redis channel layer carries an event from one process to a listener in another."""

from __future__ import annotations

import asyncio

import pytest

from chats import events
from tests.scaleout.conftest import REDIS_URL, redis_layer_made
from tests.scaleout.processes import manage, manage_ok

pytestmark = pytest.mark.scaleout

# Run in a child manage.py: one event in a transaction that rolls back, one that commits.
PUBLISH = """
import os
from django.db import transaction
from chats import events

owner_id = int(os.environ["OWNER_ID"])
try:
    with transaction.atomic():
        events.publish(events.CONVERSATION_UPDATED, owner_id=owner_id,
                       conversation_id="c_rolled_back", data={"status": "idle"})
        raise RuntimeError("roll back")
except RuntimeError:
    pass
with transaction.atomic():
    events.publish(events.STATUS, owner_id=owner_id,
                   conversation_id="c_committed", data={"status": "working"})
"""


def _create_owner(scaleout) -> int:
    with scaleout.connect() as conn:
        return conn.execute(
            "INSERT INTO auth_user (password, is_superuser, username, first_name, last_name,"
            " email, is_staff, is_active, date_joined)"
            " VALUES ('!', true, 'owner', '', '', '', true, true, now()) RETURNING id"
        ).fetchone()[0]


async def test_an_event_published_in_another_process_reaches_the_owners_group(scaleout):
    owner_id = await asyncio.to_thread(_create_owner, scaleout)
    layer = redis_layer_made(scaleout.channel_prefix)
    try:
        channel = await layer.new_channel()
        await layer.group_add(events.owner_group(owner_id), channel)

        done = await asyncio.to_thread(
            manage, "shell", "-c", PUBLISH, env={**scaleout.env, "OWNER_ID": str(owner_id)}
        )
        assert done.returncode == 0, done.stderr

        message = await asyncio.wait_for(layer.receive(channel), timeout=10)
        # The rolled-back event never left, and took its number with it.
        assert message == {
            "type": "conch.event",
            "event": events.STATUS,
            "seq": 1,
            "conversation_id": "c_committed",
            "data": {"status": "working"},
        }
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(layer.receive(channel), timeout=0.5)
    finally:
        await layer.flush()


async def test_a_channel_idle_longer_than_a_read_may_wait_still_hears_the_next_event(
    scaleout,
):
    """A tab's listener waits on Redis for as long as nothing happens. redis-py 8 gives
    every read a 5 s timeout, and channels_redis's list layer waited 5 s a receive: an idle
    receive failed, and the sockets it served were torn down (channels_redis#422)."""
    layer = redis_layer_made(scaleout.channel_prefix)
    try:
        channel = await layer.new_channel()
        await layer.group_add(events.owner_group(1), channel)
        idle = 5 + 1.5  # past redis-py's default read timeout
        message = {"type": "conch.event", "event": events.STATUS, "seq": 1}
        asyncio.get_running_loop().call_later(
            idle, lambda: asyncio.ensure_future(layer.group_send(events.owner_group(1), message))
        )
        assert await asyncio.wait_for(layer.receive(channel), timeout=idle + 10) == message
    finally:
        await layer.flush()


async def test_a_listener_hears_again_once_its_connection_to_redis_was_cut(scaleout):
    """Redis dropped the listener's connection (a restart, a failover, CLIENT KILL): the
    layer connects again and subscribes again, and the next events are heard. What was
    sent meanwhile is lost, as a page that sees the gap knows."""
    import redis.asyncio

    layer = redis_layer_made(scaleout.channel_prefix)
    admin = redis.asyncio.Redis.from_url(REDIS_URL)
    group = events.owner_group(1)
    try:
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        await layer.group_send(group, {"type": "conch.event", "seq": 1})
        assert (await asyncio.wait_for(layer.receive(channel), timeout=10))["seq"] == 1

        assert await admin.client_kill_filter(_type="pubsub") >= 1
        received = asyncio.ensure_future(layer.receive(channel))
        seq, deadline = 1, asyncio.get_running_loop().time() + 20
        while not received.done():  # sent until heard: those sent while it reconnects are lost
            assert asyncio.get_running_loop().time() < deadline, "never heard again"
            seq += 1
            await layer.group_send(group, {"type": "conch.event", "seq": seq})
            await asyncio.wait([received], timeout=0.2)
        assert 1 < received.result()["seq"] <= seq
    finally:
        await layer.flush()
        await admin.aclose()


# Run in child manage.py processes: one signs the owner in, another signs that session out.
SIGN_IN = """
from django.contrib.auth import get_user_model
from django.conf import settings
from django.test import Client
from chats.signout import session_group

client = Client()
client.force_login(get_user_model().objects.create(username="owner", is_superuser=True, is_staff=True))
key = client.cookies[settings.SESSION_COOKIE_NAME].value
print("signed-in", key, session_group(key))
"""
SIGN_OUT = """
import os
from django.conf import settings
from django.test import Client

client = Client(headers={"Host": "127.0.0.1:8000"})
client.cookies[settings.SESSION_COOKIE_NAME] = os.environ["SESSION"]
assert client.get("/").status_code == 200  # signed in, so the sign-out has something to end
assert client.post("/signout/").status_code == 302
"""


async def test_a_sign_out_in_another_process_reaches_that_sessions_sockets(scaleout):
    signed_in = await asyncio.to_thread(manage_ok, "shell", "-c", SIGN_IN, env=scaleout.env)
    (line,) = [line for line in signed_in.stdout.splitlines() if line.startswith("signed-in ")]
    _, session, group = line.split()
    layer = redis_layer_made(scaleout.channel_prefix)
    try:
        channel = await layer.new_channel()
        await layer.group_add(group, channel)

        await asyncio.to_thread(
            manage_ok, "shell", "-c", SIGN_OUT, env={**scaleout.env, "SESSION": session}
        )

        message = await asyncio.wait_for(layer.receive(channel), timeout=10)
        assert message == {"type": "session.ended"}
    finally:
        await layer.flush()
