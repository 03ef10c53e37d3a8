"""Inbound end to end: HTTP → routed → stored, driven by wrk against the real server.

It starts ``conch serve --port 0`` (Daphne, with its runner, on loopback) in a
throwaway CONCH_HOME, makes a gateway token, and drives ``POST
/gateway/inbound`` with wrk: each request a message with its own message_id,
from one of 1,000 people, so sessions are made and then reused; the runner
plays the replies they start meanwhile, as in use. In the same run and against
the same server, the bare baseline is measured first, while it is idle: the
same door asked without a token (a 401: Django, its middleware and a view, no
routing, no database). Judged by requests per second and p99 latency, and their ratio to
the baseline. Afterwards every accepted message is checked to be stored.

wrk is a load tool from Debian, not a Python package; install it once:

    apt-get install -y wrk
    .venv/bin/python bench/bench_inbound.py [--seconds 10] [--connections 16]

Loopback only; each wrk run is bounded by --seconds.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONCH = Path(sys.executable).with_name("conch")
START_TIMEOUT = 60

INBOUND_LUA = r"""
-- Every request a new message_id (thread id + counter), from one of 1,000 people.
local threads, counter, token = {}, 0, ""
function setup(thread)
  table.insert(threads, thread)
  thread:set("id", #threads)
end
function init(args)
  token = args[1]
end
function request()
  counter = counter + 1
  local body = string.format(
    '{"channel":"telegram","chat_type":"dm","peer":"p%d","message_id":"w%d-%d","text":"hello [w%d-%d]"}',
    counter % 1000, id, counter, id, counter)
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


def serve(home: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [str(CONCH), "serve", "--port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    found = threading.Event()
    url: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            match = re.search(r"Conch is running at (http://\S+)/", line)
            if match and not url:
                url.append(match.group(1))
                found.set()

    threading.Thread(target=read, daemon=True).start()
    if not found.wait(START_TIMEOUT):
        stop(process)
        raise SystemExit("conch serve did not start")
    return process, url[0]


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def post(url: str, body: bytes, token: str) -> int:
    request = urllib.request.Request(
        f"{url}/gateway/inbound",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def wrk(url: str, script: Path, *, seconds: int, connections: int, args: list[str]) -> dict:
    done = subprocess.run(
        [
            "wrk",
            "-t2",
            f"-c{connections}",
            f"-d{seconds}s",
            "--timeout",
            "10s",
            "--latency",
            "-s",
            str(script),
            f"{url}/gateway/inbound",
            "--",
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")

    home = Path(tempfile.mkdtemp(prefix="conch-bench-inbound-"))
    env = {
        **os.environ,
        "CONCH_HOME": str(home),
        "DATABASE_URL": "",
        "REDIS_URL": "",
        "CONCH_LOG_LEVEL": "WARNING",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    process, url = serve(home, env)
    try:
        token = subprocess.run(
            [str(CONCH), "conch_gateway_token"], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        first = (
            b'{"channel":"telegram","chat_type":"dm","peer":"p0","message_id":"warm","text":"hi"}'
        )
        assert post(url, first, token) == 202, "the inbound door did not take a message"

        scripts = home / "wrk"
        scripts.mkdir()
        (scripts / "inbound.lua").write_text(INBOUND_LUA)
        (scripts / "bare.lua").write_text(BARE_LUA)
        # The baseline first, while the server is idle: the runner then plays the replies
        # the inbound messages start, as it would in use, during the inbound run.
        bare = wrk(
            url, scripts / "bare.lua", seconds=args.seconds, connections=args.connections, args=[]
        )
        inbound = wrk(
            url,
            scripts / "inbound.lua",
            seconds=args.seconds,
            connections=args.connections,
            args=[token],
        )
    finally:
        stop(process)

    database = sqlite3.connect(home / "conch.sqlite3")
    receipts = dict(
        database.execute(
            "SELECT outcome, count(*) FROM gateway_inboundrecord WHERE message_id GLOB 'w[0-9]*' "
            "GROUP BY outcome"
        ).fetchall()
    )
    # Each message is in its session: in the transcript, or queued behind the open reply.
    lost = database.execute(
        "SELECT count(*) FROM gateway_inboundrecord r WHERE r.message_id GLOB 'w[0-9]*' AND NOT "
        "EXISTS (SELECT 1 FROM chats_entry e WHERE e.conversation_id = r.conversation_id "
        "AND instr(e.text, '[' || r.message_id || ']')) AND NOT EXISTS (SELECT 1 FROM "
        "chats_queuedinput q WHERE q.conversation_id = r.conversation_id "
        "AND instr(q.text, '[' || r.message_id || ']'))"
    ).fetchone()[0]
    sessions = database.execute(
        "SELECT count(*) FROM chats_conversation WHERE session_key LIKE 'agent:main:dm:telegram:%'"
    ).fetchone()[0]
    database.close()
    stored = sum(receipts.values())
    accepted = inbound["requests"] - inbound["non_2xx"]

    print(
        f"server: conch serve (Daphne + runner) on loopback, SQLite; wrk -t2 "
        f"-c{args.connections}, {args.seconds} s each"
    )
    print(
        f"inbound (HTTP → routed → stored): {inbound['rps']:.0f} requests/s, "
        f"p99 {inbound['p99_ms']:.1f} ms; {inbound['requests']:,} requests, "
        f"{inbound['non_2xx']} not 2xx, socket errors: {inbound['socket_errors']}"
    )
    print(
        f"bare Django view (the same door, no token: 401): {bare['rps']:.0f} requests/s, "
        f"p99 {bare['p99_ms']:.1f} ms; socket errors: {bare['socket_errors']}"
    )
    print(
        f"ratio inbound / bare: {inbound['rps'] / bare['rps']:.2f}x the requests per second, "
        f"{inbound['p99_ms'] / bare['p99_ms']:.1f}x the p99"
    )
    outcomes = ", ".join(f"{count:,} {outcome}" for outcome, count in sorted(receipts.items()))
    print(
        f"stored: {stored:,} messages ({outcomes}) in {sessions:,} sessions; wrk counted "
        f"{accepted:,} answered in time (the rest were in flight when it stopped); "
        f"not found in their session: {lost}"
    )
    if lost or stored < accepted:
        raise SystemExit("NOT every accepted message was stored")
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
