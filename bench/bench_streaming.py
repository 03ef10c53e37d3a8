"""A reply's words on the page: from the model writing a token to the tab's socket showing it.

Real clients against a real ``conch serve``, and a real model server. The bench
starts a local OpenAI-compatible streaming server (stdlib, a process of its
own): each completion it streams writes ``--tokens`` words, one every
``--interval`` seconds (20 a second by default), and notes the moment each went
out (``time.monotonic()``, after the write's flush). Every word is unique in the
run (``w00017``), so a tab can tell which it carries. The seeded owner's default
persona answers with that server (as Connect a model saves it); ``--replies``
chats are seeded, and one WebSocket tab opens on each (``/ws/?chat=c_…``, with
the page's Origin and the session cookie). Each round sends every chat a message
at once, as the composer does, so the replies stream side by side; each tab
notes when each frame arrives and which words it carries.

Latency of a word: from its write at the model server to the first frame at the
tab showing its chat that carries it. The figure judged is p50 and p99 over every
word of the measured rounds (the first round warms the servers and is not
counted). A word that hasn't arrived when the wait ends counts with the time
waited so far, a lower bound, shown as ``>=``. Beside it, where the time went:
each server runs with a subscriber (chats.hooks.subscribe, called as each event
commits, before it goes to the channel layer) that notes each ``reply.text``
event's newest word, so a word's time splits into "to the event" (the engine
reading it, the runtime publishing it) and "to the tab" (the channel layer, the
render, the socket). Words that went in the place of an event still waiting to be
sent (chats/events.py, ``newest_of``) are not heard there: they count from the next
event that carries them, so the split is a rough one.

``time.monotonic()`` is the machine's CLOCK_MONOTONIC, the same in every process.

``--redis``: PostgreSQL (a database made for the bench from
``postgres://postgres@127.0.0.1:5432/test`` and dropped after) and the Redis
channel layer (127.0.0.1:6379, under a prefix of the bench's own, whose keys are
removed after), with two servers, each running replies; the tabs alternate
between them and the messages are sent through the first, so half the tabs see
words of replies the other server runs, through Redis.

    .venv/bin/python bench/bench_streaming.py [--replies 10] [--tokens 100]
        [--interval 0.05] [--rounds 3] [--redis]

Goal: Conch adds p50 <= 20 ms and p99 <= 50 ms, with 10 replies streaming at
once to 10 tabs, at 20 words a second each. Every server, home, database and
Redis key it makes is removed at the end, on Ctrl-C too.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import itertools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import bench_events as shared

ROOT = Path(__file__).resolve().parent.parent
# The Conch beside this bench, not one the virtualenv was installed from (another checkout).
sys.path.insert(0, str(ROOT))
GOAL_P50_MS = 20.0
GOAL_P99_MS = 50.0
MODEL = "bench-model"
# A word the model writes: unique in the run.
WORD = re.compile(r"\bw(\d{5,})\b")
# The person's message names its chat, so the model server knows whose words it writes.
CHAT_TAG = re.compile(r"bench-chat (\S+)")


# ---------------------------------------------------------------------------
# The model server's process (``bench_streaming.py _model``)


def serve_model(clock: str, interval: float, tokens: int, prose: int) -> None:
    """An OpenAI-compatible server whose every streamed answer is ``tokens`` unique words,
    one every ``interval`` seconds, after ``prose`` characters of Markdown written at once
    (a reply already long, as every push renders it); each word's write is noted in ``clock``:
    ``word <number> <chat> <answer> <time>``, and each answer's end
    ``done <answer> <chat> <time>`` (answers are numbered too)."""
    out = open(clock, "a", buffering=1)  # noqa: SIM115 (open for the server's life)
    lock = threading.Lock()
    numbers = itertools.count(1)
    answers = itertools.count(1)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            else:
                self._json(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._json(404, {"error": {"message": "not found"}})
                return
            said = " ".join(
                str(message.get("content") or "")
                for message in body.get("messages", [])
                if message.get("role") == "user"
            )
            tags = CHAT_TAG.findall(said)
            chat = tags[-1] if tags else "-"
            if not body.get("stream"):
                message = {"role": "assistant", "content": "ok"}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                self._json(200, {"id": "x", "object": "chat.completion", "choices": [choice]})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            with lock:
                answer = next(answers)
            self.wfile.write(chunk({"role": "assistant", "content": ""}))
            self.wfile.flush()
            if prose:
                self.wfile.write(chunk({"content": long_reply(prose)}))
                self.wfile.flush()
            start = time.monotonic()
            for n in range(tokens):
                time.sleep(max(0.0, start + (n + 1) * interval - time.monotonic()))
                with lock:
                    number = next(numbers)
                word = f"w{number:05d}"
                self.wfile.write(chunk({"content": word if n == 0 else f" {word}"}))
                self.wfile.flush()
                at = time.monotonic()
                with lock:
                    out.write(f"word {number} {chat} {answer} {at:.6f}\n")
            self.wfile.write(chunk({}, "stop") + b"data: [DONE]\n\n")
            self.wfile.flush()
            with lock:
                out.write(f"done {answer} {chat} - {time.monotonic():.6f}\n")
            self.close_connection = True

        def _json(self, code: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"model at http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    server.serve_forever()


# ---------------------------------------------------------------------------
# Inside the server's process (``_serve``) and the seeding one (``_seed``)


def serve_with_clock(clock: str, serve_args: list[str]) -> None:
    """``conch serve``, with a subscriber noting each ``reply.text`` event's newest word
    as it commits: ``text <chat> <number> <time>``."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "conch.settings"
    import django

    django.setup()
    from chats import events, hooks
    from conch import cli

    out = open(clock, "a", buffering=1)  # noqa: SIM115 (open for the server's life)
    lock = threading.Lock()

    def note(event) -> None:
        at = time.monotonic()
        if event.type != events.REPLY_TEXT:
            return
        words = WORD.findall(str(event.data.get("text", ""))[-40:])
        if words:
            with lock:
                out.write(f"text {event.conversation_id} {int(words[-1])} {at:.6f}\n")

    hooks.subscribe(note)
    cli.main(["serve", *serve_args])


def seed(chats: int, model_url: str, stream_every: str) -> None:
    """The owner, their default persona answering with the bench's model, and the chats."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "conch.settings"
    import django

    django.setup()
    from django.core.management import call_command

    from chats.runtime.chats import conversation_create
    from chats.runtime.connect import ModelChoice, model_connect
    from chats.signin import owner_ensure

    call_command("migrate", verbosity=0)
    owner = owner_ensure()
    agent = model_connect(choice=ModelChoice(base_url=model_url, model=MODEL))
    if stream_every:
        agent.engine_config = {**agent.engine_config, "stream_every": float(stream_every)}
        agent.save(update_fields=["engine_config"])
    for n in range(chats):
        chat = conversation_create(owner=owner, title=f"Streaming chat {n + 1}")
        print(chat.public_id)


class Backing(shared.Backing):
    """bench_events' backing, seeded with chats whose persona answers with the bench's model."""

    def __init__(self, *, redis: bool, workdir: Path, model_url: str, stream_every: str) -> None:
        super().__init__(redis=redis, workdir=workdir)
        self.template_db = self.template_db.replace("events", "streaming")
        self.prefix = self.prefix.replace("events", "streaming")
        self.model_url = model_url
        self.stream_every = stream_every

    def seed(self, chats: int) -> list[str]:
        self.template_home.mkdir()
        extra = {}
        if self.redis:
            self._admin("CREATE DATABASE {}", self.template_db)
            self.databases.append(self.template_db)
            extra["DATABASE_URL"] = self.db_url(self.template_db)
        done = subprocess.run(
            [sys.executable, __file__, "_seed", str(chats), self.model_url, self.stream_every],
            cwd=ROOT,
            env=shared.server_env(self.template_home, extra),
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode:
            raise SystemExit(f"seeding failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout.split()


def long_reply(chars: int) -> str:
    """About ``chars`` characters of what a model writes: paragraphs with bold, code and
    links, a list, a table, a fenced block; then a blank line, so the words start anew."""
    parts = [PROSE[n % len(PROSE)] for n in range(chars // 60 + 1)]
    text = ""
    for part in parts:
        if len(text) >= chars:
            break
        text += part
    return text + "\n\n"


PROSE = [
    "## The plan\n\n",
    "First read **the failing test**, then `login()` in `auth/views.py`. ",
    "The docs at https://docs.djangoproject.com/en/5.2/ say the session is saved after. ",
    "It *only* fails when the cookie has expired.\n\n",
    "- check the expiry\n- renew the session\n- write the test first\n\n",
    "| file | lines |\n|:--|--:|\n| views.py | 12 |\n| tests.py | 40 |\n\n",
    "```python\ndef login(request):\n    session = request.session\n    return session\n```\n\n",
    "Then run `pytest -q tests/test_login.py` and read what it says.\n\n",
]


def start_model(
    clock: Path, interval: float, tokens: int, prose: int
) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, __file__, "_model", str(clock), str(interval), str(tokens), str(prose)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.match(r"model at (\S+)", line)
    if match is None:
        process.kill()
        raise SystemExit(f"the model server did not start: {line}{process.stdout.read()}")
    # Whatever else it says (a handler's traceback) is read, so its pipe never fills.
    threading.Thread(target=process.stdout.read, daemon=True).start()
    return process, match.group(1)


# ---------------------------------------------------------------------------
# Tabs


@dataclass
class Tab:
    server: int
    showing: str
    arrivals: dict[int, float] = field(default_factory=dict)  # word number: first frame's time
    frames: int = 0  # frames with words
    frame_bytes: int = 0
    hello: asyncio.Event = field(default_factory=asyncio.Event)
    closed: str = ""
    retries: int = 0


async def tab_run(tab: Tab, url: str, cookie: str, stop: asyncio.Event) -> None:
    """One tab's socket on the chat it shows, opened and retried as bench_events' tabs are
    (as conch.js does); read by this bench's reader until the end."""
    await shared.tab_run(tab, url, cookie, stop, read=_read)


async def _read(tab: Tab, socket) -> None:
    async for message in socket:
        now = time.monotonic()
        if not isinstance(message, str):
            continue
        if 'data-kind="hello"' in message:
            tab.hello.set()
            continue
        numbers = WORD.findall(message)
        if numbers:  # a frame with words (the others carry other chats' numbers)
            tab.frames += 1
            tab.frame_bytes += len(message)
        for number in numbers:
            tab.arrivals.setdefault(int(number), now)
    tab.closed = tab.closed or "closed by the server"
    tab.hello.set()


# ---------------------------------------------------------------------------
# The clocks


@dataclass
class Clocks:
    words: dict[int, tuple[str, int, float]]  # word number: (its chat, answer, when written)
    done: list[tuple[str, float]]  # each answer's end: (chat, when)
    texts: dict[str, list[tuple[int, float]]]  # chat: (newest word, when) of each reply.text


def clocks_read(model_clock: Path, server_clocks: list[Path]) -> Clocks:
    words: dict[int, tuple[str, int, float]] = {}
    done: list[tuple[str, float]] = []
    texts: dict[str, list[tuple[int, float]]] = {}
    if model_clock.exists():
        for line in model_clock.read_text().splitlines():
            parts = line.split()
            if len(parts) != 5:
                continue  # a line being written
            kind, number, chat, answer, at = parts
            if kind == "word":
                words[int(number)] = (chat, int(answer), float(at))
            elif kind == "done":
                done.append((chat, float(at)))
    for path in server_clocks:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "text":
                texts.setdefault(parts[1], []).append((int(parts[2]), float(parts[3])))
    for found in texts.values():
        found.sort(key=lambda pair: pair[1])
    return Clocks(words, done, texts)


# ---------------------------------------------------------------------------
# The rounds


@dataclass
class Result:
    rounds: int
    replies: int
    words: list[tuple[float, bool, int]]  # (ms, arrived, server of the tab)
    to_event: list[float]
    to_tab: list[float]
    words_written: int
    refused: int
    words_per_frame: float
    frame_bytes: float
    failed_tabs: int
    failures: list[str]
    retries: int
    client_cpu: float
    server_cpu: float  # the servers' CPU seconds over the measured rounds' wall seconds
    server_cpu_seconds: float
    send_ms: list[float] = field(default_factory=list)


async def drive(
    servers: list[shared.Server],
    person: shared.Person,
    chats: list[str],
    model_clock: Path,
    *,
    rounds: int,
    drain: float,
) -> Result:
    stop = asyncio.Event()
    opened = [Tab(server=n % len(servers), showing=chat) for n, chat in enumerate(chats)]
    tasks = [
        asyncio.ensure_future(tab_run(tab, servers[tab.server].url, person.cookie, stop))
        for tab in opened
    ]
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(chats))
    server_clocks = [server.clock for server in servers]
    answers: list[tuple[int, float]] = []
    try:
        await asyncio.wait_for(asyncio.gather(*(tab.hello.wait() for tab in opened)), 180)
        live = [tab for tab in opened if not tab.closed]

        async def one_round(n: int) -> float:
            since = time.monotonic()
            sent = await asyncio.gather(
                *(
                    loop.run_in_executor(
                        pool, _timed_send, person, chat, f"bench-chat {chat} round {n}"
                    )
                    for chat in chats
                )
            )
            answers.extend(sent)
            return await _until_shown(
                live, model_clock, since, len(chats), deadline=time.monotonic() + drain
            )

        await one_round(0)  # unmeasured: the servers' first renders load templates
        for tab in live:  # the words a frame carries are counted over the measured rounds
            tab.frames = tab.frame_bytes = 0
        cpu_from, wall_from = time.process_time(), time.monotonic()
        servers_from = sum(cpu_seconds(server.process.pid) for server in servers)
        started = time.monotonic()
        for n in range(1, rounds + 1):
            end = await one_round(n)
        wall = time.monotonic() - wall_from
        client_cpu = (time.process_time() - cpu_from) / wall
        server_seconds = sum(cpu_seconds(server.process.pid) for server in servers) - servers_from
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        pool.shutdown(wait=False)

    clocks = clocks_read(model_clock, server_clocks)
    samples: list[tuple[float, bool, int]] = []
    to_event: list[float] = []
    to_tab: list[float] = []
    measured = {n: v for n, v in clocks.words.items() if v[2] >= started}
    for number, (chat, answer, written) in measured.items():
        event = _first_event(clocks, chat, answer, number)
        if event is not None:
            # The model server notes a word once its write is flushed, and Conch may hear
            # it before that: a word's way to the event is then nothing, not below zero.
            to_event.append(max(0.0, (event - written) * 1000))
        for tab in live:
            if tab.showing != chat:
                continue
            arrived = tab.arrivals.get(number)
            late = (arrived if arrived is not None else end) - written
            samples.append((late * 1000, arrived is not None, tab.server))
            if arrived is not None and event is not None:
                to_tab.append((arrived - event) * 1000)
    return Result(
        rounds=rounds,
        replies=len(chats),
        words=samples,
        to_event=to_event,
        to_tab=to_tab,
        words_written=len(measured),
        refused=sum(1 for code, _ in answers if code != 200),
        words_per_frame=len(samples) / max(sum(tab.frames for tab in live), 1),
        frame_bytes=sum(tab.frame_bytes for tab in live) / max(sum(t.frames for t in live), 1),
        failed_tabs=len(opened) - len(live),
        failures=sorted({tab.closed for tab in opened if tab.closed and tab not in live}),
        retries=sum(tab.retries for tab in opened),
        client_cpu=client_cpu,
        server_cpu=server_seconds / wall,
        server_cpu_seconds=server_seconds,
        send_ms=[ms for _, ms in answers],
    )


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far (user and system), from /proc; 0 where there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _first_event(clocks: Clocks, chat: str, answer: int, number: int) -> float | None:
    """When the first ``reply.text`` event carrying the word committed: its chat's events
    are in time order, and a word is in every event of its answer whose newest word is it
    or a later one. None if no event carried it (the reply's last words can come in the
    stored answer alone)."""
    for newest, at in clocks.texts.get(chat, []):
        if newest >= number and clocks.words.get(newest, ("", 0, 0.0))[1] == answer:
            return at
    return None


def _timed_send(person: shared.Person, chat: str, text: str) -> tuple[int, float]:
    start = time.monotonic()
    code = person.send(chat, text)
    return code, (time.monotonic() - start) * 1000


async def _until_shown(
    tabs: list[Tab], model_clock: Path, since: float, replies: int, *, deadline: float
) -> float:
    """Wait until the model has ended ``replies`` answers since ``since`` and every word it
    wrote since has reached the tabs showing its chat, or the deadline."""
    while time.monotonic() < deadline:
        clocks = clocks_read(model_clock, [])
        ended = sum(1 for _, at in clocks.done if at >= since)
        if ended >= replies and all(
            number in tab.arrivals
            for number, (chat, _, at) in clocks.words.items()
            if at >= since
            for tab in tabs
            if tab.showing == chat
        ):
            return time.monotonic()
        await asyncio.sleep(0.1)
    return time.monotonic()


# ---------------------------------------------------------------------------
# Figures


def goal_line(name: str, value: tuple[float, bool], goal: float, where: str) -> str:
    ms, exact = value
    verdict = "PASS" if exact and ms <= goal else "FAIL"
    return (
        f"{name} word latency, {where}: {shared.shown(value)} "
        f"(goal <= {goal:.0f} ms, {ms / goal:.2f}x goal) {verdict}"
    )


def plain(samples: list[float], q: float) -> str:
    if not samples:
        return "none"
    return shared.shown(shared.percentile([(ms, True, 0) for ms in samples], q))


def report(result: Result, setup: str, servers: int, rate: float) -> None:
    where = f"{result.replies} replies streaming at once to {result.replies} tabs"
    if not result.words:
        print(f"{where}: no word was measured")
        return
    p50, p99 = shared.percentile(result.words, 50), shared.percentile(result.words, 99)
    print(goal_line("p50", p50, GOAL_P50_MS, where))
    print(goal_line("p99", p99, GOAL_P99_MS, where))
    late = sum(1 for _, arrived, _ in result.words if not arrived)
    print(
        f"    {setup}; {result.rounds} rounds, {rate:g} words/s a reply; "
        f"{result.words_written} words written, {len(result.words)} measured at the tabs, "
        f"{late} not arrived when the wait ended; "
        f"to the event: p50 {plain(result.to_event, 50)}, p99 {plain(result.to_event, 99)}; "
        f"event to the tab: p50 {plain(result.to_tab, 50)}, p99 {plain(result.to_tab, 99)}; "
        f"{result.words_per_frame:.1f} words a frame, {result.frame_bytes:.0f} bytes each; "
        f"{result.refused} sends refused, answered in {statistics.median(result.send_ms):.0f} ms "
        f"(median); the servers used {result.server_cpu:.0%} of a core, "
        f"{result.server_cpu_seconds * 1000 / max(result.words_written, 1):.2f} ms a word; "
        f"the bench's own tabs used {result.client_cpu:.0%} of a core"
        + (f"; {result.retries} handshakes retried" if result.retries else "")
        + (
            f"; {result.failed_tabs} tabs failed to open: {' | '.join(result.failures)}"
            if result.failed_tabs
            else ""
        )
    )
    if servers > 1:
        for n in range(servers):
            own = [sample for sample in result.words if sample[2] == n]
            if own:
                print(
                    f"    tabs on server {n + 1}: p50 {shared.shown(shared.percentile(own, 50))}, "
                    f"p99 {shared.shown(shared.percentile(own, 99))}"
                )


# ---------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--replies", type=int, default=10, help="chats replying at once, a tab on each (10)"
    )
    parser.add_argument("--tokens", type=int, default=100, help="words in each reply (100)")
    parser.add_argument(
        "--prose",
        type=int,
        default=0,
        help="characters of Markdown each reply writes at once before its words (0)",
    )
    parser.add_argument(
        "--interval", type=float, default=0.05, help="seconds between a reply's words (0.05)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (3), after one")
    parser.add_argument(
        "--drain", type=float, default=60, help="seconds a round waits for its words (60)"
    )
    parser.add_argument(
        "--stream-every",
        default="",
        help="the persona's stream_every setting, seconds (default: the engine's own)",
    )
    parser.add_argument("--redis", action="store_true", help="PostgreSQL + Redis, two servers")
    args = parser.parse_args()
    if args.redis:
        setup = "PostgreSQL + Redis, 2 servers"
    else:
        setup = "SQLite, 1 server"
    rate = 1 / args.interval
    if args.stream_every:
        setup += f", stream_every {args.stream_every} s"
    print(
        f"bench_streaming: {setup}; {args.replies} replies of "
        + (f"{args.prose} characters of Markdown, then " if args.prose else "")
        + f"{args.tokens} words at "
        f"{rate:g} words/s, {args.rounds} rounds after a warm-up; load before: {shared._load()}"
    )

    workdir = Path(tempfile.mkdtemp(prefix="conch-bench-streaming-"))
    running: list[subprocess.Popen] = []
    signal.signal(signal.SIGTERM, shared._interrupt)
    backing: Backing | None = None
    try:
        model_clock = workdir / "model-clock.txt"
        model, model_url = start_model(model_clock, args.interval, args.tokens, args.prose)
        running.append(model)
        backing = Backing(
            redis=args.redis,
            workdir=workdir,
            model_url=model_url,
            stream_every=args.stream_every,
        )
        chats = backing.seed(args.replies)
        servers = [
            shared.start_server(home, env, running, script=__file__)
            for home, env in backing.homes("run", 2 if args.redis else 1)
        ]
        person = shared.Person(servers[0].signin.split()[-1], servers[0].url)
        result = asyncio.run(
            drive(servers, person, chats, model_clock, rounds=args.rounds, drain=args.drain)
        )
        report(result, setup, len(servers), rate)
        print(f"load after: {shared._load()}")
    except KeyboardInterrupt:
        print("interrupted: cleaning up", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        for process in running:
            shared.stop_server(process)
        if backing is not None:
            backing.drop()
        shutil.rmtree(workdir, ignore_errors=True)
        home = "left behind" if workdir.exists() else "removed"
        cleaned = backing.cleaned() if backing is not None else "nothing made"
        print(f"cleaned up: servers stopped; homes in {workdir} {home}; {cleaned}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_serve":
        serve_with_clock(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) > 1 and sys.argv[1] == "_seed":
        seed(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    elif len(sys.argv) > 1 and sys.argv[1] == "_model":
        serve_model(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
