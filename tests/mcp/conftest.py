"""The outside MCP servers the client is tested against, and what the tests share.

``mcp-server-time`` and ``mcp-server-git`` come from PyPI with the test extra (they are in
the lock). ``@modelcontextprotocol/server-everything`` comes from npm, pinned by
``npm/package.json`` and ``npm/package-lock.json`` (integrity hashes, no addresses): the
first test that needs it runs ``npm ci`` into ``npm/node_modules`` when that is missing or
was installed from another lock. Without node or npm these tests fail; they never skip.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from chats.mcp import client
from tests.commands import wait_until_ended

NPM_DIR = Path(__file__).resolve().parent / "npm"
EVERYTHING = Path("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
STAMP = "conch-lock.sha256"  # in node_modules: the lock it was installed from
VENV_BIN = Path(sys.executable).parent
NPM_SECONDS = 600
NODE = shutil.which("node") or "node"


def _lock_hash() -> str:
    return hashlib.sha256((NPM_DIR / "package-lock.json").read_bytes()).hexdigest()


def npm_installed() -> Path:
    """``npm/node_modules`` as the lock says, installed now if it isn't (once, across workers)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.fail(
            "node and npm are needed for the MCP tests (Debian: apt-get install nodejs npm)"
        )
    modules = NPM_DIR / "node_modules"
    with open(NPM_DIR / ".install-lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        stamp = modules / STAMP
        if not stamp.is_file() or stamp.read_text().strip() != _lock_hash():
            done = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
                cwd=NPM_DIR,
                capture_output=True,
                text=True,
                timeout=NPM_SECONDS,
            )
            if done.returncode != 0:
                pytest.fail(f"npm ci failed in {NPM_DIR}:\n{done.stdout}\n{done.stderr}")
            stamp.write_text(_lock_hash() + "\n")
    if not (NPM_DIR / EVERYTHING).is_file():
        pytest.fail(f"npm ci left no {EVERYTHING} in {NPM_DIR}")
    return modules


@pytest.fixture(scope="session")
def everything_home(tmp_path_factory) -> Path:
    """A folder holding a copy of server-everything: its folder is what its sandbox shows.

    The repository may be in a place the sandbox hides (a clone in /tmp), so the server
    runs from inside its own folder, as a chat's folder with the server in it would.
    """
    modules = npm_installed()
    home = tmp_path_factory.mktemp("everything")
    shutil.copytree(modules, home / "node_modules", symlinks=True)
    return home


@pytest.fixture
def folder(everything_home) -> Path:
    """A chat's folder: server-everything's home (each test its own server key)."""
    return everything_home


@pytest.fixture(autouse=True)
def _fresh(settings) -> Iterator[None]:
    """Each test starts with no servers and ends every server it started."""
    client.close_all()
    yield
    client.close_all()


def marked(name: str = "everything") -> str:
    """A mark for one test's server, in its environment: its processes are found by it."""
    return f"conch-test-{name}-{uuid.uuid4().hex[:12]}"


def with_mark(pid: int, mark: str) -> bool:
    try:
        return f"MCP_TEST_MARK={mark}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(
            b"\0"
        )
    except OSError:
        return False


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def marked_processes(mark: str) -> list[int]:
    """Every live process started with ``mark`` in its environment."""
    return [
        int(name)
        for name in os.listdir("/proc")
        if name.isdigit() and alive(int(name)) and with_mark(int(name), mark)
    ]


def servers_started(mark: str) -> list[int]:
    """The marked processes this test process started itself: one per server."""
    me = str(os.getpid())
    found = []
    for pid in marked_processes(mark):
        try:
            parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            continue
        if parent == me:
            found.append(pid)
    return found


def marked_ended(mark: str, seconds: float) -> bool:
    """Whether every process started with ``mark`` ends within ``seconds``: each waited on
    by its pidfd (``tests.commands.wait_until_ended``), then looked for again, in case one
    started meanwhile."""
    deadline = time.monotonic() + seconds
    while pids := marked_processes(mark):
        left = deadline - time.monotonic()
        if left <= 0 or wait_until_ended(pids, left):
            return False
    return True


def kill_marked(mark: str) -> None:
    for pid in marked_processes(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class Everything:
    """server-everything: how to run it over stdio, and its address over HTTP."""

    home: Path
    url: str = ""

    def stdio(self, mark: str, **fields) -> client.ServerSpec:
        env = {"MCP_TEST_MARK": mark, **fields.pop("env", {})}
        return client.ServerSpec(
            key=fields.pop("key", mark),
            name=fields.pop("name", "everything"),
            transport="stdio",
            command=(NODE, str(self.home / EVERYTHING), "stdio"),
            env=env,
            folder=str(fields.pop("folder", self.home)),
            **fields,
        )

    def http(self, **fields) -> client.ServerSpec:
        return client.ServerSpec(
            key=fields.pop("key", marked("http")),
            name=fields.pop("name", "everything"),
            transport="http",
            url=self.url,
            **fields,
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def everything_http(everything_home) -> Iterator[str]:
    """server-everything over streamable HTTP, on a free port of this machine."""
    port = _free_port()
    env = {"PATH": os.defpath, "PORT": str(port), "HOME": str(everything_home)}
    process = subprocess.Popen(
        [NODE, str(everything_home / EVERYTHING), "streamableHttp"],
        cwd=everything_home,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    # It says so on stderr once it listens; the rest of what it says is read and kept,
    # so it never waits on a full pipe.
    listening = threading.Event()
    said: list[str] = []

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            said.append(line)
            if f"listening on port {port}" in line:
                listening.set()

    threading.Thread(target=read, daemon=True).start()
    if not listening.wait(30):
        process.kill()
        pytest.fail(f"server-everything did not listen on port {port}: {''.join(said)[-2000:]}")
    yield f"http://127.0.0.1:{port}/mcp"
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture
def everything(everything_home) -> Everything:
    return Everything(everything_home)


@pytest.fixture
def everything_both(everything_home, everything_http) -> Everything:
    return Everything(everything_home, everything_http)


def python_server(name: str, *args: str, folder: Path, mark: str, **fields) -> client.ServerSpec:
    """A server from the test extra, by its script in this venv."""
    return client.ServerSpec(
        key=fields.pop("key", mark),
        name=name,
        transport="stdio",
        command=(str(VENV_BIN / name), *args),
        env={"MCP_TEST_MARK": mark},
        folder=str(folder),
        **fields,
    )
