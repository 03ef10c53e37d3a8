"""Whose words the page shows, and how, in Chromium."""

from __future__ import annotations

import json
import re
import threading
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

from chats.models import Mode
from tests.browser.test_together import held_pair, message_card
from tests.browser.test_workspace import STEP, open_chat
from tests.engines.fake_openai import Text
from tests.factories import ChatFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPLY = """# Plan

- read the **tests**
- fix `login()`

| file | lines |
|:-----|------:|
| login.py | 12 |

See [the guide](https://example.com/guide).

```python
def login(user):
    return True
```
"""


def watch_for_copied(page, button: str) -> None:
    """Set ``window.sawCopied`` once ``button`` says "Copied": it does for a moment only,
    so it is watched as it happens, not polled for."""
    page.evaluate(
        """(button) => new MutationObserver(() => {
          const b = document.querySelector(button);
          if (b && b.textContent === 'Copied') window.sawCopied = true;
        }).observe(document.body, {subtree: true, childList: true, characterData: true})""",
        button,
    )


def send(page, text: str) -> None:
    page.get_by_label("Message").fill(text)
    page.get_by_label("Message").press("Enter")


def test_a_reply_renders_as_markdown_with_code_monospaced(
    tab, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, reply=[{"say": REPLY}])
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    send(page, "# not a heading, **not bold**")

    expect(page.locator("#chat-title .badge")).to_have_text("idle")
    reply = page.locator("#transcript .msg.from-assistant .text")
    expect(reply.get_by_role("heading", name="Plan")).to_be_visible()
    expect(reply.locator("ul > li")).to_have_text(["read the tests", "fix login()"])
    expect(reply.get_by_role("table").get_by_role("cell", name="login.py")).to_be_visible()
    link = reply.get_by_role("link", name="the guide")
    expect(link).to_have_attribute("href", "https://example.com/guide")
    code = reply.locator("pre.code code")
    expect(code).to_contain_text("def login(user):")
    # Retrying assertions: a live update may swap the rendered node between a locator
    # finding it and a one-shot evaluate reading it (a detached node has no style).
    expect(code).to_have_css("font-family", re.compile("monospace"))
    expect(reply.locator("pre.code")).to_have_css("white-space", "pre")
    # The person's own words stay as typed.
    expect(page.locator("#transcript .msg.from-person .text")).to_have_text(
        "# not a heading, **not bold**"
    )
    assert (
        page.locator("#transcript .msg.from-person strong, #transcript .msg.from-person h3").count()
        == 0
    )


def test_file_names_in_a_reply_are_words_and_only_real_addresses_are_links(
    tab, sign_in, conch_server, owner, agent, workspace
):
    said = "I changed greet.py, README.md and CHANGES.md. Docs: https://example.com/docs"
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, reply=[{"say": said}])
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    send(page, "What changed?")

    reply = page.locator("#transcript .msg.from-assistant .text")
    expect(reply).to_contain_text("greet.py, README.md and CHANGES.md")
    expect(reply.get_by_role("link")).to_have_count(1)
    expect(reply.get_by_role("link")).to_have_attribute("href", "https://example.com/docs")


def test_each_code_block_has_its_language_and_a_copy_button_that_copies_the_code(
    tab, sign_in, conch_server, owner, agent, workspace, browser_context
):
    browser_context.grant_permissions(["clipboard-read", "clipboard-write"])
    said = "Two ways:\n\n```python\ndef login(user):\n    return True\n```\n\n```\nplain text\n```"
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, reply=[{"say": said}])
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    send(page, "Show me")

    reply = page.locator("#transcript .msg.from-assistant .text")
    bars = reply.locator(".code-bar")
    expect(bars).to_have_count(2)
    expect(bars.locator(".code-lang")).to_have_text(["python", "text"])
    expect(page.locator("#chat-title .badge")).to_have_text("idle")
    watch_for_copied(page, 'button[aria-label="Copy the python code"]')
    page.get_by_role("button", name="Copy the python code").click()
    page.wait_for_function("() => window.sawCopied === true")
    assert page.evaluate("navigator.clipboard.readText()") == "def login(user):\n    return True\n"
    page.reload()  # a page drawn from the start gets its bars too, once each
    expect(page.locator("#transcript .code-bar")).to_have_count(2)


# Records, every frame, whether the page shows the reply's words (a Markdown mark
# the next piece completes, a fence's backticks say, may go; the words never do).
WATCH = """
window.shown = [];
window.sawLiveMarkdown = false;
(function look() {
  const words = document.querySelectorAll('#transcript .msg.from-assistant .text');
  let shown = false;
  words.forEach((el) => { if (el.textContent.includes('Plan')) { shown = true; } });
  window.shown.push(shown);
  const live = document.querySelector('#transcript .is-streaming .text');
  if (live && live.querySelector('h3') && live.querySelector('li')) { window.sawLiveMarkdown = true; }
  if (!window.stopWatching) { requestAnimationFrame(look); }
})();
"""


def test_live_words_render_as_markdown_and_never_blink(
    tab, sign_in, conch_server, owner, agent, workspace, fake_model
):
    gate = threading.Event()
    fake_model.play(Text(REPLY, pieces=6, gate=gate, gate_after=3))
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace)
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    page.evaluate(WATCH)
    send(page, "Plan the fix")

    # Half written: the words so far, already Markdown, in the running reply's slot.
    live = page.locator("#reply-1-text.is-streaming")
    expect(live.get_by_role("heading", name="Plan")).to_be_visible()
    expect(live.locator("li").first).to_have_text("read the tests")
    gate.set()

    final = page.locator("#transcript .msg.from-assistant:not(.is-streaming)")
    expect(final.locator("pre.code")).to_contain_text("return True")
    expect(page.locator("#chat-title .badge")).to_have_text("idle")
    page.evaluate("window.stopWatching = true")
    shown = page.evaluate("window.shown")
    assert page.evaluate("window.sawLiveMarkdown")
    first = shown.index(True)
    # Once the words show, no frame is without them: no blink between pieces or at the end.
    assert all(shown[first:]), shown[first:].index(False)


def test_stop_keeps_the_words_already_written_marked_as_stopped(
    tab, sign_in, conch_server, owner, agent, workspace, fake_model
):
    gate = threading.Event()
    fake_model.play(Text(REPLY, pieces=6, gate=gate, gate_after=3))
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace)
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    send(page, "Plan the fix")

    live = page.locator("#reply-1-text.is-streaming")
    expect(live.get_by_role("heading", name="Plan")).to_be_visible()
    page.get_by_role("button", name="Stop").click()
    kept = page.locator("#transcript .msg.from-assistant.is-stopped")
    expect(kept.get_by_role("heading", name="Plan")).to_be_visible()
    expect(kept).to_contain_text("Stopped here")
    expect(page.locator("#transcript")).to_contain_text("Stopped: You stopped it.")
    gate.set()  # the model's answer may go on: nothing more of it is shown
    page.reload()  # and the words are stored, not only on the page
    expect(page.locator("#transcript .msg.from-assistant.is-stopped")).to_contain_text(
        "read the tests"
    )


UPDATES = Path(__file__).parents[1] / "gateway" / "telegram_updates"


def test_a_telegram_message_shows_under_its_sender_and_app(
    tab, sign_in, conch_server, owner, agent
):
    from chats.gateway.models import ChannelAccount
    from chats.gateway.services import channel_account_secret_rotate
    from chats.gateway.telegram import SECRET_HEADER
    from chats.models import Conversation

    account = ChannelAccount.objects.create(
        owner=owner, channel="telegram", account_id="mybot", secret="123456:SECRET-bot-token"
    )
    secret = channel_account_secret_rotate(account=account)
    update = (UPDATES / "private_text.json").read_bytes()  # a recorded update, from Mario
    request = urllib.request.Request(
        f"{conch_server.url}/gateway/telegram/mybot",
        data=update,
        headers={"Content-Type": "application/json", SECRET_HEADER: secret},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        chat = Conversation.objects.get(public_id=json.loads(response.read())["chat"])
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)

    who = page.locator("#transcript .msg.from-person .who")
    expect(who).to_have_text(re.compile(r"^Mario.* · Telegram$"))
    expect(page.locator("#transcript .msg.from-person .text")).to_have_text("aaaaaaaaaa")

    send(page, "And this one is mine")
    expect(page.locator("#transcript .msg.from-person .who").nth(1)).to_have_text("You")


def test_a_passed_on_message_shows_once_with_conchs_note_as_a_closed_chip(
    tab, sign_in, conch_server, owner, agent, workspace
):
    from chats.runtime.turns import message_send

    sender, receiver = held_pair(owner, agent, workspace)
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, receiver)
    message_send(conversation=sender, text="Ask the login chat to run its tests")
    message_card(page).get_by_role("button", name="Pass it on").click()
    expect(page.locator("#transcript .msg.from-assistant")).to_have_text("The login tests pass.")

    chip = page.locator("#transcript details.model-note")
    expect(chip).to_have_count(1)
    expect(chip.locator("summary")).to_have_text("note to the assistant")
    expect(chip.locator(".model-note-text")).to_be_hidden()
    expect(
        page.get_by_text("Please run the login tests.", exact=False).locator("visible=true")
    ).to_have_count(1)
    transcript_text = page.locator("#transcript").inner_text()
    assert "[Conch:" not in transcript_text and "<chat-message>" not in transcript_text

    chip.locator("summary").click()
    expect(chip.locator(".model-note-text")).to_be_visible()
    expect(chip.locator(".model-note-text")).to_contain_text("[Conch: a message from another")
    expect(chip.locator(".model-note-text")).to_contain_text("<chat-message>")


def test_deny_reads_in_the_persons_words_and_a_stop_is_told_once(
    tab, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        mode=Mode.ASK,
        script=[
            [{"tool": "write_file", "args": {"path": "a.txt", "content": "x"}}, {"say": "Fine."}],
            [{"tool": "list_files", "args": {}, "delay": STEP}] * 30,
        ],
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    send(page, "Write a.txt")
    page.get_by_role("button", name="Deny", exact=True).click()

    expect(page.locator("#transcript .step-error")).to_have_text("Not run: you said no.")
    expect(page.locator("#transcript")).not_to_contain_text("The person said no")

    send(page, "Look around")
    expect(page.locator("#reply-2 .step").first).to_be_visible()
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("#chat-title .badge")).to_have_text("stopped")
    expect(page.locator("#reply-2 .note")).to_have_text("Stopped: You stopped it.")
    text = page.locator("#reply-2").inner_text()
    assert len(re.findall(r"(?i)\bstopped\b", text.replace("Stopped: You stopped it.", ""))) == 0, (
        text
    )


MATHS = """The sum is $\\sum_{i=1}^{n} i$, which costs $5 and $10 to check:

$$
\\frac{n(n+1)}{2} + \\sqrt{x^2 + y^2} + a_1 + a_2 + a_3 + a_4 + a_5 + a_6 + a_7 + a_8 + a_9 + a_{10} + a_{11} + a_{12} + a_{13}
$$

- [x] write the proof
- [ ] check it by hand
"""


@pytest.mark.parametrize(
    "viewport",
    [{"width": 1280, "height": 800}, {"width": 390, "height": 844}],
    ids=["desktop", "phone"],
)
def test_maths_is_drawn_by_the_browser_and_a_task_list_shows_boxes(
    tab, sign_in, conch_server, owner, agent, workspace, viewport
):
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, reply=[{"say": MATHS}])
    page = tab.page
    page.set_viewport_size(viewport)
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    send(page, "Sum it up")

    reply = page.locator("#transcript .msg.from-assistant .text.md")
    expect(reply.locator("math")).to_have_count(2)
    expect(reply).to_contain_text("costs $5 and $10 to check")  # prices, not maths
    # Chromium lays MathML out itself: a fraction's numerator sits above its denominator,
    # and a displayed formula is a block of its own.
    expect(reply.locator('math[display="block"]')).to_have_css("display", "block math")
    # Measured once the reply has ended, both in one read: a push swaps the nodes meanwhile.
    expect(page.locator("#chat-title .badge")).to_have_text("idle")
    numerator, denominator = page.evaluate(
        """() => {
          const frac = document.querySelector('#transcript .msg.from-assistant .text.md mfrac');
          const box = (el) => { const r = el.getBoundingClientRect(); return {y: r.y, height: r.height}; };
          return [box(frac.firstElementChild), box(frac.lastElementChild)];
        }"""
    )
    assert numerator["y"] + numerator["height"] <= denominator["y"] + 1, (numerator, denominator)
    boxes = reply.get_by_role("checkbox")
    expect(boxes).to_have_count(2)
    expect(reply.get_by_role("checkbox", name="write the proof")).to_be_checked()
    expect(reply.get_by_role("checkbox", name="check it by hand")).not_to_be_checked()
    expect(boxes.nth(0)).to_be_disabled()
    expect(boxes.nth(1)).to_be_disabled()
    expect(reply.locator("li").first).to_have_css("list-style-type", "none")
    # A long formula scrolls in its own box: the page never scrolls sideways.
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
