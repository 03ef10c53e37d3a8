"""ADR 0134's cards in a real browser: the look at the other chats, and a held message.

Scripted chats play in the server's own runner. The test process starts a
reply (the runner picks it up); everything after that reaches the page over
its socket, and every wait is on a condition in the page.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from chats.models import Inbound, Mode, StartedBy
from chats.runtime.turns import message_send
from tests.browser.test_workspace import STEP, open_chat, row, still_the_same_page
from tests.factories import ChatFactory
from together.messages import inbound_set
from together.models import ChatMessage, MessageState

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def look_card(page):
    return page.locator("#transcript .card-look")


def message_card(page):
    return page.locator("#transcript .card-message")


def test_the_look_card_shows_the_other_chats_and_its_rows_open_them(
    tab, sign_in, conch_server, owner, agent, workspace
):
    busy = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        reply=[
            {"tool": "write_file", "args": {"path": "src/auth.ts", "content": "x"}},
            *[{"tool": "list_files", "args": {}, "delay": STEP}] * 60,
        ],
        title="Fix the login",
    )
    asking = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        reply=[{"tool": "write_file", "args": {"path": "deploy.txt", "content": "2.4"}}],
        title="Roll out 2.4",
        mode=Mode.ASK,
    )
    looker = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        reply=[{"tool": "list_chats", "args": {}, "delay": STEP}, {"say": "Checked."}],
        title="Release notes",
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, busy)
    message_send(conversation=busy, text="Fix it")
    message_send(conversation=asking, text="Roll it out")
    # The busy chat has changed its file and works on; the other waits for an OK.
    expect(page.locator("#transcript .step .files li")).to_have_text("src/auth.ts")
    expect(row(page, asking).locator(".badge")).to_have_text("needs you")
    open_chat(tab, conch_server, looker)

    page.get_by_label("Message").fill("What are the others doing?")
    page.get_by_label("Message").press("Enter")

    card = look_card(page)
    expect(card.locator(".card-head")).to_have_text(
        "Checked on your other chats · 1 working · 1 needs you"
    )
    rows = card.locator(".look-row")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("Fix the login")
    expect(rows.nth(0)).to_contain_text("Changing auth.ts")
    expect(rows.nth(1)).to_contain_text("Roll out 2.4")
    expect(rows.nth(1).locator(".badge")).to_have_text("needs you")

    # A row opens its chat in place: the same page, another chat, a socket of its own.
    rows.nth(0).get_by_role("link").click()
    expect(page).to_have_url(f"{conch_server.url}/c/{busy.public_id}/")
    expect(page.locator("#chat-heading")).to_have_text("Fix the login")
    expect(page).to_have_title("(1) Fix the login · Conch")  # “Roll out 2.4” needs you
    assert still_the_same_page(tab)
    expect(page.locator("body")).to_have_attribute("data-socket", "open")
    expect(page.locator("body")).to_have_attribute("data-socket-opens", "1")
    # Live: the busy chat's steps keep arriving on the page the link opened.
    seen = page.locator("#transcript .step").count()
    expect(page.locator("#transcript .step").nth(seen)).to_be_visible()
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("#chat-title .badge")).to_have_text("stopped")

    page.go_back()
    expect(page.locator("#chat-heading")).to_have_text("Release notes")
    look_card(page).locator(".look-row").nth(1).get_by_role("link").click()
    expect(page.locator("#chat-heading")).to_have_text("Roll out 2.4")
    expect(page.locator(".request")).to_contain_text("It needs your OK")


def held_pair(owner, agent, workspace):
    """“Release notes” asks “Fix the login”, which holds messages, to start a reply."""
    receiver = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        reply=[
            {"tool": "list_files", "args": {}, "delay": STEP},
            {"say": "The login tests pass.", "delay": STEP},
        ],
        title="Fix the login",
    )
    receiver = inbound_set(conversation=receiver, inbound=Inbound.HOLD)
    sender = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        reply=[
            {
                "tool": "message_chat",
                "args": {
                    "chat": receiver.public_id,
                    "text": "Please run the login tests.",
                    "start_reply": True,
                },
            },
            {"say": "Asked it."},
        ],
        title="Release notes",
    )
    return sender, receiver


def test_a_held_message_passed_on_starts_the_receiving_chats_reply_live(
    tab, sign_in, conch_server, owner, agent, workspace
):
    sender, receiver = held_pair(owner, agent, workspace)
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, receiver)

    message_send(conversation=sender, text="Ask the login chat to run its tests")

    card = message_card(page)
    expect(card.locator(".card-head")).to_have_text("From “Release notes” · another chat, not you")
    expect(card.locator(".badge")).to_have_text("held for you")
    expect(card.locator(".card-words")).to_have_text("Please run the login tests.")
    assert not receiver.turns.exists()

    card.get_by_role("button", name="Pass it on").click()

    expect(page.locator("#transcript .step .family")).to_have_text("reading files")
    expect(page.locator("#transcript .msg.from-assistant")).to_have_text("The login tests pass.")
    expect(card.locator(".badge")).to_have_text("read")
    expect(card.get_by_role("button", name="Pass it on")).to_have_count(0)
    expect(page.locator("#chat-title .badge")).to_have_text("idle")
    assert still_the_same_page(tab)
    message = ChatMessage.objects.get()
    assert message.state == MessageState.READ
    assert receiver.turns.get().started_by == StartedBy.MESSAGE


def test_dismissing_a_held_message_turns_its_card_dismissed_and_starts_nothing(
    tab, sign_in, conch_server, owner, agent, workspace
):
    sender, receiver = held_pair(owner, agent, workspace)
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, receiver)
    message_send(conversation=sender, text="Ask the login chat to run its tests")
    card = message_card(page)
    expect(card.locator(".badge")).to_have_text("held for you")

    card.get_by_role("button", name="Dismiss").click()

    expect(card.locator(".badge")).to_have_text("dismissed")
    expect(card.get_by_role("button")).to_have_count(0)
    assert still_the_same_page(tab)
    assert ChatMessage.objects.get().state == MessageState.DISMISSED
    assert not receiver.turns.exists()
    expect(page.locator("#transcript .reply")).to_have_count(0)

    # ⋯ on the card sets what this chat does with the next ones.
    card.locator(".card-menu summary").click()
    card.get_by_role("button", name="Turn them away").click()
    expect(page.locator("#inbound-menu summary .tag")).to_have_text("Turn them away")
    receiver.refresh_from_db()
    assert receiver.inbound == Inbound.REFUSE


def test_a_cards_menu_opened_stays_open_when_the_transcript_is_pushed_again(
    tab, sign_in, conch_server, owner, agent, workspace
):
    """A card's ⋯ menu, opened, stays open when a push brings the transcript again (here,
    another chat's message arriving): conch-keys.js finds it again by its id. Its form
    still closes it."""
    sender, receiver = held_pair(owner, agent, workspace)
    other = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        reply=[{"tool": "message_chat", "args": {"chat": receiver.public_id, "text": "And me."}}],
        title="Roll out 2.4",
    )
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, receiver)
    message_send(conversation=sender, text="Ask the login chat to run its tests")
    cards = message_card(page)
    expect(cards.locator(".badge")).to_have_text("held for you")
    menu = cards.first.locator("details.card-menu")
    menu.locator("summary").click()
    expect(menu).to_have_attribute("open", "")
    # Marks the transcript as it is now: a push's is new, without the mark.
    page.locator("#transcript").evaluate("transcript => transcript.dataset.seen = 'yes'")

    message_send(conversation=other, text="Tell the login chat too")

    expect(cards).to_have_count(2)
    expect(page.locator("#transcript[data-seen]")).to_have_count(0)
    expect(menu).to_have_attribute("open", "")
    expect(cards.nth(1).locator("details.card-menu")).not_to_have_attribute("open", "")

    menu.get_by_role("button", name="Turn them away").click()
    expect(page.locator("#inbound-menu summary .tag")).to_have_text("Turn them away")
    expect(menu).not_to_have_attribute("open", "")


def test_pass_it_on_and_dismiss_leave_focus_on_the_next_held_message_then_the_message_box(
    tab, sign_in, conch_server, owner, agent, workspace
):
    """A press never drops the focus to the page."""
    receiver = inbound_set(
        conversation=ChatFactory(owner=owner, agent=agent, folder=workspace, title="Fix the login"),
        inbound=Inbound.HOLD,
    )
    asks = [
        {"tool": "message_chat", "args": {"chat": receiver.public_id, "text": words}}
        for words in ("First, run the tests.", "Then tell me what failed.")
    ]
    sender = ChatFactory(owner=owner, agent=agent, folder=workspace, reply=asks)
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, receiver)
    message_send(conversation=sender, text="Ask the login chat twice")
    cards = message_card(page)
    expect(cards.locator(".badge")).to_have_text(["held for you", "held for you"])

    cards.nth(0).get_by_role("button", name="Dismiss").focus()
    page.keyboard.press("Enter")

    expect(cards.nth(0).locator(".badge")).to_have_text("dismissed")
    expect(cards.nth(1).get_by_role("button", name="Pass it on")).to_be_focused()

    page.keyboard.press("Tab")  # to its Dismiss
    expect(cards.nth(1).get_by_role("button", name="Dismiss")).to_be_focused()
    page.keyboard.press("Enter")

    expect(cards.nth(1).locator(".badge")).to_have_text("dismissed")
    expect(page.get_by_label("Message", exact=True)).to_be_focused()


def test_archive_leaves_focus_on_the_button_that_undoes_it(
    tab, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Tidy up")
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)

    page.locator("#chat-settings").get_by_role("button", name="Archive").focus()
    page.keyboard.press("Enter")

    unarchive = page.locator("#chat-settings").get_by_role("button", name="Unarchive")
    expect(unarchive).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#chat-settings").get_by_role("button", name="Archive")).to_be_focused()


@pytest.mark.parametrize("size", [{"width": 1280, "height": 800}, {"width": 390, "height": 844}])
def test_the_header_says_what_the_chat_can_do_and_a_passed_on_card_what_comes_next(
    tab, sign_in, conch_server, owner, agent, workspace, size
):
    """Words for people, at both sizes."""
    receiver = inbound_set(
        conversation=ChatFactory(owner=owner, agent=agent, folder=workspace, title="Fix the login"),
        inbound=Inbound.HOLD,
    )
    sender = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        reply=[{"tool": "message_chat", "args": {"chat": receiver.public_id, "text": "FYI."}}],
    )
    page = tab.page
    page.set_viewport_size(size)
    sign_in(tab)
    open_chat(tab, conch_server, receiver)
    expect(page.locator("#chat-title .tool-set")).to_contain_text(
        "It can read files, edit files, run commands"
    )
    message_send(conversation=sender, text="Tell the login chat")
    card = message_card(page)
    expect(card.locator(".hint")).to_contain_text("Held, as this chat’s “Hold them for me” says.")

    card.get_by_role("button", name="Pass it on").click()

    expect(card.locator(".badge")).to_have_text("passed on: this chat reads it when it next works")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
