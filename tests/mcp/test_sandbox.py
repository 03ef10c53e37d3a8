"""A stdio MCP server runs as a command does: in the sandbox, in its folder, with a short
environment; a chat with other people in it gets the sandbox or no server.

server-everything runs from a copy in its own folder (the sandbox hides /tmp, where the
repository may be). What it can see is read from outside, through ``/proc/<pid>/root``:
the server's own view of the files, whatever tools it has.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from chats.mcp import client
from chats.quoting import REDACTED
from chats.tools import sandbox
from tests.mcp.conftest import EVERYTHING, NODE, marked, marked_processes, servers_started


@pytest.fixture(autouse=True)
def _probe_afresh():
    sandbox.sandbox_probe_forget()
    yield
    sandbox.sandbox_probe_forget()


def the_server(mark: str) -> int:
    """The server itself (node), inside whatever it runs in."""
    [pid] = [
        pid
        for pid in marked_processes(mark)
        if str(EVERYTHING).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        and Path(f"/proc/{pid}/cmdline").read_bytes().startswith(NODE.encode())
    ]
    return pid


def seen_by(pid: int, path: Path | str) -> Path:
    return Path(f"/proc/{pid}/root{os.path.realpath(path)}")


def test_a_stdio_server_runs_in_the_sandbox(everything, settings, tmp_path):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_AUTO
    mark = marked()
    kept = Path(django_settings.CONCH_HOME) / f"{mark}-conch-home.txt"
    kept.write_text("Conch's own")
    beside = tmp_path / "beside-the-folder.txt"
    beside.write_text("someone else's")
    (everything.home / f"{mark}.txt").write_text("the chat's")
    try:
        client.list_tools(everything.stdio(mark))
        [leader] = servers_started(mark)
        server = the_server(mark)

        assert Path(f"/proc/{leader}/cmdline").read_bytes().split(b"\0")[0].endswith(b"bwrap")
        assert seen_by(server, everything.home / f"{mark}.txt").read_text() == "the chat's"
        assert not seen_by(server, kept).exists()
        assert not seen_by(server, beside).exists()
        assert os.listdir(seen_by(server, django_settings.CONCH_HOME)) == []
        assert os.path.realpath(f"/proc/{server}/cwd") == os.path.realpath(everything.home)
    finally:
        kept.unlink()
        (everything.home / f"{mark}.txt").unlink()


def test_a_stdio_server_gets_the_short_environment_and_what_the_persona_names(
    everything, settings, monkeypatch
):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_REQUIRED
    monkeypatch.setenv("CONCH_PROBE_SETTING", "conch-own-setting-value")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-probe-0123456789abcdef")
    monkeypatch.setenv("DATABASE_URL", "postgres://probe:probe@db/probe")
    spec = everything.stdio(marked(), env={"GREETING": "hello from the persona"})

    env = json.loads(client.call_tool(spec, "get-env", {}).text)

    assert env["GREETING"] == "hello from the persona"
    assert env["PWD"] == os.path.realpath(everything.home)
    for name in ("CONCH_PROBE_SETTING", "OPENAI_API_KEY", "DATABASE_URL", "DJANGO_SETTINGS_MODULE"):
        assert name not in env
    assert set(env) <= {*sandbox.PASSED_ENV, "PWD", "LOGNAME", "GREETING", "MCP_TEST_MARK"}


def test_a_chat_with_other_people_in_it_sees_only_the_system_and_its_folder(everything, settings):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_AUTO
    mark = marked()
    client.list_tools(everything.stdio(mark, sandbox_required=True))
    server = the_server(mark)

    assert seen_by(server, "/usr/bin").is_dir()
    assert seen_by(server, everything.home / EVERYTHING).is_file()
    assert not seen_by(server, django_settings.BASE_DIR).exists()  # nor this repository
    assert not seen_by(server, Path.home()).exists()


def test_a_chat_with_other_people_in_it_gets_no_server_where_the_sandbox_does_not_work(
    everything, settings, broken_bwrap
):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_AUTO
    mark = marked()

    with pytest.raises(client.McpError) as refused:
        client.list_tools(everything.stdio(mark, sandbox_required=True))

    assert refused.value.words.startswith(
        "MCP servers in a chat with someone else's words run only in the sandbox"
    )
    assert "No permissions to create a new namespace" in refused.value.words
    assert marked_processes(mark) == []


def test_required_refuses_to_start_a_server_where_the_sandbox_does_not_work(
    everything, settings, broken_bwrap
):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_REQUIRED
    mark = marked()

    with pytest.raises(client.McpError) as refused:
        client.list_tools(everything.stdio(mark))

    assert refused.value.words.startswith(
        "CONCH_SANDBOX is 'required' and the sandbox does not work on this computer"
    )
    assert marked_processes(mark) == []


def test_auto_starts_a_server_plainly_where_the_sandbox_does_not_work(
    everything, settings, broken_bwrap
):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_AUTO
    mark = marked()

    assert client.call_tool(everything.stdio(mark), "echo", {"message": "hi"}).text == "Echo: hi"
    [leader] = servers_started(mark)
    assert b"bwrap" not in Path(f"/proc/{leader}/cmdline").read_bytes()


def test_a_command_missing_in_the_sandbox_is_an_error_in_bwraps_words(tmp_path, settings):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_REQUIRED
    spec = client.ServerSpec(
        key=marked("missing"),
        name="missing",
        transport="stdio",
        command=("no-such-mcp-server",),
        folder=str(tmp_path),
    )

    with pytest.raises(client.McpError) as failed:
        client.list_tools(spec)

    assert failed.value.words.startswith("The MCP server 'missing' did not start: ")
    assert "execvp no-such-mcp-server: No such file or directory" in failed.value.words


def test_what_a_failing_server_printed_is_shown_without_the_personas_values(tmp_path, settings):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_REQUIRED
    token = "tok-abcdefgh12345678"
    spec = client.ServerSpec(
        key=marked("failing"),
        name="failing",
        transport="stdio",
        command=("/bin/sh", "-c", 'echo "cannot log in with $API_TOKEN" >&2; exit 3'),
        env={"API_TOKEN": token},
        folder=str(tmp_path),
    )

    with pytest.raises(client.McpError) as failed:
        client.list_tools(spec)

    assert f"cannot log in with {REDACTED}" in failed.value.words
    assert token not in failed.value.words
