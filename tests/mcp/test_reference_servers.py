"""The reference servers from PyPI, over stdio: ``mcp-server-time`` and ``mcp-server-git``.

They run with ``CONCH_SANDBOX=off``: this venv may sit where the sandbox hides (a clone in
/tmp). The sandbox is tested with server-everything, which runs from its own folder.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from chats.mcp import client
from chats.tools import sandbox
from tests.mcp.conftest import marked, marked_ended, marked_processes, python_server


@pytest.fixture(autouse=True)
def _plain(settings):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_OFF


@pytest.fixture
def repository(tmp_path):
    folder = tmp_path / "repo"
    folder.mkdir()
    git = ["git", "-c", "user.name=Ada", "-c", "user.email=ada@example.org"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=folder, check=True)
    (folder / "notes.txt").write_text("first\n")
    subprocess.run([*git, "add", "notes.txt"], cwd=folder, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "The first notes"], cwd=folder, check=True)
    subprocess.run(["git", "config", "user.name", "Ada"], cwd=folder, check=True)
    subprocess.run(["git", "config", "user.email", "ada@example.org"], cwd=folder, check=True)
    return folder


def test_the_time_server_lists_its_tools_and_answers_a_call(tmp_path):
    spec = python_server("mcp-server-time", folder=tmp_path, mark=marked("time"))

    tools = {tool.name: tool for tool in client.list_tools(spec)}

    assert {"get_current_time", "convert_time"} <= set(tools)
    now = tools["get_current_time"]
    assert now.read_only is True
    assert "timezone" in now.input_schema["properties"]
    assert now.description

    result = client.call_tool(spec, "get_current_time", {"timezone": "Asia/Tokyo"})

    assert (result.is_error, result.truncated) == (False, False)
    said = json.loads(result.text)
    assert said["timezone"] == "Asia/Tokyo"
    assert said["datetime"].endswith("+09:00")


def test_the_time_server_says_a_bad_time_zone_is_an_error(tmp_path):
    spec = python_server("mcp-server-time", folder=tmp_path, mark=marked("time"))

    result = client.call_tool(spec, "get_current_time", {"timezone": "Mars/Olympus_Mons"})

    assert result.is_error is True
    assert "Mars/Olympus_Mons" in result.text


def test_the_git_server_works_in_the_chats_repository(repository):
    spec = python_server("mcp-server-git", folder=repository, mark=marked("git"))

    tools = {tool.name: tool for tool in client.list_tools(spec)}

    assert tools["git_status"].read_only is True
    assert tools["git_commit"].read_only is False
    assert "repo_path" in tools["git_log"].input_schema["properties"]

    (repository / "notes.txt").write_text("first\nsecond\n")
    status = client.call_tool(spec, "git_status", {"repo_path": str(repository)})
    assert not status.is_error
    assert "modified:   notes.txt" in status.text

    client.call_tool(spec, "git_add", {"repo_path": str(repository), "files": ["notes.txt"]})
    committed = client.call_tool(
        spec, "git_commit", {"repo_path": str(repository), "message": "Second notes"}
    )
    assert not committed.is_error, committed.text
    log = client.call_tool(spec, "git_log", {"repo_path": str(repository)})
    assert "Second notes" in log.text and "The first notes" in log.text


def test_a_server_is_started_on_first_use_and_shared_by_later_calls(tmp_path):
    mark = marked("time")
    spec = python_server("mcp-server-time", folder=tmp_path, mark=mark)
    assert marked_processes(mark) == []

    client.list_tools(spec)
    first = marked_processes(mark)
    client.call_tool(spec, "get_current_time", {"timezone": "UTC"})

    assert first and marked_processes(mark) == first


def test_a_server_that_exits_at_once_is_an_error_in_its_own_words(tmp_path):
    spec = python_server(
        "mcp-server-git", "--repository", str(tmp_path / "nowhere"), folder=tmp_path, mark=marked()
    )

    started = time.monotonic()
    with pytest.raises(client.McpError) as failed:
        client.list_tools(spec)

    words = failed.value.words
    assert words.startswith("The MCP server 'mcp-server-git' did not start")
    assert f"{tmp_path / 'nowhere'} does not exist" in words
    assert "Traceback" not in words
    assert time.monotonic() - started < 15


def test_a_command_that_does_not_exist_is_an_error_in_words(tmp_path):
    spec = client.ServerSpec(
        key="missing",
        name="missing",
        transport="stdio",
        command=("no-such-mcp-server",),
        folder=str(tmp_path),
    )

    with pytest.raises(client.McpError) as failed:
        client.list_tools(spec)

    assert failed.value.words == (
        "The MCP server 'missing' did not start: no-such-mcp-server was not found."
    )


def test_the_server_ended_by_stop_leaves_nothing_running(repository):
    """A git hook the call started (in a thread the server can't cancel) ends with it."""
    mark = marked("git")
    spec = python_server("mcp-server-git", folder=repository, mark=mark)
    done = repository.parent / "hook-finished"
    hook = repository / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\nsleep 3\ntouch {done}\n")
    hook.chmod(0o755)
    (repository / "notes.txt").write_text("changed\n")
    client.call_tool(spec, "git_add", {"repo_path": str(repository), "files": ["notes.txt"]})
    started = time.monotonic()

    with pytest.raises(client.McpInterrupted) as stopped:
        client.call_tool(
            spec,
            "git_commit",
            {"repo_path": str(repository), "message": "Never"},
            interrupted=lambda: "Stopped by the person." if time.monotonic() - started > 1 else "",
        )

    assert "'git_commit'" in stopped.value.words and "Stopped by the person." in stopped.value.words
    # The hook runs with the server's mark, as every process the server starts does: once
    # none is left, nothing can write the file, and none did.
    assert marked_ended(mark, 5)
    assert not done.exists()
    log = client.call_tool(spec, "git_log", {"repo_path": str(repository)})
    assert "Never" not in log.text  # and the next call starts the server afresh
