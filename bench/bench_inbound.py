"""Inbound end to end: HTTP → routed → stored, driven by wrk against a real server.

By default it starts ``conch serve --port 0`` (Daphne, with its runner, on loopback)
in a throwaway CONCH_HOME, with every chat answered by a loopback model this bench
runs and holds: a reply started waits on it, writing nothing. Then, against that
server, with wrk:

1. the bare baseline: the same door asked without a token (a 401: Django, its
   middleware and a view, no routing, no database);
2. no reply playing: each of ``--people`` people has a session whose reply waits
   on the held model, and every message wrk sends goes to one of them (queued
   behind that reply): the inbound path alone, beside a runner with nothing to play.
   1 and 2 alternate, in ``--rounds`` slices each, on the same server in the same
   state: a drift in the machine's speed (seen here: the bare view at 400 and at 780
   requests/s in runs minutes apart) then moves both sides of the ratio alike;
3. replies playing: the model answers now, the runner plays a reply after each
   message, and wrk keeps sending, as in use.

Judged by: requests per second against the bare baseline, over all the slices
(goal ≥ 0.5x), and p99 (goal ≤ 50 ms, the worst slice's) while no reply is
playing; the same ratio with replies playing is printed too. Afterwards every
accepted message is checked to be stored.

``--port`` benches a server already running on loopback (its ``--home`` is needed to
make a token and check what it stored): its replies play as that server plays them,
so phase 2 is its own messages to existing sessions, with whatever replies run.
``--checkout DIR`` serves another checkout's code (``DIR/manage.py serve``) with this
venv: a branch measured the same way as this one.

wrk is a load tool from Debian, not a Python package; install it once:

    apt-get install -y wrk
    .venv/bin/python bench/bench_inbound.py [--seconds 10] [--rounds 5] [--connections 16]
    .venv/bin/python bench/bench_inbound.py --connections 1
    .venv/bin/python bench/bench_inbound.py --port 8000 --home ~/.conch

Loopback only; each wrk run is bounded by --seconds (a slice by --seconds / --rounds).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from _setup import throwaway_home

ROOT = Path(__file__).resolve().parent.parent
CONCH = Path(sys.executable).with_name("conch")
START_TIMEOUT = 60
MODEL = "bench-model"
GOAL_RATIO = 0.5
GOAL_P99_MS = 50.0

INBOUND_LUA = r"""
-- Every request a new message_id (phase, thread id, counter), from one of PEOPLE people.
local threads, counter, token, phase = {}, 0, "", ""
function setup(thread)
  table.insert(threads, thread)
  thread:set("id", #threads)
end
function init(args)
  token, phase = args[1], args[2]
end
function request()
  counter = counter + 1
  local body = string.format(
    '{"channel":"telegram","chat_type":"dm","peer":"p%d","message_id":"%s%d-%d","text":"hello [%s%d-%d]"}',
    counter % PEOPLE, phase, id, counter, phase, id, counter)
  return wrk.format("POST", "/gateway/inbound",
    {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token}, body)
end
"""

BARE_LUA = r"""
function request()
  return wrk.format("POST", "/gateway/inbound", {["Content-Type"] = "application/json"},
    '{"channel":"telegram","chat_type":"dm","peer":"p1","message_id":"x","text":"hello"}')
end
"""


class QuietServer(ThreadingHTTPServer):
    """Says nothing of a reply the server hung up on: the bench stops it mid-answer."""

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class HeldModel:
    """An OpenAI-compatible model on a loopback port that holds every answer until
    :meth:`release`: a reply started waits on it, holding a runner thread, writing nothing."""

    def __init__(self) -> None:
        released = self.released = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args) -> None:
                pass

            def do_GET(self) -> None:
                self._json({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                released.wait(600)
                message = {"role": "assistant", "content": "ok."}
                if not body.get("stream"):
                    choice = {"index": 0, "message": message, "finish_reason": "stop"}
                    self._json({"object": "chat.completion", "model": MODEL, "choices": [choice]})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", "-1")
                self.send_header("Connection", "close")
                self.end_headers()
                for delta, finish in ((message, None), ({}, "stop")):
                    choice = {"index": 0, "delta": delta, "finish_reason": finish}
                    chunk = {"object": "chat.completion.chunk", "model": MODEL, "choices": [choice]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

            def _json(self, payload) -> None:
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()


def serve(
    env: dict[str, str], *, model_url: str, checkout: Path | None
) -> tuple[subprocess.Popen, str]:
    command = [str(CONCH), "serve"] if checkout is None else [sys.executable, "manage.py", "serve"]
    process = subprocess.Popen(
        [*command, "--port", "0", "--model", model_url],
        cwd=checkout or ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    found = threading.Event()
    url: list[str] = []
    said: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            said.append(line)
            match = re.search(r"Conch is running at (http://\S+)/", line)
            if match and not url:
                url.append(match.group(1))
                found.set()

    threading.Thread(target=read, daemon=True).start()
    if not found.wait(START_TIMEOUT):
        stop(process)
        raise SystemExit("conch serve did not start:\n" + "".join(said[-20:]))
    return process, url[0]


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def message(person: int, message_id: str) -> bytes:
    return json.dumps(
        {
            "channel": "telegram",
            "chat_type": "dm",
            "peer": f"p{person}",
            "message_id": message_id,
            "text": f"hello [{message_id}]",
        }
    ).encode()


def post_all(url: str, token: str, bodies: list[bytes]) -> None:
    """Send these one after another on one kept-alive connection; each must be taken."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    for body in bodies:
        connection.request("POST", "/gateway/inbound", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status != 202:
            raise SystemExit(f"the inbound door answered {response.status}, not 202")
    connection.close()


def wrk(url: str, script: Path, *, seconds: int, connections: int, args: list[str]) -> dict:
    threads = min(2, connections)  # wrk needs a connection per thread at least
    done = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s",
         "--latency", "-s", str(script), f"{url}/gateway/inbound", "--", *args],
        capture_output=True,
        text=True,
        check=True,
    )  # fmt: skip
    out = done.stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p99 = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
    total = int(re.search(r"(\d+) requests in", out).group(1))
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {
        "rps": rps,
        "p99_ms": float(p99.group(1)) * scale,
        "requests": total,
        "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
        "socket_errors": errors.group(1).strip() if errors else "none",
    }


def summed(slices: list[dict]) -> dict:
    """Slices of one phase as one: requests and rate over them all, the worst slice's p99."""
    seconds = sum(phase["requests"] / phase["rps"] for phase in slices if phase["rps"])
    requests = sum(phase["requests"] for phase in slices)
    errors = sorted({phase["socket_errors"] for phase in slices} - {"none"})
    return {
        "rps": requests / seconds if seconds else 0.0,
        "p99_ms": max(phase["p99_ms"] for phase in slices),
        "requests": requests,
        "non_2xx": sum(phase["non_2xx"] for phase in slices),
        "socket_errors": "; ".join(errors) or "none",
        "slice_rps": [phase["rps"] for phase in slices],
    }


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument(
        "--rounds", type=int, default=5, help="slices of bare and inbound, alternated"
    )
    parser.add_argument("--people", type=int, default=500)
    parser.add_argument("--port", type=int, help="bench the server already running here")
    parser.add_argument("--home", type=Path, help="that server's CONCH_HOME (with --port)")
    parser.add_argument("--checkout", type=Path, help="serve this checkout's code instead")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    if args.rounds < 1 or args.seconds < args.rounds:
        raise SystemExit("--rounds must be at least 1, and at most --seconds (whole-second slices)")
    slice_seconds = args.seconds // args.rounds
    if args.port and not (args.home or os.environ.get("CONCH_HOME")):
        raise SystemExit("--port needs that server's --home (or CONCH_HOME) for a token")

    own = not args.port
    home = (
        throwaway_home("conch-bench-inbound-")  # removed however the bench ends
        if own
        else (args.home or Path(os.environ["CONCH_HOME"])).expanduser()
    )
    env = {**os.environ, "CONCH_HOME": str(home), "CONCH_LOG_LEVEL": "WARNING"}
    if own:
        env |= {"DATABASE_URL": "", "REDIS_URL": ""}
        # It measures how fast messages are taken, not the rate limits that turn a flood
        # away (chats/gateway/floods.py): those are lifted for its own server.
        env |= {
            f"CONCH_INBOUND_PER_{scope}": "1000000" for scope in ("SENDER", "ACCOUNT", "INSTALL")
        }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    model = HeldModel() if own else None
    process = None
    scripts = Path(tempfile.mkdtemp(prefix="conch-bench-wrk-"))
    try:
        if model is not None:
            process, url = serve(env, model_url=model.url, checkout=args.checkout)
        else:
            url = f"http://127.0.0.1:{args.port}"
        token_command = (
            [str(CONCH), "conch_gateway_token"]
            if args.checkout is None
            else [sys.executable, "manage.py", "conch_gateway_token"]
        )
        token = subprocess.run(
            token_command, cwd=args.checkout or ROOT, env=env, capture_output=True, text=True,
            check=True,
        ).stdout.strip()  # fmt: skip
        (scripts / "inbound.lua").write_text(INBOUND_LUA.replace("PEOPLE", str(args.people)))
        (scripts / "bare.lua").write_text(BARE_LUA)
        run = {"seconds": args.seconds, "connections": args.connections}

        # Every message id names this run: a server benched again (--port) takes each anew.
        tag = secrets.token_hex(4)
        # Each person's session, its first reply started (and held at the model).
        post_all(url, token, [message(n, f"first-{tag}-{n}") for n in range(args.people)])
        slices = {"seconds": slice_seconds, "connections": args.connections}
        bares, quiets = [], []
        for round_ in range(args.rounds):
            bares.append(wrk(url, scripts / "bare.lua", args=[], **slices))
            phase = f"q{round_}.{tag}."
            quiets.append(wrk(url, scripts / "inbound.lua", args=[token, phase], **slices))
        bare, quiet = summed(bares), summed(quiets)
        if model is not None:
            model.release()
        busy = wrk(url, scripts / "inbound.lua", args=[token, f"w.{tag}."], **run)
    finally:
        if process is not None:
            stop(process)
        if model is not None:
            model.close()
        shutil.rmtree(scripts, ignore_errors=True)

    lost, stored, outcomes, sessions = stored_check(home, tag)
    accepted = sum(phase["requests"] - phase["non_2xx"] for phase in (quiet, busy))
    server = (
        "conch serve (Daphne + runner) on loopback, SQLite, replies held at a loopback "
        "model until phase 3"
        if own
        else f"the server on port {args.port}"
    )
    if args.checkout:
        server += f", code from {args.checkout}"
    print(
        f"server: {server}; wrk -t{min(2, args.connections)} -c{args.connections}, "
        f"{args.seconds} s a phase (bare and inbound alternated, {args.rounds} slices of "
        f"{slice_seconds} s each); {args.people} people; "
        f"load: {os.getloadavg()[0]:.2f}"
    )
    # Another server's replies play as it plays them: its phase 2 is not "no reply playing".
    quiet_name = "no reply playing" if own else "its own replies playing (phase 2)"
    busy_name = "replies playing" if own else "its own replies playing (phase 3)"
    for name, phase in (("bare view (401)", bare), (quiet_name, quiet), (busy_name, busy)):
        print(
            f"  {name}: {phase['rps']:.0f} requests/s, p99 {phase['p99_ms']:.1f} ms; "
            f"{phase['requests']:,} requests, {phase['non_2xx']} not 2xx, "
            f"socket errors: {phase['socket_errors']}"
        )
    each = ", ".join(
        f"{q / b:.2f}x ({q:.0f}/{b:.0f})"
        for q, b in zip(quiet["slice_rps"], bare["slice_rps"], strict=True)
        if b
    )
    print(f"  each slice, inbound / bare (requests/s): {each}")
    ratio = quiet["rps"] / bare["rps"]
    print(
        f"inbound / bare view, {quiet_name}: {ratio:.2f}x the requests per second "
        f"(goal >= {GOAL_RATIO}x, {ratio / GOAL_RATIO:.2f}x of goal) {verdict(ratio >= GOAL_RATIO)}"
    )
    p99 = quiet["p99_ms"]
    print(
        f"inbound p99, {quiet_name}: {p99:.1f} ms (goal <= {GOAL_P99_MS:.0f} ms, "
        f"{p99 / GOAL_P99_MS:.2f}x of goal) {verdict(p99 <= GOAL_P99_MS)}"
    )
    busy_ratio = busy["rps"] / bare["rps"]
    print(
        f"inbound / bare view, {busy_name}: {busy_ratio:.2f}x the requests per second "
        f"(goal >= {GOAL_RATIO}x, {busy_ratio / GOAL_RATIO:.2f}x of goal) "
        f"{verdict(busy_ratio >= GOAL_RATIO)}; p99 {busy['p99_ms']:.1f} ms"
    )
    print(
        f"stored: {stored:,} messages ({outcomes}) in {sessions:,} sessions; wrk counted "
        f"{accepted:,} answered in time (the rest were in flight when it stopped); "
        f"not found in their session: {lost}"
    )
    if lost or stored < accepted:
        raise SystemExit("NOT every accepted message was stored")


def stored_check(home: Path, tag: str) -> tuple[int, int, str, int]:
    """Each message wrk sent in this run is in its session: in the transcript, or queued
    behind a reply."""
    database = sqlite3.connect(home / "conch.sqlite3")
    sent = f"[qw]*.{tag}.*"  # this run's, not its first messages
    receipts = dict(
        database.execute(
            "SELECT outcome, count(*) FROM gateway_inboundrecord WHERE message_id GLOB ? "
            "GROUP BY outcome",
            [sent],
        ).fetchall()
    )
    lost = database.execute(
        "SELECT count(*) FROM gateway_inboundrecord r WHERE r.message_id GLOB ? "
        "AND NOT EXISTS (SELECT 1 FROM chats_entry e WHERE e.conversation_id = r.conversation_id "
        "AND instr(e.text, '[' || r.message_id || ']')) AND NOT EXISTS (SELECT 1 FROM "
        "chats_queuedinput q WHERE q.conversation_id = r.conversation_id "
        "AND instr(q.text, '[' || r.message_id || ']'))",
        [sent],
    ).fetchone()[0]
    sessions = database.execute(
        "SELECT count(*) FROM chats_conversation WHERE session_key LIKE 'agent:%:dm:telegram:%'"
    ).fetchone()[0]
    database.close()
    outcomes = ", ".join(f"{count:,} {outcome}" for outcome, count in sorted(receipts.items()))
    return lost, sum(receipts.values()), outcomes, sessions


if __name__ == "__main__":
    main()
