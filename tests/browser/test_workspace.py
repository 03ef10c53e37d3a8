"""The workspace in a real browser: headless Chromium against a real Daphne.

Scripted replies play in the server's own runner, with small delays, so a
reply's steps can be seen arriving. Every wait is on a condition in the page.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from chats.models import Conversation, Mode, TurnState
from tests.factories import ChatFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

STEP = 0.3  # seconds per scripted action: slow enough to watch, quick enough to wait for


def open_chat(tab, server, chat) -> None:
    tab.page.goto(f"{server.url}/c/{chat.public_id}/")
    expect(tab.page.locator("body")).to_have_attribute("data-socket", "open")
    # A page that reloads loses this; a live page keeps it.
    tab.page.evaluate("window.stillTheSamePage = true")


def still_the_same_page(tab) -> bool:
    return tab.page.evaluate("window.stillTheSamePage === true")


def row(page, chat):
    return page.locator(f"#row-{chat.public_id}")


# ---------------------------------------------------------------------------


def test_the_sign_in_link_lets_the_owner_in(tab, sign_in, conch_server, agent):
    page = tab.page
    page.goto(conch_server.url + "/")
    expect(page).to_have_url(re.compile(r"/signin/\?next=/$"))
    expect(page.get_by_text("Open the sign-in link")).to_be_visible()

    sign_in(tab)

    expect(page).to_have_url(conch_server.url + "/")
    expect(page.get_by_role("heading", name="New chat")).to_be_visible()


def test_creating_two_chats(tab, sign_in, conch_server, owner, agent, workspace, console):
    console.allow(r"status of 400 \(Bad Request\) \(http://[^ ]+/chats/new/:")  # the refused folder
    page = tab.page
    sign_in(tab)
    (workspace / "app").mkdir()

    page.get_by_label("Title").fill("Fix the login bug")
    page.get_by_label("Folder").fill(str(workspace / "app"))
    page.get_by_label("Ask").check()
    page.get_by_role("button", name="Start chat").click()
    expect(page.get_by_role("heading", name="Fix the login bug")).to_be_visible()

    page.get_by_role("link", name="New chat").click()
    page.get_by_label("Title").fill("Release notes")
    page.get_by_label("Folder").fill(str(workspace / "missing"))
    page.get_by_role("button", name="Start chat").click()
    expect(page.locator("#id_folder_error")).to_contain_text("There is no folder at")
    page.get_by_label("Folder").fill("")
    page.get_by_role("button", name="Start chat").click()
    expect(page.get_by_role("heading", name="Release notes")).to_be_visible()

    first, second = Conversation.objects.order_by("pk")
    assert (first.title, first.folder, first.mode) == (
        "Fix the login bug",
        str((workspace / "app").resolve()),
        Mode.ASK,
    )
    assert (second.title, second.folder) == ("Release notes", agent.workspace)
    rows = page.locator("#chat-rows li.chat-row")
    expect(rows).to_have_count(2)
    expect(row(page, second)).to_have_attribute("class", re.compile("is-idle"))
    expect(row(page, first).locator(".folder")).to_have_text(re.compile(r"app$"))


def test_a_message_sends_and_the_replys_steps_appear_live(
    tab, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        reply=[
            {"tool": "list_files", "args": {}, "delay": STEP},
            {
                "tool": "write_file",
                "args": {"path": "notes.md", "content": "# Notes\n"},
                "delay": STEP,
            },
            {"say": "I wrote notes.md.", "delay": STEP},
        ],
        title="Fix the login bug",
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)

    composer = page.get_by_label("Message")
    composer.fill("Write the notes")
    composer.press("Shift+Enter")
    composer.press_sequentially("please")
    composer.press("Enter")

    transcript = page.locator("#transcript")
    expect(transcript.locator(".msg.from-person .text")).to_have_text("Write the notes\nplease")
    expect(composer).to_have_value("")
    expect(row(page, chat).locator(".badge")).to_contain_text("working")
    expect(transcript.locator(".step .family").first).to_have_text("reading files")
    expect(transcript.locator(".step").nth(1)).to_contain_text("editing files")
    expect(transcript.locator(".step").nth(1).locator(".files li")).to_have_text("notes.md")
    expect(transcript.locator(".msg.from-assistant")).to_have_text("I wrote notes.md.")
    expect(row(page, chat).locator(".badge")).to_have_text("idle")
    expect(page.locator("#chat-title .badge")).to_have_text("idle")

    assert still_the_same_page(tab)
    assert (workspace / "notes.md").read_text() == "# Notes\n"


def test_stopping_a_reply(tab, sign_in, conch_server, owner, agent, workspace):
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        reply=[{"tool": "list_files", "args": {}, "delay": STEP}] * 30,
        title="Fix the login bug",
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    page.get_by_label("Message").fill("Look around")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#transcript .step").first).to_be_visible()

    page.get_by_role("button", name="Stop").click()

    expect(page.locator("#chat-title .badge")).to_have_text("stopped")
    expect(page.locator("#transcript .note")).to_contain_text("Stopped: You stopped it.")
    expect(page.get_by_role("button", name="Stop")).to_have_count(0)
    assert chat.turns.get().state == TurnState.STOPPED
    assert still_the_same_page(tab)


def test_approving_a_request_that_needs_you(tab, sign_in, conch_server, owner, agent, workspace):
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        reply=[
            {"tool": "write_file", "args": {"path": "hello.txt", "content": "hello\n"}},
            {"say": "Done."},
        ],
        mode=Mode.ASK,
        title="Fix the login bug",
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    page.get_by_label("Message").fill("Say hello in a file")
    page.get_by_label("Message").press("Enter")

    request = page.locator(".request")
    expect(request).to_contain_text("It needs your OK")
    expect(request).to_contain_text("write_file")
    expect(request.locator(".subject")).to_have_text("hello.txt")
    expect(row(page, chat).locator(".badge")).to_have_text("needs you")
    assert not (workspace / "hello.txt").exists()

    page.get_by_role("button", name="Approve", exact=True).click()

    expect(page.locator("#transcript .step .files li")).to_have_text("hello.txt")
    expect(page.locator("#transcript .msg.from-assistant")).to_have_text("Done.")
    expect(row(page, chat).locator(".badge")).to_have_text("idle")
    expect(request).to_have_count(0)
    assert (workspace / "hello.txt").read_text() == "hello\n"
    assert still_the_same_page(tab)


def test_a_second_tab_follows_the_first(
    browser_context, sign_in, conch_server, owner, agent, workspace
):
    from tests.browser.conftest import watch

    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        reply=[{"tool": "list_files", "args": {}, "delay": STEP}, {"say": "Seen."}],
        title="Fix the login bug",
    )
    other = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Release notes")
    first, second = watch(browser_context.new_page()), watch(browser_context.new_page())
    sign_in(first)
    open_chat(first, conch_server, chat)
    open_chat(second, conch_server, chat)

    first.page.bring_to_front()  # a page behind another gets few animation frames
    first.page.get_by_role("button", name="Plan").click()
    expect(second.page.get_by_role("button", name="Plan")).to_have_attribute("aria-pressed", "true")

    first.page.get_by_text("Rename").click()
    first.page.get_by_label("New title").fill("Login bug, for real")
    first.page.get_by_role("button", name="Save").click()
    expect(second.page.locator("#chat-heading")).to_have_text("Login bug, for real")
    expect(row(second.page, chat).locator(".row-title")).to_have_text("Login bug, for real")

    first.page.get_by_label("Message").fill("Have a look")
    first.page.get_by_label("Message").press("Enter")
    expect(second.page.locator("#transcript .step .family")).to_have_text("reading files")
    expect(second.page.locator("#transcript .msg.from-assistant")).to_have_text("Seen.")

    first.page.goto(f"{conch_server.url}/c/{other.public_id}/")
    first.page.get_by_role("button", name="Archive").click()
    expect(row(second.page, other)).to_have_count(0)

    # A chat the second tab has never seen: its row arrives alone and takes its place.
    first.page.get_by_role("link", name="New chat").click()
    first.page.get_by_label("Title").fill("Brand new")
    first.page.get_by_role("button", name="Start chat").click()
    expect(second.page.locator("#chat-rows .row-title").first).to_have_text("Brand new")

    assert still_the_same_page(second)


def test_a_row_moves_to_its_place_and_a_deleted_one_leaves_live(
    browser_context, sign_in, conch_server, owner, agent, workspace
):
    from tests.browser.conftest import watch

    oldest = ChatFactory(
        owner=owner, agent=agent, folder=workspace, title="Oldest", reply=[{"say": "Done."}]
    )
    middle = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Middle")
    newest = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Newest")
    now = timezone.now()
    for hours, chat in enumerate((newest, middle, oldest), start=1):
        Conversation.objects.filter(pk=chat.pk).update(
            last_interaction_at=now - timedelta(hours=hours)
        )
    first, second = watch(browser_context.new_page()), watch(browser_context.new_page())
    sign_in(first)
    open_chat(first, conch_server, oldest)
    open_chat(second, conch_server, oldest)
    titles = second.page.locator("#chat-rows .row-title")
    expect(titles).to_have_text(["Newest", "Middle", "Oldest"])

    # A message to the oldest: its row alone is pushed, and goes to the top.
    first.page.bring_to_front()
    first.page.get_by_label("Message").fill("Have a look")
    first.page.get_by_label("Message").press("Enter")
    expect(second.page.locator("#transcript .msg.from-assistant")).to_have_text("Done.")
    expect(titles).to_have_text(["Oldest", "Newest", "Middle"])
    # The push is the same for every tab; this tab marks the row of the chat it shows.
    expect(row(second.page, oldest).locator("a")).to_have_attribute("aria-current", "page")
    expect(second.page.locator("#chat-rows a[aria-current]")).to_have_count(1)

    # Another chat deleted in the first tab leaves the second tab's list.
    first.page.goto(f"{conch_server.url}/c/{middle.public_id}/")
    first.page.get_by_text("Delete…").click()
    first.page.get_by_role("button", name="Delete for good").click()
    expect(titles).to_have_text(["Oldest", "Newest"])

    # All from the pushes: no gap, no refetch of the list.
    assert second.page.evaluate("document.body.getAttribute('data-refetches')") is None
    assert still_the_same_page(second)
