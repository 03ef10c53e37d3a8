"""Live updates with many tabs open: how long a change takes to reach every tab.

Real clients against a real server. Each point starts ``conch serve --port 0``
in a throwaway CONCH_HOME holding an owner with ``--chats`` chats (activity
spread over 30 days), follows the one-time sign-in link for a session, and
opens ``N`` WebSocket tabs on ``/ws/`` with the page's Origin and the session
cookie: a quarter of them show a chat (``/ws/?chat=c_…``), the rest the list.
It then sends a message at a fixed rate (``--interval``) to one of ten chats,
as the composer does (an HTMX POST with the CSRF token). The chats' persona has
no model, so each message runs a real reply that answers in plain words: the
send publishes ``status`` (working), the runner then ends the reply and
publishes ``status`` again (idle), with a ``conversation.updated`` between.

Latency of an event at a tab: from the moment the event is committed (the
server notes it, see below) to the moment that tab's socket receives the push
carrying it (each push starts with ``#conch-seq``, its event's number, or the
first and last of the run of events it carries, each counted at that push). The
figure judged is over every ``status`` event at every tab; every event of the
changes is reported beside it. A push that hasn't arrived when the wait ends
(``--drain`` seconds after the last change) counts with the time waited so far,
a lower bound, shown as ``>=``; a page that misses one refetches, so a lost
push is late, never free.

The commit moments come from the server itself: each server runs with a
subscriber (chats.hooks.subscribe, called as each event's transaction commits,
before it goes to the channel layer) that appends ``seq type time`` to a file.
``time.monotonic()`` is the machine's CLOCK_MONOTONIC, the same in every
process, so the bench compares it with its own receipt times.

``--redis``: PostgreSQL (a database made for the bench from
``postgres://postgres@127.0.0.1:5432/test`` and dropped after) and the Redis
channel layer (127.0.0.1:6379, under a prefix of the bench's own, whose keys
are removed after), with two servers; the tabs alternate between them and the
messages are sent through the first, so half the tabs hear each change
through Redis.

    .venv/bin/python bench/bench_events.py [--tabs 1,10,30,100] [--interval 1]
        [--chats 50] [--seconds 20] [--redis]

Goal: p50 <= 50 ms and p99 <= 200 ms at 100 tabs with one change a
second. Every server, home, database and Redis key it makes is removed at the
end, on Ctrl-C too.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import http.cookiejar
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The Conch beside this bench, not one the virtualenv was installed from (another checkout).
sys.path.insert(0, str(ROOT))
START_TIMEOUT = 90
GOAL_P50_MS = 50.0
GOAL_P99_MS = 200.0
# A tab tries this many times to open its socket, as conch.js retries.
OPEN_ATTEMPTS = 8
# Messages go round these many chats; the tabs that show a chat show one of them.
DRIVEN_CHATS = 10
POSTGRES_ADMIN_URL = "postgres://postgres@127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/0"
# Every marker in a push: <span id="conch-seq" data-seq="12" data-kind="event" …>.
SEQ_TAG = re.compile(r'<span id="conch-seq"[^>]*>')
SEQ_NUMBER = re.compile(r'data-seq="(\d+)"')
SEQ_KIND = re.compile(r'data-kind="(\w+)"')
# A push that carries a run of events marks the first of them too (chats/regions.py).
SEQ_FIRST = re.compile(r'data-first="(\d+)"')
# The variables of this process's own Conch, if any: the servers get only the bench's.
_OURS = ("CONCH_", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")


# ---------------------------------------------------------------------------
# Inside the server's process (``bench_events.py _serve``) and the seeding one (``_seed``)


def serve_with_clock(clock: str, serve_args: list[str]) -> None:
    """``conch serve``, with a subscriber noting when each event commits.

    Subscribers are called as the event's transaction commits, before the event
    goes to the channel layer (chats/events.py), so the time noted is when the
    change became true: all the fan-out after it is in the figure."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "conch.settings"
    import django

    django.setup()
    from chats import hooks
    from conch import cli

    out = open(clock, "a", buffering=1)  # noqa: SIM115 (open for the server's life)
    lock = threading.Lock()

    def note(event) -> None:
        line = f"{event.seq} {event.type} {event.conversation_id or '-'} {time.monotonic():.6f}\n"
        with lock:
            out.write(line)

    hooks.subscribe(note)
    cli.main(["serve", *serve_args])


def seed(chats: int) -> None:
    """The owner and their chats: each with an exchange, last active over the past 30 days."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "conch.settings"
    import django

    django.setup()
    from datetime import timedelta

    from django.core.management import call_command
    from django.db import transaction
    from django.utils import timezone

    from chats.models import Conversation, EntryRole
    from chats.runtime.chats import conversation_create, entry_append
    from chats.signin import owner_ensure

    call_command("migrate", verbosity=0)
    owner = owner_ensure()
    now = timezone.now()
    for n in range(chats):
        with transaction.atomic():
            chat = conversation_create(owner=owner, title=f"Bench chat {n + 1}")
            entry_append(conversation=chat, role=EntryRole.PERSON, text=f"Question {n + 1}?")
            entry_append(conversation=chat, role=EntryRole.ASSISTANT, text=f"An answer to {n + 1}.")
            # The driven chats are the most recent; the rest spread over 30 days.
            Conversation.objects.filter(pk=chat.pk).update(
                last_interaction_at=now - timedelta(days=30 * n / max(chats, 1))
            )
    listed = Conversation.objects.filter(owner=owner).order_by("-last_interaction_at")
    for public_id in listed.values_list("public_id", flat=True)[:DRIVEN_CHATS]:
        print(public_id)


# ---------------------------------------------------------------------------
# The bench's side: servers, homes, the database and Redis


@dataclass
class Server:
    process: subprocess.Popen
    url: str
    signin: str
    clock: Path
    log: list[str] = field(default_factory=list)


def server_env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OURS)}
    env.update(
        CONCH_HOME=str(home),
        CONCH_SECRET_KEY="bench-events-is-not-secret",
        CONCH_LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
        DATABASE_URL="",
        REDIS_URL="",
        CONCH_MODEL_URL="",
        CONCH_MODEL="",
    )
    env.update(extra)
    return env


def start_server(
    home: Path, env: dict[str, str], running: list[subprocess.Popen], *, script: str = __file__
) -> Server:
    """Start a server; it joins ``running`` at once, so an interrupt meanwhile stops it.

    ``script`` is the bench whose ``_serve`` runs it (another bench notes other times)."""
    clock = home / "event-clock.txt"
    process = subprocess.Popen(
        [sys.executable, script, "_serve", str(clock), "--port", "0"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    running.append(process)
    found = threading.Event()
    lines: list[str] = []
    urls: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip())
            match = re.search(r"^\s+(http://\S+)/signin/\S+/$", line)
            if match and not urls:
                urls.extend([match.group(1), line.strip()])
                found.set()

    threading.Thread(target=read, daemon=True).start()
    if not found.wait(START_TIMEOUT):
        raise SystemExit("conch serve did not start:\n" + "\n".join(lines[-20:]))
    return Server(process, urls[0], urls[1], clock, lines)


def stop_server(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


class Backing:
    """Where the servers keep their data: the embedded SQLite in each home, or one
    PostgreSQL database with the Redis channel layer. Made once and seeded; each
    point gets a fresh copy, so a backlog left by one point can't slow the next."""

    def __init__(self, *, redis: bool, workdir: Path) -> None:
        self.redis = redis
        self.workdir = workdir
        token = uuid.uuid4().hex[:10]
        self.template_db = f"conch_bench_events_{token}"
        self.prefix = f"conch-bench-events-{token}"
        self.databases: list[str] = []
        self.dropped: list[str] = []
        self.keys_removed = 0
        self.template_home = workdir / "template-home"

    def db_url(self, name: str) -> str:
        return f"postgres://postgres@127.0.0.1:5432/{name}"

    def _admin(self, statement: str, name: str) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
            admin.execute(sql.SQL(statement).format(sql.Identifier(name)))

    def seed(self, chats: int) -> list[str]:
        self.template_home.mkdir()
        extra = {}
        if self.redis:
            self._admin("CREATE DATABASE {}", self.template_db)
            self.databases.append(self.template_db)
            extra["DATABASE_URL"] = self.db_url(self.template_db)
        done = subprocess.run(
            [sys.executable, __file__, "_seed", str(chats)],
            cwd=ROOT,
            env=server_env(self.template_home, extra),
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode:
            raise SystemExit(f"seeding failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout.split()

    def homes(self, point: str, count: int) -> list[tuple[Path, dict[str, str]]]:
        """``count`` homes for one point's servers, copies of the seeded one (its keys
        and, on SQLite, its database); on PostgreSQL one copy of the database for all."""
        extra: dict[str, str] = {}
        if self.redis:
            name = f"{self.template_db}_{point}"
            self._admin(f"CREATE DATABASE {{}} TEMPLATE {self.template_db}", name)
            self.databases.append(name)
            extra = {
                "DATABASE_URL": self.db_url(name),
                "REDIS_URL": REDIS_URL,
                "CONCH_CHANNEL_PREFIX": self.prefix,
            }
        made = []
        for n in range(count):
            home = self.workdir / f"{point}-{n}"
            shutil.copytree(self.template_home, home)
            made.append((home, server_env(home, extra)))
        return made

    def drop(self, point_db: str | None = None) -> None:
        """Drop the point's database (or all of them), and the bench's Redis keys."""
        for name in [point_db] if point_db else list(reversed(self.databases)):
            try:
                self._admin("DROP DATABASE IF EXISTS {} WITH (FORCE)", name)
                self.databases.remove(name)
                self.dropped.append(name)
            except Exception as exc:  # report it, drop the rest
                print(f"could not drop database {name}: {exc}", file=sys.stderr)
        if self.redis:
            import redis

            client = redis.Redis.from_url(REDIS_URL)
            try:
                keys = list(client.scan_iter(match=f"{self.prefix}*"))
                if keys:
                    self.keys_removed += client.delete(*keys)
            finally:
                client.close()

    def cleaned(self) -> str:
        if not self.redis:
            return "SQLite only"
        left = f", NOT dropped: {', '.join(self.databases)}" if self.databases else ""
        return (
            f"databases dropped: {', '.join(self.dropped)}{left}; "
            f"{self.keys_removed} Redis keys under {self.prefix} removed"
        )


# ---------------------------------------------------------------------------
# A signed-in person: the session, the CSRF token, and the sends


class Person:
    def __init__(self, signin_link: str, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        with opener.open(signin_link, timeout=30) as response:  # then to the workspace
            if response.status != 200:
                raise SystemExit(f"signing in answered {response.status}")
        cookies = {cookie.name: cookie.value for cookie in self.jar}
        if "sessionid" not in cookies or "csrftoken" not in cookies:
            raise SystemExit(f"signing in gave no session or CSRF cookie: {sorted(cookies)}")
        self.session = cookies["sessionid"]
        self.csrf = cookies["csrftoken"]
        self.cookie = f"sessionid={self.session}; csrftoken={self.csrf}"

    def send(self, public_id: str, text: str) -> int:
        """What the composer does: an HTMX POST to the chat's send view."""
        body = urllib.parse.urlencode({"text": text, "csrfmiddlewaretoken": self.csrf}).encode()
        request = urllib.request.Request(
            f"{self.base}/c/{public_id}/send/",
            data=body,
            headers={
                "Cookie": self.cookie,
                "Origin": self.base,
                "X-CSRFToken": self.csrf,
                "HX-Request": "true",
                "Content-Type": "application/x-www-form-urlencoded",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0


# ---------------------------------------------------------------------------
# Tabs


@dataclass
class Tab:
    server: int
    showing: str | None
    arrivals: dict[int, float] = field(default_factory=dict)
    hello: asyncio.Event = field(default_factory=asyncio.Event)
    closed: str = ""
    retries: int = 0  # handshakes the server dropped before this tab opened


async def tab_run(tab: Any, url: str, cookie: str, stop: asyncio.Event, read: Any = None) -> None:
    """One tab's socket. A handshake the server drops (Daphne gives up on one its
    app hasn't accepted in 5 s) is retried after conch.js's back-off, as the page
    does; once open, the socket is read (by ``read(tab, socket)``, this bench's own
    reader unless another bench gives its own) until the point ends."""
    from websockets.asyncio.client import connect

    ws_url = url.replace("http://", "ws://", 1) + "/ws/"
    if tab.showing:
        ws_url += f"?chat={tab.showing}"
    for attempt in range(OPEN_ATTEMPTS):
        try:
            socket = await connect(
                ws_url,
                origin=url,  # type: ignore[arg-type]
                additional_headers={"Cookie": cookie},
                max_size=None,
                max_queue=None,
                open_timeout=60,
                ping_interval=None,
            )
        except Exception as exc:
            tab.closed = f"{type(exc).__name__}: {exc}"
            if attempt + 1 < OPEN_ATTEMPTS and not stop.is_set():
                tab.retries += 1
                await asyncio.sleep(reconnect_delay(attempt))
                continue
            tab.hello.set()  # not waited for any more
            return
        tab.closed = ""
        break
    async with socket:
        reader = asyncio.ensure_future((read or _read)(tab, socket))
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({reader, stopping}, return_when=asyncio.FIRST_COMPLETED)
        reader.cancel()
        stopping.cancel()


def reconnect_delay(retry: int) -> float:
    """conch.js's back-off (reconnectDelay): half to all of 250 ms x 2^retry, at most 10 s."""
    ceiling = min(10.0, 0.25 * 2**retry)
    return ceiling / 2 + random.random() * ceiling / 2


async def _read(tab: Tab, socket) -> None:
    async for message in socket:
        now = time.monotonic()
        if not isinstance(message, str):
            continue
        for tag in SEQ_TAG.findall(message):
            number, kind = SEQ_NUMBER.search(tag), SEQ_KIND.search(tag)
            if number is None:
                continue
            if kind is not None and kind.group(1) == "hello":
                tab.hello.set()
            else:  # every event of the run arrives with the push that carries it
                last = int(number.group(1))
                first = SEQ_FIRST.search(tag)
                for seq in range(int(first.group(1)) if first else last, last + 1):
                    tab.arrivals.setdefault(seq, now)
    tab.closed = tab.closed or "closed by the server"
    tab.hello.set()  # not waited for any more


# ---------------------------------------------------------------------------
# One point: N tabs, changes at a fixed rate for a while


@dataclass
class Event:
    seq: int
    type: str
    chat: str
    committed: float


@dataclass
class Result:
    tabs: int
    interval: float
    changes: int
    refused: int
    status: list[tuple[float, bool, int]]  # (ms, arrived, server of the tab)
    every: list[tuple[float, bool, int]]
    status_events: int
    kinds: dict[str, int]  # the measured events by type
    send_ms: list[float]
    failed_tabs: int
    failures: list[str]  # why tabs failed, each reason once
    retries: int  # handshakes dropped and retried while the tabs opened
    client_cpu: float  # the bench's own CPU seconds per second of the point: its tabs' share


def read_clock(paths: list[Path]) -> dict[int, Event]:
    found: dict[int, Event] = {}
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            seq, kind, chat, at = line.split()
            found[int(seq)] = Event(int(seq), kind, chat, float(at))
    return found


async def drive_point(
    servers: list[Server],
    person: Person,
    driven: list[str],
    *,
    tabs: int,
    interval: float,
    seconds: float,
    drain: float,
    showing: float,
) -> Result:
    cpu_from, wall_from = time.process_time(), time.monotonic()
    stop = asyncio.Event()
    shown_every = max(1, round(1 / showing)) if showing > 0 else 0
    opened = [
        Tab(
            server=n % len(servers),
            showing=driven[(n // shown_every) % len(driven)]
            if shown_every and n % shown_every == 0
            else None,
        )
        for n in range(tabs)
    ]
    tasks = [
        asyncio.ensure_future(tab_run(tab, servers[tab.server].url, person.cookie, stop))
        for tab in opened
    ]
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=64)
    try:
        await asyncio.wait_for(asyncio.gather(*(tab.hello.wait() for tab in opened)), 180)
        live = [tab for tab in opened if not tab.closed]

        def clock() -> dict[int, Event]:
            return read_clock([server.clock for server in servers])

        # One change first, unmeasured: the servers' first renders load templates.
        warm_from = time.monotonic()
        await loop.run_in_executor(pool, person.send, driven[0], "warm-up")
        await _until_arrived(live, clock, warm_from, deadline=time.monotonic() + 60)

        count = max(2, math.ceil(seconds / interval))
        started = time.monotonic()
        sends: list[asyncio.Future] = []
        for n in range(count):
            at = started + n * interval
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            chat = driven[n % len(driven)]
            sends.append(loop.run_in_executor(pool, _timed_send, person, chat, f"change {n}"))
        answers = await asyncio.gather(*sends)
        # The last reply's events come from the runner after the send returns.
        end = await _until_arrived(live, clock, started, deadline=time.monotonic() + drain)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        pool.shutdown(wait=False)

    events = [event for event in clock().values() if event.committed >= started]
    status: list[tuple[float, bool, int]] = []
    every: list[tuple[float, bool, int]] = []
    for event in events:
        for tab in live:
            arrived = tab.arrivals.get(event.seq)
            sample = (
                ((arrived if arrived is not None else end) - event.committed) * 1000,
                arrived is not None,
                tab.server,
            )
            every.append(sample)
            if event.type == "status":
                status.append(sample)
    return Result(
        tabs=tabs,
        interval=interval,
        changes=count,
        refused=sum(1 for code, _ in answers if code != 200),
        status=status,
        every=every,
        status_events=sum(1 for event in events if event.type == "status"),
        kinds=dict(collections.Counter(event.type for event in events)),
        send_ms=[ms for _, ms in answers],
        failed_tabs=len(opened) - len(live),
        failures=sorted({tab.closed for tab in opened if tab.closed and tab not in live}),
        retries=sum(tab.retries for tab in opened),
        client_cpu=(time.process_time() - cpu_from) / (time.monotonic() - wall_from),
    )


def _timed_send(person: Person, chat: str, text: str) -> tuple[int, float]:
    start = time.monotonic()
    code = person.send(chat, text)
    return code, (time.monotonic() - start) * 1000


async def _until_arrived(tabs: list[Tab], clock, since: float, *, deadline: float) -> float:
    """Wait until every tab has every event committed since ``since`` (the replies'
    too: each change ends with its status back to idle), or the deadline."""
    while time.monotonic() < deadline:
        events = [event for event in clock().values() if event.committed >= since]
        settled = events and all(
            not _reply_open(events, chat) for chat in {event.chat for event in events}
        )
        if settled and all(event.seq in tab.arrivals for event in events for tab in tabs):
            return time.monotonic()
        await asyncio.sleep(0.1)
    return time.monotonic()


def _reply_open(events: list[Event], chat: str) -> bool:
    """Its last status event is the one a reply starts with (working), as far as we know:
    its reply's end is still to come. The bench's messages always start a reply."""
    kinds = [event for event in sorted(events, key=lambda e: e.seq) if event.chat == chat]
    statuses = [event for event in kinds if event.type == "status"]
    return bool(statuses) and len(statuses) % 2 == 1


# ---------------------------------------------------------------------------
# Figures


def percentile(samples: list[tuple[float, bool, int]], q: float) -> tuple[float, bool]:
    """The q-th percentile (nearest rank), and whether it is exact.

    A push that never arrived counts with the time waited for it, a lower bound;
    if one of those ranks at or below the percentile, its true time could push
    the percentile up, so the figure is only a lower bound too."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    exact = all(arrived for _, arrived, _ in ordered[: index + 1])
    return ordered[index][0], exact


def shown(value: tuple[float, bool]) -> str:
    ms, exact = value
    return f"{'' if exact else '>= '}{ms:.0f} ms"


def rate_words(interval: float) -> str:
    if interval == 1:
        return "1 change/s"
    if interval > 1:
        return f"1 change every {interval:g} s"
    return f"{1 / interval:g} changes/s"


def goal_line(name: str, value: tuple[float, bool], goal: float, where: str) -> str:
    ms, exact = value
    verdict = "PASS" if exact and ms <= goal else "FAIL"
    return (
        f"{name} event latency at {where}: {shown(value)} "
        f"(goal <= {goal:.0f} ms, {ms / goal:.2f}x goal) {verdict}"
    )


def report(result: Result, setup: str, servers: int) -> str:
    """Print the point's goal lines and details; returns its entry in the curve."""
    where = f"{result.tabs} tabs, {rate_words(result.interval)}"
    if not result.status:
        print(f"{where}: no status event was measured")
        return f"{result.tabs}: none"
    p50, p99 = percentile(result.status, 50), percentile(result.status, 99)
    print(goal_line("p50", p50, GOAL_P50_MS, where))
    print(goal_line("p99", p99, GOAL_P99_MS, where))
    late = sum(1 for _, arrived, _ in result.status if not arrived)
    every50, every99 = percentile(result.every, 50), percentile(result.every, 99)
    print(
        f"    {setup}; {result.changes} changes ({result.refused} refused), "
        f"{result.status_events} status events x {result.tabs - result.failed_tabs} tabs = "
        f"{len(result.status)} pushes, {late} not arrived when the wait ended; "
        f"every event: p50 {shown(every50)}, p99 {shown(every99)}; "
        f"send answered in {statistics.median(result.send_ms):.0f} ms (median); events: "
        + ", ".join(f"{count} {kind}" for kind, count in sorted(result.kinds.items()))
        + f"; the bench's own tabs used {result.client_cpu:.0%} of a core"
        + (
            f"; {result.retries} handshakes dropped by the server and retried as conch.js does"
            if result.retries
            else ""
        )
        + (
            f"; {result.failed_tabs} tabs failed to open: {' | '.join(result.failures)}"
            if result.failed_tabs
            else ""
        )
    )
    if servers > 1:
        for n in range(servers):
            own = [sample for sample in result.status if sample[2] == n]
            if own:
                via = "the sending server" if n == 0 else "the other server (via Redis)"
                print(
                    f"    tabs on server {n + 1}, {via}: p50 {shown(percentile(own, 50))}, "
                    f"p99 {shown(percentile(own, 99))}"
                )
    return f"{result.tabs}: {shown(p50)} / {shown(p99)}"


# ---------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tabs", default="1,10,30,100", help="tab counts, comma-separated")
    parser.add_argument(
        "--interval", type=float, default=1.0, help="seconds between changes (default 1)"
    )
    parser.add_argument("--chats", type=int, default=50, help="the owner's chats (default 50)")
    parser.add_argument("--seconds", type=float, default=20, help="changes sent per point")
    parser.add_argument(
        "--drain", type=float, default=30, help="seconds to wait for pushes after the last change"
    )
    parser.add_argument(
        "--showing", type=float, default=0.25, help="share of the tabs showing a chat"
    )
    parser.add_argument("--redis", action="store_true", help="PostgreSQL + Redis, two servers")
    args = parser.parse_args()
    points = [int(n) for n in args.tabs.split(",") if n.strip()]
    if args.redis:
        setup = f"{args.chats} chats, PostgreSQL + Redis, 2 servers"
    else:
        setup = f"{args.chats} chats, SQLite, 1 server"
    print(
        f"bench_events: {setup}; a message every {args.interval:g} s for {args.seconds:g} s "
        f"to one of {DRIVEN_CHATS} chats (a real reply: status working, then idle); "
        f"{args.showing:.0%} of the tabs show a chat; load before: {_load()}"
    )

    workdir = Path(tempfile.mkdtemp(prefix="conch-bench-events-"))
    backing = Backing(redis=args.redis, workdir=workdir)
    running: list[subprocess.Popen] = []
    signal.signal(signal.SIGTERM, _interrupt)
    verdicts: list[tuple[int, str]] = []
    try:
        driven = backing.seed(args.chats)
        for tabs in points:
            point = f"t{tabs}"
            servers = [
                start_server(home, env, running)
                for home, env in backing.homes(point, 2 if args.redis else 1)
            ]
            # The one-time link signs in on the first server; the session is in the
            # database, so the same cookie opens sockets on the second.
            person = Person(servers[0].signin.split()[-1], servers[0].url)
            result = asyncio.run(
                drive_point(
                    servers,
                    person,
                    driven,
                    tabs=tabs,
                    interval=args.interval,
                    seconds=args.seconds,
                    drain=args.drain,
                    showing=args.showing,
                )
            )
            for server in servers:
                stop_server(server.process)
                running.remove(server.process)
            if args.redis:
                backing.drop(f"{backing.template_db}_{point}")
            verdicts.append((tabs, report(result, setup, len(servers))))
        print(
            f"curve, status event latency p50 / p99 by tabs at {rate_words(args.interval)} "
            f"({setup}): " + "; ".join(curve for _, curve in verdicts)
        )
        print(f"load after: {_load()}")
    except KeyboardInterrupt:
        print("interrupted: cleaning up", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        for process in running:
            stop_server(process)
        backing.drop()
        shutil.rmtree(workdir, ignore_errors=True)
        home = "left behind" if workdir.exists() else "removed"
        print(f"cleaned up: servers stopped; homes in {workdir} {home}; {backing.cleaned()}")


def _interrupt(signum, frame) -> None:
    """SIGTERM ends the bench as Ctrl-C does (asyncio cancels the point's tasks on
    SIGINT, then main's cleanup runs)."""
    os.kill(os.getpid(), signal.SIGINT)


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_serve":
        serve_with_clock(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) > 1 and sys.argv[1] == "_seed":
        seed(int(sys.argv[2]))
    else:
        main()
