"""The ``conch`` command: ``serve``, ``worker``, and everything else passed to Django.

Most of these run the real command in a subprocess with its own CONCH_HOME
(SQLite, the in-memory channel layer), as a person would on a fresh machine.
"""

from __future__ import annotations

import http.client
import io
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from chats.management.commands import serve
from chats.runtime.chats import default_agent
from chats.runtime.turns import ERR_COMMAND_SHUTDOWN, ERR_COMMAND_STOPPED
from chats.signin import signin_token_redeem
from conch.static import StaticFiles
from tests.commands import (
    kill_all,
    processes_running,
    sleep_marker,
    wait_for_fifo,
    wait_until_ended,
)
from tests.loopback_model import LoopbackModel
from tests.scaleout.processes import (
    REPO,
    UNLIMITED,
    process_env,
    stopped_under_load,
    wait_until,
)

_SCRIPT = Path(sys.executable).with_name("conch")
CONCH = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "conch.cli"]
LINK = re.compile(r"http://127\.0\.0\.1:(\d+)/signin/([\w-]+)/")

# Run in a child `conch shell`: migrate, then start one reply that writes a file.
SEED = """
import os
from django.core.management import call_command
from django.core.management.base import CommandError
from django.contrib.auth import get_user_model
from chats.runtime.chats import conversation_create
from chats.runtime.turns import message_send

call_command("migrate", interactive=False, verbosity=0)
folder = os.environ["SEED_FOLDER"]
owner = get_user_model().objects.create(username="owner", is_superuser=True, is_staff=True)
chat = conversation_create(owner=owner, title="Proof", folder=folder, script=[[
    {"tool": "write_file", "args": {"path": "proof.txt", "content": "ran"}},
    {"say": "Done."},
]])
message_send(conversation=chat, text="go")
"""


def conch(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CONCH, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def start(*args: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(
            [*CONCH, *args],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def stop(process: subprocess.Popen) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    return process.wait(timeout=20)


def seed_one_reply(home: Path, env: dict[str, str]) -> Path:
    folder = home / "work"
    folder.mkdir()
    done = conch("shell", "-c", SEED, env={**env, "SEED_FOLDER": str(folder)})
    assert done.returncode == 0, done.stderr
    return folder


def turn_states(home: Path) -> list[str]:
    with sqlite3.connect(home / "conch.sqlite3") as db:
        return [state for (state,) in db.execute("SELECT state FROM chats_turn")]


@pytest.fixture
def home(tmp_path) -> Path:
    path = tmp_path / "conch-home"
    path.mkdir()
    return path


@pytest.fixture
def env(home) -> dict[str, str]:
    return process_env(home)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- serve ---------------------------------------------------------------------


def test_serve_prints_a_one_time_link_and_serves_the_admin_and_static_files(home, env):
    log = home / "serve.log"
    server = start("serve", "--port", "0", env=env, log=log)
    try:
        port, token = wait_until(
            lambda: LINK.search(log.read_text()),
            timeout=30,
            what="the sign-in link",
            watch=[server],
        ).groups()
        assert f"The admin is at http://127.0.0.1:{port}/admin/" in log.read_text()

        def get(path: str, cookie: str = "") -> http.client.HTTPResponse:
            conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)
            conn.request("GET", path, headers={"Cookie": cookie} if cookie else {})
            response = conn.getresponse()
            response.body = response.read()
            conn.close()
            return response

        signed_in = get(f"/signin/{token}/")
        assert signed_in.status == 302
        assert signed_in.getheader("Location") == "/"
        cookies = [c.split(";")[0] for c in signed_in.msg.get_all("Set-Cookie")]
        assert any(c.startswith("sessionid=") for c in cookies), cookies
        cookie = "; ".join(cookies)
        assert get("/", cookie).status == 200
        assert get(f"/signin/{token}/").status == 403, "the link works once"
        # ...but opened again by someone already signed in, it goes to the workspace.
        again = get(f"/signin/{token}/", cookie)
        assert (again.status, again.getheader("Location")) == (302, "/")

        # A fresh link for the running server, no restart: same database, its real port.
        fresh = conch("signin", env=env)
        assert fresh.returncode == 0, fresh.stderr
        fresh_port, fresh_token = LINK.search(fresh.stdout).groups()
        assert fresh_port == port and fresh_token != token
        assert get(f"/signin/{fresh_token}/").getheader("Location") == "/"
        assert "conch signin" in log.read_text()

        admin_login = get("/admin/login/")
        assert admin_login.status == 200
        assert b"<code>conch changepassword owner</code>" in admin_login.body
        css = get("/static/admin/css/base.css")  # DEBUG is off: the static handler serves it
        assert css.status == 200
        assert css.getheader("Content-Type").startswith("text/css")
        for climb in ("/static/%2e%2e/%2e%2e/etc/passwd", "/static/..%2f..%2fsecret_key"):
            assert get(climb).status == 404, climb
    finally:
        code = stop(server)
    assert code == 0, log.read_text()


def test_serve_runs_replies_before_any_request_and_stops_cleanly_on_sigterm(home, env):
    folder = seed_one_reply(home, env)
    assert turn_states(home) == ["running"]
    log = home / "serve.log"
    server = start("serve", "--port", "0", env=env, log=log)
    try:
        # No request is made: the runner started with the server, not with a page.
        wait_until(
            lambda: turn_states(home) == ["completed"], timeout=30, what="the reply", watch=[server]
        )
        assert (folder / "proof.txt").read_text() == "ran"
        wait_until(
            lambda: LINK.search(log.read_text()),
            timeout=30,
            what="the sign-in link",
            watch=[server],
        )
    finally:
        code = stop(server)
    assert code == 0, log.read_text()
    assert "Conch stopped." in log.read_text()


def test_serve_stops_on_sigterm_while_messages_are_coming_in(home, env):
    """SIGTERM lands while requests are mid-write: each ends, and so does the server. A
    request's events once waited forever for the stopped loop, holding SQLite's writer,
    and the server never exited (four stops in four here; tests/chats/test_event_handoff.py
    holds the cause itself)."""
    log = home / "serve.log"
    server = start("serve", "--port", "0", env=env | UNLIMITED, log=log)
    code, answers = stopped_under_load(server, log, [*CONCH, "conch_gateway_token"], env=env)
    assert code == 0, f"exit status {code} (None: running 20 s after SIGTERM)\n{log.read_text()}"
    assert "Conch stopped." in log.read_text()
    assert set(answers) == {202}


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.com"])
def test_serve_refuses_a_host_that_is_not_loopback(env, host):
    done = conch("serve", "--host", host, env=env)
    assert done.returncode != 0
    assert "--host must be a loopback address" in done.stderr
    assert repr(host) in done.stderr


@pytest.mark.parametrize("port", ["70000", "-1", "eighty"])
def test_serve_refuses_a_port_out_of_range(env, port):
    done = conch("serve", "--port", port, env=env)
    assert done.returncode == 2
    assert "argument --port" in done.stderr
    assert "1 to 65535" in done.stderr


class _Port:
    def getHost(self):  # noqa: N802 - Twisted's name
        return SimpleNamespace(host="127.0.0.1", port=8000)


@pytest.fixture
def no_daphne(monkeypatch):
    """Run ``serve`` in this process with Daphne, the runner and migrate replaced by recorders."""
    calls: list = []

    class Runner:
        name, threads = "test-runner", 2

        def stop(self):
            calls.append("runner stopped")

    when_running: list = []

    def run(server):
        calls.append(("daphne runs", server))
        server.listen_success(_Port())
        for call in when_running:  # as the reactor does once it runs
            call()

    monkeypatch.setattr(
        "chats.runtime.runner.start_embedded_runner",
        lambda *, lone: calls.append(("runner started", lone)) or Runner(),
    )
    monkeypatch.setattr("chats.events.bind_loop", lambda loop: None)
    monkeypatch.setattr("conch.collector.settle", lambda: calls.append("collector settled"))
    monkeypatch.setattr("twisted.internet.reactor.callWhenRunning", when_running.append)
    monkeypatch.setattr(serve.engines, "preload", lambda: calls.append("model SDK imported"))
    monkeypatch.setattr(serve, "call_command", lambda *a, **k: calls.append(a))
    # The test's transaction holds the connection: serve must not close it here.
    monkeypatch.setattr(serve, "connection", SimpleNamespace(vendor="sqlite", close=lambda: None))
    monkeypatch.setattr(serve.ConchServer, "run", run)
    return calls


def test_serve_starts_the_runner_before_daphne_and_sets_the_websocket_timeout(
    db, no_daphne, settings
):
    settings.CONCH_WEBSOCKET_TIMEOUT = 4321
    out = io.StringIO()
    call_command("serve", stdout=out)

    assert no_daphne[0] == ("migrate",)
    assert no_daphne[1] == ("runner started", True)  # SQLite: the only runner there is
    _, server = no_daphne[2]
    # Listening, start-up is done: what it made, the model SDK too, is kept out of full
    # collections, before the first request is served.
    assert no_daphne[3:] == ["model SDK imported", "collector settled", "runner stopped"]
    assert server.websocket_timeout == 4321
    assert server.endpoints == ["tcp:port=8000:interface=127.0.0.1"]
    assert isinstance(server.application, StaticFiles)  # a climb out of /static/ is a 404

    token = LINK.search(out.getvalue()).group(2)
    owner = signin_token_redeem(token=token)
    assert owner is not None and owner.is_superuser


def test_serve_demo_loads_the_demo_when_there_is_one(db, no_daphne, monkeypatch):
    monkeypatch.setattr(serve, "get_commands", lambda: {"conch_demo": "chats"})
    out = io.StringIO()
    call_command("serve", "--demo", stdout=out)
    assert ("conch_demo",) in no_daphne
    assert "Demo chats loaded." in out.getvalue()


def test_serve_demo_says_so_when_there_is_no_demo(db, no_daphne, monkeypatch):
    monkeypatch.setattr(serve, "get_commands", lambda: {})
    out = io.StringIO()
    call_command("serve", "--demo", stdout=out)
    assert ("conch_demo",) not in no_daphne
    assert "no conch_demo command" in out.getvalue()


# -- serve --model: the default persona's model at start -----------------------------


def test_serve_model_makes_the_servers_one_model_the_default_personas(db, no_daphne):
    with LoopbackModel(["qwen2.5-coder:7b"]) as model:
        out = io.StringIO()
        call_command("serve", "--model", f"127.0.0.1:{model.port}", stdout=out)

    agent = default_agent()
    assert agent.engine == "openai"
    assert agent.engine_config == {"base_url": model.base_url, "model": "qwen2.5-coder:7b"}
    said = f"Conch, every new chat's persona, answers with “qwen2.5-coder:7b” at {model.base_url}."
    assert said in out.getvalue()
    assert no_daphne[-1] == "runner stopped"  # and then it served as ever


def test_serve_takes_the_model_from_conch_model_url_and_conch_model(db, no_daphne, settings):
    with LoopbackModel(["qwen2.5-coder:7b", "llama3.2:3b"]) as model:
        settings.CONCH_MODEL_URL = model.base_url
        settings.CONCH_MODEL = "llama3.2:3b"
        call_command("serve", stdout=io.StringIO())

    assert default_agent().engine_config == {"base_url": model.base_url, "model": "llama3.2:3b"}


def test_serve_model_flag_wins_over_conch_model_url(db, no_daphne, settings):
    settings.CONCH_MODEL_URL = f"http://127.0.0.1:{closed_port()}/v1"
    with LoopbackModel() as model:
        call_command("serve", "--model", model.base_url, stdout=io.StringIO())

    assert default_agent().engine_config["base_url"] == model.base_url


def test_serve_model_asks_which_when_the_server_has_several(db, no_daphne, settings):
    settings.CONCH_MODEL = ""
    with LoopbackModel(["qwen2.5-coder:7b", "llama3.2:3b"]) as model:
        with pytest.raises(CommandError) as refused:
            call_command("serve", "--model", model.base_url, stdout=io.StringIO())

    assert str(refused.value) == (
        f"The server at {model.base_url} serves several models (qwen2.5-coder:7b, llama3.2:3b); "
        "name one with CONCH_MODEL, such as CONCH_MODEL=qwen2.5-coder:7b."
    )
    assert not default_agent().has_model
    assert not any(isinstance(c, tuple) and c[0] == "daphne runs" for c in no_daphne)


def test_serve_model_refuses_a_model_the_server_does_not_have(db, no_daphne, settings):
    settings.CONCH_MODEL = "not-pulled:1b"
    with LoopbackModel() as model, pytest.raises(CommandError, match="no model called"):
        call_command("serve", "--model", model.base_url, stdout=io.StringIO())
    assert not default_agent().has_model


def test_serve_model_with_nothing_listening_needs_the_models_name(db, no_daphne, settings):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    settings.CONCH_MODEL = ""
    with pytest.raises(CommandError, match=r"Nothing answered at .*CONCH_MODEL to name one"):
        call_command("serve", "--model", url, stdout=io.StringIO())
    assert not default_agent().has_model

    settings.CONCH_MODEL = "qwen2.5-coder:7b"
    out = io.StringIO()
    call_command("serve", "--model", url, stdout=out)
    assert "Note: Nothing answered at" in out.getvalue()
    assert default_agent().engine_config == {"base_url": url, "model": "qwen2.5-coder:7b"}


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://127.0.0.1/v1", "must start with http:// or https://"),
        ("http://127.0.0.1:99999/v1", "a port that isn't a number"),
    ],
)
def test_serve_refuses_a_bad_model_url_in_words_before_anything(env, url, words):
    done = conch("serve", "--port", "0", "--model", url, env=env)
    assert done.returncode == 1
    assert "--model (or CONCH_MODEL_URL): " in done.stderr
    assert words in done.stderr


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("CONCH_MODEL_URL", "localhost:11434", "must be an http:// or https:// address"),
        ("CONCH_MODEL_PORTS", "11434,eighty", "must be port numbers from 1 to 65535"),
        ("CONCH_MODEL_PORTS", "0", "must be port numbers from 1 to 65535"),
    ],
)
def test_a_bad_model_variable_is_one_clear_line(tmp_path, name, value, words):
    done = conch("check", env=process_env(tmp_path, **{name: value}))
    assert done.returncode == 1
    assert done.stderr.startswith(f"conch: {name} {words}")
    assert done.stderr.count("\n") == 1


def test_serve_on_ipv6_loopback_listens_there():
    assert serve.endpoint("::1", 8000) == r"tcp:port=8000:interface=\:\:1"
    assert serve.url_host("::1") == "[::1]"


# -- worker --------------------------------------------------------------------


def test_a_worker_refuses_an_unmigrated_database(env):
    done = conch("worker", env=env)
    assert done.returncode == 1
    assert "unapplied migration" in done.stderr
    assert "conch migrate" in done.stderr


def test_a_worker_runs_replies_logs_its_claims_and_stops_on_sigterm(home, env):
    folder = seed_one_reply(home, env)
    log = home / "worker.log"
    worker = start("worker", env=env, log=log)
    try:
        wait_until(
            lambda: turn_states(home) == ["completed"], timeout=30, what="the reply", watch=[worker]
        )
    finally:
        code = stop(worker)
    text = log.read_text()
    assert code == 0, text
    assert (folder / "proof.txt").read_text() == "ran"
    assert re.search(r"worker \S+ claimed turn \d+", text), text
    assert re.search(r"worker \S+ stopped after 1 replies", text), text


# -- a command a worker runs ends when its reply is stopped, or the worker is -------

LONG_COMMAND_SEED = """
import os
from django.core.management import call_command
from django.core.management.base import CommandError
from django.contrib.auth import get_user_model
from chats.runtime.chats import conversation_create
from chats.runtime.turns import message_send

call_command("migrate", interactive=False, verbosity=0)
folder = os.environ["SEED_FOLDER"]
command = f"echo ready > ready.fifo; sleep {os.environ['SEED_MARKER']}; echo late > proof.txt"
owner = get_user_model().objects.create(username="owner", is_superuser=True, is_staff=True)
chat = conversation_create(owner=owner, title="Long", folder=folder, script=[[
    {"tool": "run_command", "args": {"command": command}},
    {"say": "After."},
]])
message_send(conversation=chat, text="go")
"""

STOP_FROM_ANOTHER_PROCESS = """
from chats.models import Conversation
from chats.runtime.turns import conversation_stop
conversation_stop(conversation=Conversation.objects.get())
"""


@pytest.fixture
def marker():
    mark = sleep_marker()
    yield mark
    kill_all(mark)


def worker_running_a_long_command(home, env, marker) -> tuple[subprocess.Popen, Path, list[int]]:
    folder = home / "work"
    folder.mkdir()
    os.mkfifo(folder / "ready.fifo")
    seeded = conch(
        "shell",
        "-c",
        LONG_COMMAND_SEED,
        env={**env, "SEED_FOLDER": str(folder), "SEED_MARKER": marker},
    )
    assert seeded.returncode == 0, seeded.stderr
    worker = start("worker", env=env, log=home / "worker.log")
    if wait_for_fifo(folder / "ready.fifo", timeout=60) != "ready":
        stop(worker)
        pytest.fail("the worker never ran the command:\n" + (home / "worker.log").read_text())
    pids = wait_until(
        lambda: processes_running(marker), timeout=30, what="the command's sleep", watch=[worker]
    )
    return worker, folder, pids


def step_rows(home: Path) -> list[tuple[str, str, int | None]]:
    with sqlite3.connect(home / "conch.sqlite3") as db:
        return list(db.execute("SELECT tool, error, process_group FROM chats_step"))


def test_a_stop_pressed_in_another_process_ends_the_command_a_worker_runs(home, env, marker):
    worker, folder, pids = worker_running_a_long_command(home, env, marker)
    try:
        stopped = conch("shell", "-c", STOP_FROM_ANOTHER_PROCESS, env=env)
        assert stopped.returncode == 0, stopped.stderr

        assert wait_until_ended(pids, timeout=15) == [], "the command outlived the Stop"
        wait_until(
            lambda: step_rows(home)[0][1],
            timeout=15,
            what="the step to be recorded",
            watch=[worker],
        )
    finally:
        stop(worker)
    assert not (folder / "proof.txt").exists()
    [(tool, error, group)] = step_rows(home)
    assert (tool, error) == ("run_command", ERR_COMMAND_STOPPED)
    assert group
    assert turn_states(home) == ["stopped"]


def test_a_worker_stopped_with_sigterm_ends_its_commands_and_lets_the_reply_go(home, env, marker):
    worker, folder, pids = worker_running_a_long_command(home, env, marker)

    code = stop(worker)  # well before the command's 30 s are up

    assert code == 0, (home / "worker.log").read_text()
    assert wait_until_ended(pids, timeout=10) == []
    assert not (folder / "proof.txt").exists()
    assert [error for _, error, _ in step_rows(home)] == [ERR_COMMAND_SHUTDOWN]
    assert turn_states(home) == ["running"]  # released: the next runner carries it on


# -- everything else goes to Django ----------------------------------------------


def test_conch_passes_other_commands_to_django(home, env):
    assert "[ ] 0001_initial" in conch("showmigrations", "chats", env=env).stdout
    migrated = conch("migrate", "--noinput", "-v0", env=env)
    assert migrated.returncode == 0, migrated.stderr
    assert "[X] 0001_initial" in conch("showmigrations", "chats", env=env).stdout
    assert (home / "conch.sqlite3").exists()


def test_a_bad_setting_is_one_clear_line_not_a_traceback(tmp_path):
    done = conch("check", env=process_env(tmp_path, CONCH_SUBAGENT_LANE="abc"))
    assert done.returncode == 1
    assert done.stderr == "conch: CONCH_SUBAGENT_LANE must be a whole number (got 'abc').\n"


def test_ci_runs_the_readme_test_line():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    line = next(line for line in readme.splitlines() if line.endswith(".venv/bin/python -m pytest"))
    assert line.startswith("python3 -m venv .venv && ")
    assert "--require-hashes -r requirements/test.txt" in line
    assert line in ci.splitlines()
