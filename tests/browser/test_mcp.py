"""A tool from an MCP server in a real browser: the reference git server (mcp-server-git,
over stdio, through the running server's own runner) on the chat's folder."""

from __future__ import annotations

import subprocess
import sys

import pytest
from playwright.sync_api import expect

from chats.mcp import servers as mcp_servers
from chats.models import McpServer, McpStatus, Mode
from tests.browser.test_words import send
from tests.browser.test_workspace import open_chat
from tests.factories import ChatFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def git(folder, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(folder), *args], check=True, capture_output=True, text=True
    ).stdout


def test_a_git_tool_from_an_mcp_server_runs_on_the_chats_folder_and_its_result_shows(
    tab, sign_in, conch_server, owner, agent, workspace
):
    git(workspace, "init", "-q")
    git(
        workspace,
        "-c",
        "user.name=Ada",
        "-c",
        "user.email=ada@example.com",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "The first words of the log",
    )
    (workspace / "notes.md").write_text("# Notes\n")
    server = mcp_servers.discover(
        McpServer.objects.create(
            agent=agent, name="git", command=[sys.executable, "-m", "mcp_server_git"]
        )
    )
    assert server.status == McpStatus.OK, server.status_words
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        mode=Mode.ASK,
        reply=[
            # Read-only by the server's word: it runs without asking.
            {"tool": "mcp__git__git_log", "args": {"repo_path": str(workspace)}},
            # Not read-only: Ask mode shows the server, the tool and its arguments first.
            {
                "tool": "mcp__git__git_add",
                "args": {"repo_path": str(workspace), "files": ["notes.md"]},
            },
            {"say": "Done."},
        ],
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    send(page, "What's in the log? Then stage the notes.")

    request = page.locator("#chat-controls .request")
    preview = request.locator(".mcp-preview")
    expect(preview.locator(".mcp-tool")).to_have_text("git_add")
    expect(preview.locator(".mcp-server")).to_have_text("git")
    expect(preview.locator(".mcp-args")).to_contain_text('"notes.md"')
    assert git(workspace, "diff", "--cached", "--name-only") == ""  # not before the OK
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#transcript .msg.from-assistant")).to_have_text("Done.")
    assert git(workspace, "diff", "--cached", "--name-only").split() == ["notes.md"]

    log_step = page.locator("#transcript .step").first
    expect(log_step.locator(".family")).to_have_text("using a tool from an MCP server")
    expect(log_step.locator("code.tool")).to_have_text("mcp__git__git_log")
    log_step.locator("summary").click()
    output = log_step.locator(".step-output")
    expect(output).to_contain_text("The first words of the log")
    expect(output).to_contain_text("Ada")
    # Fenced as outside words, and the chat careful for it: its timeline says which tool.
    expect(output).to_contain_text("the result of git_log on the MCP server git")
    badge = page.locator("#trust-summary")
    expect(badge).to_have_text("Careful: read something from outside")
    badge.click()
    expect(page.locator("#trust-menu .trust-row").first).to_contain_text(
        "used git_log on the MCP server ‘git’"
    )
