"""The workspace in use, in a real browser: headless Chromium against a real Daphne.

See before you approve; a message queued behind a running reply, with Cancel;
keyboard and focus. Scripted replies play in the server's own runner; every
wait is on a condition in the page.
"""

from __future__ import annotations

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from chats.models import Conversation, Mode, QueuedInput
from tests.browser.conftest import watch
from tests.factories import ChatFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

STEP = 0.3  # seconds per scripted action, as in test_workspace.py


def open_chat(tab, server, chat) -> None:
    tab.page.goto(f"{server.url}/c/{chat.public_id}/")
    expect(tab.page.locator("body")).to_have_attribute("data-socket", "open")


def focused_id(page) -> str:
    return page.evaluate("document.activeElement && document.activeElement.id")


# ---------------------------------------------------------------------------
# See before you approve


def test_the_diff_shows_before_the_ok_and_the_step_opens_to_it_after(
    tab, sign_in, conch_server, owner, agent, workspace
):
    (workspace / "notes.md").write_text("# Notes\nold line\n<script>x</script>\n")
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        mode=Mode.ASK,
        title="Careful",
        reply=[
            {"tool": "edit_file", "args": {"path": "notes.md", "old": "old line", "new": "new"}},
            {"tool": "run_command", "args": {"command": "cat notes.md"}},
            {"say": "Done."},
        ],
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    page.get_by_label("Message").fill("Tidy the notes")
    page.get_by_label("Message").press("Enter")

    request = page.locator(".request")
    # At this width, before beside after (tests/browser/test_approvals.py has both layouts).
    diff = request.locator(".diff-split")
    expect(diff.locator(".src.is-del")).to_have_text("old line")
    expect(diff.locator(".src.is-add")).to_have_text("new")
    expect(diff.locator(".src.is-same").last).to_have_text("<script>x</script>")
    assert (workspace / "notes.md").read_text().startswith("# Notes\nold line")
    page.get_by_role("button", name="Approve", exact=True).click()

    expect(request.locator("pre.command")).to_have_text("cat notes.md")
    expect(request.locator(".command-preview .folder")).to_have_attribute(
        "title", str(workspace.resolve())
    )
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#transcript .msg.from-assistant")).to_have_text("Done.")

    edit, command = page.locator("#transcript .step").all()
    # The command's step opens to what it printed.
    expect(command.locator(".step-output")).not_to_be_visible()
    command.locator("summary").click()
    expect(command.locator(".step-output")).to_contain_text("exit status 0")
    expect(command.locator(".step-output")).to_contain_text("<script>x</script>")
    # The ± chip of the edit opens its diff, and focus goes to it.
    expect(edit.locator(".file-change")).not_to_be_visible()
    edit.locator(".files a.file-chip").click()
    expect(edit.locator(".file-change .src.is-add")).to_be_visible()
    expect(edit.locator(".file-change .src.is-add")).to_have_text("new")
    assert re.fullmatch(r"step-\d+-file-1", focused_id(page))
    # Nothing a file said ran as markup.
    assert page.evaluate("document.querySelectorAll('#transcript script').length") == 0


def test_an_opened_step_stays_open_while_the_reply_goes_on(
    tab, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        title="Writing",
        reply=[
            {"tool": "write_file", "args": {"path": "a.txt", "content": "made\n"}},
            *[{"tool": "list_files", "args": {}, "delay": STEP}] * 4,
            {"say": "Done."},
        ],
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    page.get_by_label("Message").fill("Write")
    page.get_by_label("Message").press("Enter")
    first = page.locator("#transcript .step").first
    first.locator("summary").click()
    expect(first.locator(".file-change .diff-new .src")).to_have_text("made")

    expect(page.locator("#transcript .msg.from-assistant")).to_have_text("Done.")

    expect(
        page.locator("#transcript .step").first.locator(".file-change .diff-new .src")
    ).to_be_visible()


# ---------------------------------------------------------------------------
# A message sent while a reply runs


def test_a_message_sent_while_working_shows_queued_and_can_be_cancelled(
    browser_context, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        title="Busy",
        # A step a second: the transcript, swapped in at each, holds still long
        # enough between them for a click to land on Cancel.
        reply=[{"tool": "list_files", "args": {}, "delay": 1.0}] * 40,
    )
    first, second = watch(browser_context.new_page()), watch(browser_context.new_page())
    sign_in(first)
    open_chat(first, conch_server, chat)
    open_chat(second, conch_server, chat)
    page = first.page
    page.bring_to_front()
    page.get_by_label("Message").fill("Look around")
    page.get_by_label("Message").press("Enter")
    expect(page.locator("#transcript .step").first).to_be_visible()

    composer = page.get_by_label("Message")
    expect(composer).to_have_value("")
    composer.fill("Then <b>the docs</b>")
    composer.press("Enter")
    expect(page.locator("#transcript > li.queued")).to_have_count(1)
    expect(composer).to_have_value("")  # the server took it: the composer is free again
    composer.fill("And the tests")
    page.get_by_label("Message").press("Enter")

    queued = page.locator("#transcript > li.queued")
    expect(queued).to_have_count(2)
    expect(queued.first.locator(".text")).to_have_text("Then <b>the docs</b>")
    expect(queued.first).to_contain_text("Sent when this reply ends.")
    # Under the running reply, and live in the other tab too.
    assert page.evaluate(
        "document.querySelector('#reply-1').nextElementSibling.classList.contains('queued')"
    )
    expect(second.page.locator("#transcript > li.queued")).to_have_count(2)

    queued.first.get_by_role("button", name="Cancel").click()

    expect(queued).to_have_count(1)
    expect(queued.first.locator(".text")).to_have_text("And the tests")
    expect(second.page.locator("#transcript > li.queued")).to_have_count(1)
    assert list(QueuedInput.objects.values_list("text", flat=True)) == ["And the tests"]
    expect(composer).to_be_focused()


def test_a_cancel_that_comes_too_late_says_so_even_if_a_push_replaced_its_form(
    browser_context, sign_in, conch_server, owner, agent, workspace, console
):
    """The reply waits for an OK, so nothing is pushed but what this test causes."""
    # The too-late Cancel is refused with a 409 on purpose; Chromium and htmx log it.
    console.allow(r"status of 409 \(Conflict\) \(http://[^ ]+/queued/\d+/cancel/:")
    console.allow(r"Response Status Error Code 409 from /c/[^ ]+/queued/\d+/cancel/")
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        mode=Mode.ASK,
        title="Waiting",
        reply=[{"tool": "write_file", "args": {"path": "a.txt", "content": "a"}}],
    )
    first, second = watch(browser_context.new_page()), watch(browser_context.new_page())
    sign_in(first)
    open_chat(first, conch_server, chat)
    open_chat(second, conch_server, chat)
    page = first.page
    page.bring_to_front()
    composer = page.get_by_label("Message")
    composer.fill("Write a")
    composer.press("Enter")
    expect(page.locator(".request")).to_contain_text("It needs your OK")
    composer.fill("Then b")
    composer.press("Enter")
    queued = page.locator("#transcript > li.queued")
    expect(queued).to_have_count(1)

    # The Cancel is held back on its way, until a push from the other tab has
    # replaced the transcript, and with it the form that asked.
    held = []
    page.route("**/queued/*/cancel/", lambda route: held.append(route))
    queued.get_by_role("button", name="Cancel").click()
    page.wait_for_function("document.querySelector('#transcript .queued button[disabled]')")
    assert len(held) == 1
    # A reply took it meanwhile (changed here, this reaches no page). Changed only now,
    # with the Cancel pressed: anything that redrew the page before the press (a late
    # refetch on CI's loaded machine) would have drawn it taken, with no Cancel to press.
    QueuedInput.objects.update(taken_at=timezone.now())
    second.page.get_by_label("Message").fill("And c")
    second.page.get_by_label("Message").press("Enter")
    expect(queued.locator(".text")).to_have_text(["And c"])  # "Then b" shows as taken now
    held[0].continue_()

    expect(page.locator("#flash")).to_have_text(
        "Too late to cancel: the reply already took that message."
    )
    expect(queued.locator(".text")).to_have_text(["And c"])


# ---------------------------------------------------------------------------
# Keyboard and focus


def test_an_untitled_new_chat_focuses_the_message_box_and_takes_its_title_from_it(
    tab, sign_in, conch_server, owner, agent
):
    page = tab.page
    sign_in(tab)

    page.get_by_role("button", name="Start chat").click()

    expect(page.get_by_role("heading", name="New chat", exact=True)).to_be_visible()
    expect(page.get_by_label("Message")).to_be_focused()
    page.keyboard.type("Fix the flaky login test")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("it fails on Mondays")
    chat = Conversation.objects.get()
    assert chat.untitled and chat.title == "New chat"
    page.get_by_label("Message").press("Enter")

    expect(page.locator("#chat-heading")).to_have_text("Fix the flaky login test")
    expect(page.locator(f"#row-{chat.public_id} .row-title")).to_have_text(
        "Fix the flaky login test"
    )
    expect(page).to_have_title("Fix the flaky login test · Conch")
    chat.refresh_from_db()
    assert (chat.title, chat.untitled) == ("Fix the flaky login test", False)


def test_rename_mode_and_stop_leave_focus_on_the_next_control_and_escape_closes_menus(
    tab, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        title="Fix the login bug",
        reply=[{"tool": "list_files", "args": {}, "delay": STEP}] * 30,
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    expect(page).to_have_title("Fix the login bug · Conch")

    rename = page.locator("#rename-menu")
    rename.locator("summary").click()
    expect(page.get_by_label("New title")).to_be_visible()
    page.get_by_label("New title").press("Escape")
    expect(rename).not_to_have_attribute("open", "")
    expect(rename.locator("summary")).to_be_focused()

    rename.locator("summary").press("Enter")
    page.get_by_label("New title").fill("Login bug, for real")
    page.get_by_label("New title").press("Enter")
    expect(page.locator("#chat-heading")).to_have_text("Login bug, for real")
    expect(page).to_have_title("Login bug, for real · Conch")
    expect(rename).not_to_have_attribute("open", "")
    expect(rename.locator("summary")).to_be_focused()

    page.get_by_role("button", name="Plan").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("button", name="Plan")).to_have_attribute("aria-pressed", "true")
    expect(page.get_by_role("button", name="Plan")).to_be_focused()

    page.get_by_label("Message").fill("Look around")
    page.get_by_label("Message").press("Enter")
    expect(page.locator("#transcript .step").first).to_be_visible()
    page.get_by_role("button", name="Stop").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("button", name="Stop")).to_have_count(0)
    expect(page.get_by_label("Message")).to_be_focused()

    # Escape from anywhere closes an open menu.
    inbound = page.locator("#inbound-menu")
    inbound.locator("summary").click()
    expect(inbound).to_have_attribute("open", "")
    page.locator("#chat-heading").click()
    page.keyboard.press("Escape")
    expect(inbound).not_to_have_attribute("open", "")


def test_a_menu_its_answer_brings_back_open_is_closed_by_its_form_all_the_same(
    tab, sign_in, conch_server, owner, agent, workspace
):
    """A region swapped in again keeps its open menus open (conch-keys.js); a form that
    closes its menu (data-closes-details) closes the one its answer brought, not only the
    one it was sent from, which that answer took away."""
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Inbound")
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)

    inbound = page.locator("#inbound-menu")
    inbound.locator("summary").click()
    inbound.get_by_role("button", name="Turn them away").click()

    expect(inbound.locator("summary .tag")).to_have_text("Turn them away")
    expect(inbound).not_to_have_attribute("open", "")
    expect(inbound.locator("summary")).to_be_focused()


def test_a_push_that_replaces_the_focused_stop_gives_focus_back_in_the_same_task(
    tab, sign_in, conch_server, owner, agent, workspace
):
    """A key pressed just as a push replaces the control it was meant for (Enter on Stop
    while a step streams in) must reach the new control. The ws extension swaps pushed
    regions without htmx's own focus keeping, so focus must come back within the task
    that swapped, before the browser can deliver the key: checked here as the push's
    task ends (a microtask), before any timer could run."""
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        title="Focus",
        reply=[{"tool": "list_files", "args": {}, "delay": STEP}] * 30,
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    page.get_by_label("Message").fill("Look around")
    page.get_by_label("Message").press("Enter")
    stop = page.get_by_role("button", name="Stop")
    expect(stop).to_be_visible()
    stop.focus()
    page.evaluate(
        """() => {
          document.body.addEventListener('htmx:oobAfterSwap', function (evt) {
            if (evt.detail.target && evt.detail.target.id !== 'chat-controls') { return; }
            queueMicrotask(function () {
              window.focusAfterPush = (document.activeElement || {}).id || 'the page';
            });
          });
        }"""
    )
    page.wait_for_function("() => window.focusAfterPush !== undefined")
    assert page.evaluate("() => window.focusAfterPush") == "stop-button"


def test_a_press_on_a_control_an_answer_just_swapped_in_is_htmxs_not_a_plain_post(
    tab, sign_in, conch_server, owner, agent, workspace
):
    """The press lands in the very task of the swap (Enter held on Archive, then again on
    the Unarchive that replaced it): the new form must already be htmx's (no settle
    delay), or the browser posts it plainly, without the CSRF header, and shows
    Django's 403 in place of the chat."""
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Tidy up")
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    page.evaluate("window.stillTheSamePage = true")  # a plain POST would leave this page
    page.evaluate(
        """() => {
          document.body.addEventListener('htmx:oobAfterSwap', function (evt) {
            if (window.pressed || !evt.detail.target || evt.detail.target.id !== 'chat-settings') { return; }
            var button = document.getElementById('archive-button');
            if (!button || button.textContent.trim() !== 'Unarchive') { return; }  // not ours yet
            window.pressed = true;
            queueMicrotask(function () { button.click(); });
          });
        }"""
    )

    page.locator("#chat-settings").get_by_role("button", name="Archive", exact=True).click()

    page.wait_for_function("() => window.pressed === true")
    expect(
        page.locator("#chat-settings").get_by_role("button", name="Archive", exact=True)
    ).to_be_visible()
    expect(page.locator("#chat-settings .tag")).to_have_count(0)
    assert page.evaluate("window.stillTheSamePage === true")
    chat.refresh_from_db()
    assert not chat.archived  # archived, then back


def test_keyboard_shortcuts_search_new_chat_message_box_and_the_list(
    tab, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Keys")
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    message = page.get_by_label("Message")
    expect(message).to_be_focused()  # a chat page opens with the cursor in the message box

    page.locator("#chat-heading").click()
    page.keyboard.press("/")
    expect(page.locator("#search-q")).to_be_focused()
    page.keyboard.press("Shift+Escape")
    expect(message).to_be_focused()
    page.keyboard.type("a/b")  # in a field, / is text
    expect(message).to_have_value("a/b")
    page.keyboard.press("Control+k")
    expect(page.locator("#search-q")).to_be_focused()

    page.locator("#chat-heading").click()
    page.keyboard.press("?")
    shortcuts = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(shortcuts).to_be_visible()
    expect(shortcuts).to_contain_text("Go to the message box")
    page.keyboard.press("Escape")
    expect(shortcuts).to_be_hidden()

    page.keyboard.press("Control+Shift+O")
    expect(page).to_have_url(re.compile(r"/#new-chat-heading$"))
    first_field = page.locator("#new-chat").locator("input:not([type=hidden]), select, textarea")
    expect(first_field.first).to_be_focused()


@pytest.mark.parametrize("width", [390, 1280], ids=["phone", "desktop"])
def test_a_deep_folder_reads_by_its_last_parts_in_the_chat_list(
    tab, sign_in, conch_server, owner, agent, tmp_path, width
):
    folder = tmp_path / "work" / "clients" / "projects" / "conch"
    folder.mkdir(parents=True)
    chat = ChatFactory(owner=owner, agent=agent, folder=folder, title="Deep")
    page = tab.page
    page.set_viewport_size({"width": width, "height": 800})
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    shown = page.locator(f'a[href="/c/{chat.public_id}/"] .folder').first
    expect(shown).to_have_text("…/projects/conch")
    expect(shown).to_have_attribute("title", str(folder))
