"""``conch discord``'s connection to Discord's Gateway, kept by discord.py.

discord.py does the Gateway's own work: it asks ``GET /gateway/bot`` where to
connect, IDENTIFYs with :data:`INTENTS`, heartbeats, and after a dropped connection
RESUMEs the session, so Discord replays what was missed, or starts afresh when it
can't. Conch reads nothing of discord.py's models: with its debug events on, each
dispatch's raw JSON comes to ``on_socket_raw_receive`` and is read here, MESSAGE_CREATE
with :func:`chats.gateway.discord.discord_inbound` (pydantic, as every door reads).
discord.py's own parse of each message is skipped, and a payload one of its other
parsers can't read is logged rather than ending the connection.

Frames are queued in the order they arrive and one reader works through them, so
messages are taken in order. Each is handed to the inbound path
(:func:`~chats.gateway.discord.discord_deliver`) on one thread of its own, whose
database connection is checked before and after each message as a request's is;
the event loop never touches the database. On stop, what was already read is still
taken before the process ends: Discord won't send it again.

MESSAGE_CREATE names only its channel. Whether that is a thread, and its parent, is
learnt from the channels and threads the Gateway sends (GUILD_CREATE, THREAD_CREATE,
THREAD_LIST_SYNC…), and asked once (``GET /channels/{id}``) for a thread not seen yet.

This module is the only one that imports discord.py: web processes never load it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import discord
from discord.gateway import DiscordWebSocket
from discord.http import Route
from django.db import close_old_connections, connection

from chats.gateway.discord import (
    THREAD_TYPES,
    Take,
    Where,
    api_base,
    discord_deliver,
    discord_inbound,
    discord_refuse,
    message_receipt,
)
from chats.gateway.inbound import InboundError
from chats.gateway.models import ChannelAccount

log = logging.getLogger(__name__)

# What Conch asks the Gateway for: servers' channels and threads (to know a thread's
# parent), messages in servers and in DMs, and their words (MESSAGE_CONTENT is a
# privileged intent: it is turned on in the Developer Portal, or IDENTIFY is refused 4014).
INTENTS = discord.Intents.none()
INTENTS.guilds = True
INTENTS.guild_messages = True
INTENTS.dm_messages = True
INTENTS.message_content = True

DRAIN_SECONDS = 30.0

ERR_TOKEN = (
    "Discord refused the bot token (401: Unauthorized). Copy it again from the Developer "
    "Portal (your application → Bot → Reset Token) and run conch_discord {account} with it."
)
ERR_INTENT = (
    "Discord refused the Message Content intent (close code 4014). Turn it on in the "
    "Developer Portal: your application → Bot → Privileged Gateway Intents → Message Content "
    "Intent, then start conch discord again."
)
ERR_UNREACHABLE = "Discord's Gateway connection ended and can't be made again: {error}"

T = TypeVar("T")


class GatewayError(Exception):
    """The Gateway can't be used as things stand (a refused token or intent): its words say why."""


class Channels:
    """What the Gateway said of each channel: its type, its parent, its name."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[int, str, str]] = {}  # id → (type, parent id, name)

    def learn(self, channel: Any) -> None:
        if not isinstance(channel, dict) or not isinstance(channel.get("id"), str):
            return
        kind = channel.get("type")
        parent = channel.get("parent_id")
        name = channel.get("name")
        self._known[channel["id"]] = (
            kind if isinstance(kind, int) else 0,
            parent if isinstance(parent, str) else "",
            name if isinstance(name, str) else "",
        )

    def learn_guild(self, guild: Any) -> None:
        if not isinstance(guild, dict):
            return
        for key in ("channels", "threads"):
            for channel in guild.get(key) or []:
                self.learn(channel)

    def forget(self, channel: Any) -> None:
        if isinstance(channel, dict) and isinstance(channel.get("id"), str):
            self._known.pop(channel["id"], None)

    def where(self, channel_id: str) -> Where | None:
        """Where a message in ``channel_id`` was: a thread's parent, the channel's name;
        None if the channel isn't known."""
        known = self._known.get(channel_id)
        if known is None:
            return None
        kind, parent, name = known
        if kind in THREAD_TYPES and parent:
            parent_name = self._known.get(parent, (0, "", ""))[2]
            return Where(thread_parent=parent, name=f"#{parent_name}" if parent_name else "")
        return Where(name=f"#{name}" if name else "")


def _in_db(work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``work`` with a sound database connection, left as a request leaves it."""
    close_old_connections()
    try:
        return work(*args, **kwargs)
    finally:
        close_old_connections()


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _forgiving(event: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
    def run(data: Any) -> None:
        try:
            parse(data)
        except Exception:
            log.exception("discord.py couldn't read a %s; carrying on", event)

    return run


def _skipped(data: Any) -> None:
    pass


def _db_close() -> None:
    connection.close()  # this thread's own connection: read here, not where it is asked


class DiscordGateway(discord.Client):
    """One Discord account's Gateway connection; its messages go to the inbound path."""

    def __init__(
        self, account: ChannelAccount, *, outcome_recorded: threading.Condition | None = None
    ) -> None:
        super().__init__(
            intents=INTENTS,
            enable_debug_events=True,  # each dispatch's raw JSON: on_socket_raw_receive
            max_messages=None,  # discord.py keeps no messages: Conch reads its own
            chunk_guilds_at_startup=False,
            member_cache_flags=discord.MemberCacheFlags.none(),
        )
        # discord.py's models are never read: its parse of each message is skipped, and a
        # payload one of its other parsers can't read is logged, never the connection's end.
        parsers = self._connection.parsers
        for event, parse in list(parsers.items()):
            parsers[event] = _forgiving(event, parse)
        parsers["MESSAGE_CREATE"] = _skipped
        self.account = account
        self.known_channels = Channels()
        self.outcomes: list[tuple[str, str]] = []  # (message id, outcome), in order taken
        # Notified as each outcome is recorded, for whoever waits on them (the run's tests).
        self.outcome_recorded = outcome_recorded or threading.Condition()
        self._frames: asyncio.Queue[str | None] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self._db_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="conch-discord-db")

    @property
    def name(self) -> str:
        return f"discord {self.account.account_id}"

    async def setup_hook(self) -> None:
        # discord.py's Client connects to its default Gateway URL; Discord asks that the
        # URL come from GET /gateway/bot (and a test's fake Gateway is only found that way).
        _, url, _ = await self.http.get_bot_gateway()
        DiscordWebSocket.DEFAULT_GATEWAY = type(DiscordWebSocket.DEFAULT_GATEWAY)(url)
        self._reader = asyncio.create_task(self._read(), name=f"conch-{self.name}-reader")

    async def on_socket_raw_receive(self, raw: str) -> None:
        self._frames.put_nowait(raw)

    async def on_disconnect(self) -> None:
        if not self.is_closed():
            log.info("%s: disconnected; reconnecting", self.name)

    async def in_db(self, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run database work on this connection's own thread, one piece at a time."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._db_thread, functools.partial(_in_db, work, *args, **kwargs)
        )

    async def finish(self) -> None:
        """Take what was already read, then let the database thread go."""
        self._frames.put_nowait(None)
        if self._reader is not None:
            try:
                await asyncio.wait_for(self._reader, DRAIN_SECONDS)
            except TimeoutError:
                log.warning("%s: %d frames left unread at stop", self.name, self._frames.qsize())
        await asyncio.get_running_loop().run_in_executor(self._db_thread, _db_close)
        self._db_thread.shutdown(wait=True)

    async def _read(self) -> None:
        while True:
            raw = await self._frames.get()
            if raw is None:
                return
            try:
                await self._frame(raw)
            except Exception:
                log.exception("%s: a Gateway frame couldn't be handled", self.name)

    async def _frame(self, raw: str) -> None:
        frame = json.loads(raw)
        kind, data = frame.get("t"), frame.get("d")
        if not isinstance(data, dict):
            return  # HELLO, heartbeats and their ACKs: discord.py's business
        if kind == "MESSAGE_CREATE":
            await self._message(data)
        elif kind == "READY":
            await self._connected(data)
        elif kind == "RESUMED":
            sequence = self.ws.sequence if self.ws is not None else None
            log.info("%s: resumed its session at event %s", self.name, sequence)
        elif kind == "GUILD_CREATE":
            self.known_channels.learn_guild(data)
        elif kind in ("CHANNEL_CREATE", "CHANNEL_UPDATE", "THREAD_CREATE", "THREAD_UPDATE"):
            self.known_channels.learn(data)
        elif kind == "THREAD_LIST_SYNC":
            for thread in data.get("threads") or []:
                self.known_channels.learn(thread)
        elif kind in ("CHANNEL_DELETE", "THREAD_DELETE"):
            self.known_channels.forget(data)

    async def _connected(self, data: dict[str, Any]) -> None:
        user = _object(data.get("user"))
        user_id, app_id = user.get("id"), _object(data.get("application")).get("id")
        changed: dict[str, str] = {}
        if isinstance(user_id, str) and user_id != self.account.bot_user_id:
            changed["bot_user_id"] = user_id
        if isinstance(app_id, str) and not self.account.platform_id:
            changed["platform_id"] = app_id
        if changed:
            for field, value in changed.items():
                setattr(self.account, field, value)
            await self.in_db(ChannelAccount.objects.filter(pk=self.account.pk).update, **changed)
        log.info(
            "%s: connected as @%s (session %s)",
            self.name,
            user.get("username") or user_id,
            data.get("session_id"),
        )

    async def _where(self, data: dict[str, Any]) -> Where | None:
        """What is known of a server message's channel, asking Discord once for a thread
        (or a channel of unknown type) not seen yet."""
        channel_id = data.get("channel_id")
        if not isinstance(channel_id, str):
            return None
        known = self.known_channels.where(channel_id)
        if known is not None or not data.get("guild_id"):
            return known
        kind = data.get("channel_type")
        if isinstance(kind, int) and kind not in THREAD_TYPES:
            return None
        try:
            channel = await self.http.get_channel(channel_id)
        except (discord.HTTPException, OSError) as exc:
            log.warning("%s: channel %s couldn't be looked up: %s", self.name, channel_id, exc)
            return None
        self.known_channels.learn(channel)
        return self.known_channels.where(channel_id)

    async def _message(self, data: dict[str, Any]) -> None:
        receipt = message_receipt(data)
        try:
            where = self.known_channels.where(str(data.get("channel_id")))
            asked = discord_inbound(data, account=self.account, where=where)
            if isinstance(asked, Take) and where is None and data.get("guild_id"):
                looked_up = await self._where(data)
                if looked_up is not None:
                    asked = discord_inbound(data, account=self.account, where=looked_up)
        except InboundError as exc:
            await self.in_db(discord_refuse, self.account, receipt, exc)
            self._record(receipt, "refused")
            return
        outcome = await self.in_db(discord_deliver, self.account, asked)
        self._record(receipt, outcome)

    def _record(self, receipt: str, outcome: str) -> None:
        with self.outcome_recorded:
            self.outcomes.append((receipt, outcome))
            self.outcome_recorded.notify_all()


class GatewayRun:
    """One run of ``conch discord``: connect, take messages until :meth:`stop`, then
    finish taking what was read. :meth:`run` blocks; :meth:`stop` may come from any thread."""

    def __init__(self, account: ChannelAccount, token: str) -> None:
        self.account = account
        self.token = token
        self.client: DiscordGateway | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stop_asked = threading.Event()
        # Notified as the client records each message's outcome (DiscordGateway.outcomes).
        self.outcome_recorded = threading.Condition()

    def run(self) -> None:
        """Run until stopped. Raises :class:`GatewayError` when Discord refuses the
        connection in a way retrying can't fix."""
        asyncio.run(self._main())

    def stop(self) -> None:
        self._stop_asked.set()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop.set)

    @property
    def name(self) -> str:
        return self.account.account_id

    def _refusal(self, exc: Exception) -> GatewayError:
        """Why discord.py gave up, in words that say what to do."""
        if isinstance(exc, discord.LoginFailure):
            return GatewayError(ERR_TOKEN.format(account=self.name))
        if isinstance(exc, discord.PrivilegedIntentsRequired):
            return GatewayError(ERR_INTENT)
        if (
            isinstance(exc, discord.ConnectionClosed) and exc.code == 4004
        ):  # "Authentication failed"
            return GatewayError(ERR_TOKEN.format(account=self.name))
        return GatewayError(ERR_UNREACHABLE.format(error=exc or exc.__class__.__name__))

    @property
    def taken(self) -> int:
        """Messages handed to the inbound path so far."""
        outcomes = self.client.outcomes if self.client is not None else []
        return sum(1 for _, outcome in outcomes if outcome not in ("ignored", "refused"))

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stop_asked.is_set():
            self._stop.set()
        Route.BASE = api_base()  # discord.py's REST base: Discord's, or a test's fake
        client = self.client = DiscordGateway(self.account, outcome_recorded=self.outcome_recorded)
        log.info("discord %s: connecting to %s", self.name, Route.BASE)
        try:
            async with client:
                running = asyncio.create_task(client.start(self.token))
                stopping = asyncio.create_task(self._stop.wait())
                await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                if not running.done():
                    await client.close()
                try:
                    await running
                except Exception as exc:
                    if self._stop.is_set():  # stopped while connecting: nothing to report
                        log.info("discord %s: stopped while connecting (%s)", self.name, exc)
                        return
                    raise self._refusal(exc) from None
        finally:
            await client.finish()
            log.info("discord %s: stopped", self.name)
