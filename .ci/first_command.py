"""The README's first command, run as a new user would: CI's smoke run of it.

In a fresh clone of this checkout (so its .venv is a new one, with no extras), the
README's line that ends in ``conch serve --demo`` runs exactly as written, with
``--port 0`` added. Then this waits for the sign-in link the server prints, opens it
with a plain HTTP client, reads the chat list, and stops the server by its PID.

A runtime dependency that pyproject.toml or the lock forgets fails here: the install
succeeds, and ``conch serve`` crashes before it prints a link.

Only the standard library: it runs on the machine's python3, before any venv exists.
"""

from __future__ import annotations

import html
import http.cookiejar
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SERVE = ".venv/bin/conch serve --demo"
LINK = re.compile(r"http://127\.0\.0\.1:(\d+)/signin/[^/\s]+/")
MADE = re.compile(r"Made the demo chat “(.+)” \(")  # what conch_demo prints of each chat
INSTALL_AND_START = 600  # seconds: a fresh venv's install from the lock, then Django's migrate


def readme_line() -> str:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    found = [line for line in lines if line.strip().endswith(SERVE)]
    if len(found) != 1:
        sys.exit(f"first command: the README has {len(found)} lines ending in {SERVE!r}, not 1")
    return found[0].strip()


def main() -> int:
    line = readme_line()
    work = Path(tempfile.mkdtemp(prefix="conch-first-command-"))
    try:
        return run(line, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(line: str, work: Path) -> int:
    clone = work / "conch"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    home = work / "home"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CONCH_", "DATABASE_URL", "REDIS_URL", "VIRTUAL_ENV"))
    }
    env.update(CONCH_HOME=str(home), PYTHONUNBUFFERED="1")
    command = f"{line} --port 0"
    print(f"first command: {command}", flush=True)
    server = subprocess.Popen(
        ["bash", "-c", command],
        cwd=clone,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the venv's pip and the server in it
    )
    output: list[str] = []
    found = threading.Event()
    link: list[str] = []

    def read() -> None:
        assert server.stdout is not None
        for text in server.stdout:
            output.append(text)
            match = LINK.search(text)
            if match and not link:
                link.append(match.group(0))
                found.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    started = time.monotonic()
    try:
        while not found.wait(1):
            if server.poll() is not None or time.monotonic() - started > INSTALL_AND_START:
                reader.join(5)
                print("".join(output[-60:]), file=sys.stderr)
                why = (
                    f"exited {server.returncode}"
                    if server.returncode is not None
                    else f"printed no sign-in link in {INSTALL_AND_START} s"
                )
                print(f"first command: FAILED: it {why}.", file=sys.stderr)
                return 1
        print(f"first command: sign-in link after {time.monotonic() - started:.0f} s", flush=True)
        titles = [m.group(1) for m in map(MADE.search, output) if m]
        problem = signed_in(link[0], titles)
        if problem:
            print("".join(output[-60:]), file=sys.stderr)
            print(f"first command: FAILED: {problem}", file=sys.stderr)
            return 1
        print(f"first command: signed in; the chat list shows the {len(titles)} demo chats")
    finally:
        stopped = stop(server)
    return 0 if stopped else 1


def signed_in(link: str, titles: list[str]) -> str | None:
    """Open the sign-in link as a browser would (cookies kept, redirects followed) and
    read the chat list it leads to; what went wrong, or None."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    root = link.split("/signin/")[0] + "/"
    try:
        with opener.open(link, timeout=30) as answer:
            landed, status = answer.geturl(), answer.status
        with opener.open(root, timeout=30) as answer:
            listed, list_status, page = answer.geturl(), answer.status, answer.read().decode()
    except OSError as exc:
        return f"the sign-in link or the chat list could not be read: {exc}"
    if status != 200 or "/signin/" in landed:
        return f"the sign-in link led to {landed} ({status}), not into Conch"
    if list_status != 200 or listed != root:
        return f"the chat list answered {list_status} at {listed}"
    nav = re.search(r'<nav id="chat-list".*?</nav>', page, re.S)
    if nav is None:
        return "the page at / has no chat list:\n" + page[:500]
    if not titles:
        return "the server said it made no demo chats"
    missing = [t for t in titles if html.escape(t, quote=False) not in nav.group(0)]
    if missing:
        return f"the chat list lacks the demo chats {missing}:\n{nav.group(0)[:800]}"
    return None


def stop(server: subprocess.Popen) -> bool:
    """SIGTERM to the server's process group (bash, and conch serve in it), by its PID;
    whether it stopped within 30 s."""
    if server.poll() is not None:
        return False  # it exited before it was stopped: said above
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(10)
        print("first command: FAILED: the server ignored SIGTERM for 30 s", file=sys.stderr)
        return False
    print(f"first command: the server (PID {server.pid}) stopped on SIGTERM", flush=True)
    return True


if __name__ == "__main__":
    sys.exit(main())
