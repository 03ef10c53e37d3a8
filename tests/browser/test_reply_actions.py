"""A reply's actions in Chromium: copy it as Markdown, retry it, and
edit and resend the message it answered; the replaced reply stays readable."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.test_words import send, watch_for_copied
from tests.browser.test_workspace import open_chat, still_the_same_page
from tests.engines.fake_openai import Status as HttpStatus
from tests.engines.fake_openai import Text
from tests.factories import ChatFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FIRST = "# Plan\n\n- read the **tests**\n- fix `login()`"


@pytest.fixture
def answered(owner, agent, workspace):
    return ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        script=[
            [{"say": FIRST}],
            [{"say": "The second go."}],
            [{"say": "The third, after your edit."}],
        ],
    )


@pytest.mark.parametrize("size", [{"width": 1280, "height": 800}, {"width": 390, "height": 844}])
def test_retry_and_edit_keep_each_earlier_version_readable(
    tab, sign_in, conch_server, answered, size
):
    page = tab.page
    page.set_viewport_size(size)
    sign_in(tab)
    open_chat(tab, conch_server, answered)
    send(page, "Write the plan")
    first = page.locator("#reply-1")
    expect(first.locator(".reply-end")).to_contain_text("done")

    first.get_by_role("button", name="Retry").click()

    second = page.locator("#reply-2")
    expect(second.locator(".msg.from-assistant")).to_have_text("The second go.")
    expect(second.locator(".who")).to_contain_text("retried")
    earlier = first.locator("details.earlier")
    expect(earlier).not_to_have_attribute("open", "")
    expect(first.get_by_role("heading", name="Plan")).to_be_hidden()
    earlier.locator("summary").click()
    expect(first.get_by_role("heading", name="Plan")).to_be_visible()
    # Only the last reply offers Retry and Edit.
    expect(first.get_by_role("button", name="Retry")).to_have_count(0)
    expect(page.get_by_role("button", name="Retry")).to_have_count(1)

    second.locator(".edit-prompt summary").click()
    box = second.get_by_label("Edited words")
    expect(box).to_have_value("Write the plan")
    box.fill("Write the plan, shorter")
    second.get_by_role("button", name="Send edited").click()

    third = page.locator("#reply-3")
    expect(third.locator(".msg.from-person .text")).to_have_text("Write the plan, shorter")
    expect(third.locator(".who")).to_contain_text("edited")
    expect(third.locator(".msg.from-assistant")).to_have_text("The third, after your edit.")
    expect(second.locator("details.earlier")).to_have_count(1)
    expect(page.locator("#transcript > li.is-replaced")).to_have_count(2)
    assert still_the_same_page(tab)
    # Nothing on the narrow screen is wider than it.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_a_reply_copies_as_the_markdown_the_model_wrote(
    tab, sign_in, conch_server, answered, browser_context
):
    browser_context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, answered)
    send(page, "Write the plan")
    reply = page.locator("#reply-1")
    expect(reply.locator(".reply-end")).to_contain_text("done")
    expect(page.locator("#chat-title .badge")).to_have_text("idle")
    watch_for_copied(page, "#reply-1 .reply-actions button[data-copy]")

    reply.get_by_role("button", name="Copy reply 1 as Markdown").click()

    page.wait_for_function("() => window.sawCopied === true")
    assert page.evaluate("navigator.clipboard.readText()") == FIRST


def test_an_empty_edit_is_refused_and_keeps_the_box(tab, sign_in, conch_server, answered, console):
    console.allow(r"status of 400 \(Bad Request\) \(http://[^ ]+/edit/:")  # refused, on purpose
    console.allow(r"Response Status Error Code 400 from /c/[^ ]+/edit/")
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, answered)
    send(page, "Write the plan")
    reply = page.locator("#reply-1")
    expect(reply.locator(".reply-end")).to_contain_text("done")

    reply.locator(".edit-prompt summary").click()
    reply.get_by_label("Edited words").fill("   ")
    reply.get_by_role("button", name="Send edited").click()

    expect(page.locator("#flash")).to_have_text("A message needs some words.")
    expect(reply.get_by_label("Edited words")).to_be_visible()
    expect(page.locator("#reply-2")).to_have_count(0)


# ---------------------------------------------------------------------------
# A failed model call


@pytest.mark.parametrize("size", [{"width": 1280, "height": 800}, {"width": 390, "height": 844}])
def test_a_failed_model_call_says_why_plainly_and_retry_asks_again(
    tab, sign_in, conch_server, owner, agent, workspace, fake_model, size
):
    fake_model.play(
        HttpStatus(401, "Incorrect API key provided"),
        Text("Hello again, it worked."),
    )
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace)
    page = tab.page
    page.set_viewport_size(size)
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    send(page, "Say hello")

    failed = page.locator("#reply-1 .reply-failed")
    expect(failed.locator(".reply-failed-head")).to_have_text("This reply failed:")
    expect(failed.locator(".reply-failed-why")).to_contain_text("401")
    expect(failed).to_be_visible()
    retry = page.locator("#reply-1").get_by_role("button", name="Retry")
    expect(retry).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

    retry.click()

    expect(page.locator("#reply-2 .msg.from-assistant")).to_have_text("Hello again, it worked.")
    expect(page.locator("#reply-1.is-replaced details.earlier")).to_have_count(1)


def test_while_the_model_asks_us_to_wait_the_page_says_how_long(
    tab, sign_in, conch_server, owner, agent, workspace, fake_model
):
    fake_model.play(
        HttpStatus(429, "Rate limit reached", headers={"Retry-After": "2"}),
        Text("Done waiting."),
    )
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace)
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    send(page, "Say hello")

    wait = page.locator("#reply-1-text .model-wait")
    expect(wait).to_have_text("The model asked us to wait 2 s. Conch tries again then.")
    expect(page.locator("#reply-1 .msg.from-assistant")).to_have_text("Done waiting.")
    expect(wait).to_have_count(0)


def test_words_typed_into_the_edit_box_outlive_a_push_of_the_transcript(
    tab, sign_in, conch_server, answered, browser_context
):
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, answered)
    send(page, "Write the plan")
    reply = page.locator("#reply-1")
    expect(reply.locator(".reply-end")).to_contain_text("done")
    reply.locator(".edit-prompt summary").click()
    box = reply.get_by_label("Edited words")
    box.fill("Write the plan, in three steps")
    page.evaluate(
        "document.body.addEventListener('htmx:oobAfterSwap', e => {"
        " if (e.detail.target.id === 'transcript') window.pushed = true; })"
    )

    # Another tab renames the chat: every region of this one is pushed again.
    other = browser_context.new_page()
    other.goto(f"{conch_server.url}/c/{answered.public_id}/")
    other.locator("#rename-menu summary").click()
    other.get_by_label("New title").fill("The plan, renamed")
    other.get_by_role("button", name="Save").click()

    page.wait_for_function("() => window.pushed === true")
    expect(reply.locator(".edit-prompt")).to_have_attribute("open", "")
    expect(box).to_have_value("Write the plan, in three steps")
    expect(box).to_be_focused()
