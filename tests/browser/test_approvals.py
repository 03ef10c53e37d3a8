"""Approvals in a real browser: a request's three answers by their keys, each kept
in the transcript; a deny's reason reaching the model; the chat's standing OKs listed and
taken back; diffs numbered and coloured, side by side on a desktop and unified on a phone;
and axe finding nothing serious with a request shown, at both sizes."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from chats.engines.openai_compat import messages_for
from chats.models import Mode, StandingOk, Step
from chats.runtime.stepping import _transcript_loader
from tests.browser.a11y import axe_violations
from tests.browser.test_words import send
from tests.browser.test_workspace import open_chat
from tests.factories import ChatFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
STEP = 0.3  # seconds per scripted action, as in test_workspace.py


def write(path: str, content: str = "x\n") -> dict:
    return {"tool": "write_file", "args": {"path": path, "content": content}}


def test_the_three_answers_by_their_keys_each_kept_in_the_transcript(
    tab, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        mode=Mode.ASK,
        reply=[
            write("a.txt"),
            write("b.txt"),
            write("c.txt"),
            {"tool": "run_command", "args": {"command": "make deploy"}},
            {"say": "Done."},
        ],
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    send(page, "Write three files, then deploy")
    request = page.locator("#chat-controls .request")
    expect(request.locator(".subject")).to_have_text("a.txt")
    expect(page.locator("#approve-button kbd")).to_have_text("A")
    expect(page.locator("#always-button kbd")).to_have_text("S")
    expect(page.locator("#deny-button kbd")).to_have_text("D")
    expect(page.locator("#always-button")).to_contain_text("don't ask again for write_file")

    # A key typed in the message box is only a letter there.
    message = page.get_by_label("Message")
    message.focus()
    page.keyboard.press("a")
    expect(message).to_have_value("a")
    expect(request.locator(".subject")).to_have_text("a.txt")
    assert not (workspace / "a.txt").exists()
    message.fill("")

    # Escape leaves the box; A approves.
    message.press("Escape")
    page.keyboard.press("a")
    expect(request.locator(".subject")).to_have_text("b.txt")
    expect(page.locator("#transcript")).to_contain_text("You approved")
    assert (workspace / "a.txt").exists()

    # The focus stays off the box, so S answers the next: b.txt, and c.txt without asking.
    page.keyboard.press("s")
    expect(request.locator(".subject")).to_have_text("make deploy")
    expect(page.locator("#transcript")).to_contain_text(
        "You approved and won't be asked again for write_file in this chat"
    )
    assert (workspace / "b.txt").exists() and (workspace / "c.txt").exists()

    # D denies, with the reason typed in its box.
    page.get_by_label("Reason for denying (optional)").fill("Use the staging target first.")
    page.locator("#request-heading").click()  # out of the box
    page.keyboard.press("d")
    expect(page.locator("#transcript .msg.from-assistant")).to_have_text("Done.")
    expect(request).to_have_count(0)
    transcript = page.locator("#transcript")
    expect(transcript).to_contain_text("You denied: Use the staging target first.")
    expect(transcript.locator(".step-error")).to_have_text("Not run: you said no.")

    # The model reads the reason as the command's result.
    step = Step.objects.get(turn__conversation=chat, tool="run_command")
    assert step.error == "The person denied this: Use the staging target first."
    tool_results = [
        m["content"]
        for m in messages_for("system", _transcript_loader(chat)())
        if m["role"] == "tool"
    ]
    assert tool_results[-1] == "Error: The person denied this: Use the staging target first."

    # The standing OK is on the chat, and can be taken back.
    expect(page.locator("#chat-title .badge")).to_have_text("idle")
    allowed = page.locator("#allowed-menu")
    allowed.locator("summary").click()
    expect(allowed.locator(".allowed-what")).to_have_text(["write_file"])
    allowed.get_by_role("button", name="Take back write_file").click()
    expect(page.locator("#allowed-menu")).to_have_count(0)
    assert not StandingOk.objects.exists()


def test_the_allowed_menu_opened_while_a_reply_runs_stays_open_through_its_pushes(
    tab, sign_in, conch_server, owner, agent, workspace
):
    """A running reply pushes the chat's settings again at each step. "Allowed without
    asking", opened meanwhile, must stay open through those pushes, or its Take back can't
    be pressed: a push landing between the opening and the press closed it again."""
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        mode=Mode.ASK,
        reply=[{"tool": "list_files", "args": {}, "delay": STEP}] * 30,
    )
    StandingOk.objects.create(conversation=chat, tool="write_file")
    StandingOk.objects.create(conversation=chat, tool="edit_file")
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    send(page, "Look around")
    expect(page.locator("#chat-title .badge")).to_have_text("working")

    allowed = page.locator("#allowed-menu")
    allowed.locator("summary").click()
    expect(allowed).to_have_attribute("open", "")
    # Marks the settings as they are now: a push's are new, without the mark.
    page.locator("#chat-settings").evaluate("settings => settings.dataset.seen = 'yes'")
    expect(page.locator("#chat-settings[data-seen]")).to_have_count(0)
    expect(allowed).to_have_attribute("open", "")

    allowed.get_by_role("button", name="Take back write_file").click()
    expect(allowed.locator(".allowed-what")).to_have_text(["edit_file"])
    expect(allowed).to_have_attribute("open", "")  # its own answer brought the settings too
    allowed.get_by_role("button", name="Take back edit_file").click()
    expect(allowed).to_have_count(0)
    assert not StandingOk.objects.exists()

    page.get_by_role("button", name="Stop").click()
    expect(page.locator("#chat-title .badge")).not_to_have_text("working")


def test_dont_ask_again_for_a_command_and_a_change_of_mode_takes_it_back(
    tab, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        mode=Mode.ASK,
        reply=[
            {"tool": "run_command", "args": {"command": "echo one"}},
            {"tool": "run_command", "args": {"command": "echo one more"}},
            {"say": "Both ran."},
        ],
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    send(page, "Echo twice")

    always = page.locator("#always-button")
    expect(always).to_contain_text("don't ask again for commands that start “echo one”")
    always.click()
    expect(page.locator("#transcript .msg.from-assistant")).to_have_text("Both ran.")
    expect(page.locator("#transcript .step")).to_have_count(2)
    expect(page.locator("#chat-title .badge")).to_have_text("idle")
    allowed = page.locator("#allowed-menu")
    allowed.locator("summary").click()
    expect(allowed.locator(".allowed-what")).to_have_text(["commands that start “echo one”"])

    page.get_by_role("button", name="Auto").click()

    expect(page.get_by_role("button", name="Auto")).to_have_attribute("aria-pressed", "true")
    expect(page.locator("#allowed-menu")).to_have_count(0)
    assert not StandingOk.objects.filter(conversation=chat).exists()


BEFORE = "def greet(name):\n    return 'hi ' + name\n\n\nprint(greet('you'))\n"
AFTER = "def greet(name):\n    return f'hello {name}'\n\n\nprint(greet('you'))\n"


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_a_diff_is_numbered_coloured_split_on_a_desktop_unified_on_a_phone_and_accessible(
    browser_context, tab, sign_in, conch_server, owner, agent, workspace, size
):
    (workspace / "greet.py").write_text(BEFORE)
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        mode=Mode.ASK,
        reply=[write("greet.py", AFTER)],
    )
    page = tab.page
    page.set_viewport_size(DESKTOP if size == "desktop" else PHONE)
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    send(page, "Say hello")

    preview = page.locator(".request-preview")
    expect(preview).to_contain_text("Changes to greet.py")
    split, unified = preview.locator(".diff-split"), preview.locator(".diff-unified")
    if size == "desktop":
        expect(split).to_be_visible()
        expect(unified).to_be_hidden()
        # Before beside after: the line taken out on the left, its replacement on the right.
        row = split.locator(".dl").nth(2)
        expect(row.locator(".ln")).to_have_text(["2", "2"])
        expect(row.locator(".src.is-del")).to_have_text("    return 'hi ' + name")
        expect(row.locator(".src.is-add")).to_have_text("    return f'hello {name}'")
        left = row.locator(".src.is-del").bounding_box()
        right = row.locator(".src.is-add").bounding_box()
        assert left["x"] + left["width"] <= right["x"] and abs(left["y"] - right["y"]) < 1
    else:
        expect(unified).to_be_visible()
        expect(split).to_be_hidden()
        removed = unified.locator(".dl.is-del")
        added = unified.locator(".dl.is-add")
        expect(removed.locator(".ln")).to_have_text(["2", ""])
        expect(added.locator(".ln")).to_have_text(["", "2"])
        expect(removed.locator(".src")).to_have_text("-    return 'hi ' + name")
        expect(added.locator(".src")).to_have_text("+    return f'hello {name}'")
        above = removed.locator(".src").bounding_box()
        below = added.locator(".src").bounding_box()
        assert below["y"] >= above["y"] + above["height"] and below["x"] == above["x"]
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    # Coloured by Pygments: the keyword and the string each in their class's colour.
    shown = split if size == "desktop" else unified
    keyword = shown.locator(".src .k").first
    expect(keyword).to_have_text("def")
    colour = keyword.evaluate("e => getComputedStyle(e).color")
    plain = shown.locator(".src .n").first.evaluate("e => getComputedStyle(e).color")
    assert colour != plain

    assert axe_violations(page) == []
