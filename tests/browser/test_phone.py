"""A phone, a theme, and the gateway's tools out of the way.

On a narrow screen the chat list is a drawer behind the top bar's button, and
nothing scrolls sideways, down to 320 px. On a touch screen Enter makes a new
line and the Send button sends. The theme follows the system unless the person
chose one, and the choice stays with the browser. Chromium, against a real Daphne.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from chats.models import Inbound
from chats.runtime.turns import message_send
from tests.browser.a11y import axe_violations
from tests.browser.conftest import watch
from tests.browser.test_workspace import open_chat, row
from tests.factories import ChatFactory
from together.messages import inbound_set

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}

LONG_WORD = "Supercalifragilisticexpialidocious" * 4
LONG_URL = "https://example.com/" + "a-very-long-path-segment/" * 8
REPLY = f"""Done. {LONG_WORD} and {LONG_URL} and `{LONG_WORD}`.

```python
def {LONG_WORD.lower()}(argument_one, argument_two, argument_three, argument_four): return 1
```

| file | what changed | lines | owner | reviewed by |
|------|--------------|-------|-------|-------------|
| src/authentication/login_handler.py | the session cookie | 12 | the login team | nobody yet |
"""


@pytest.fixture
def phone(chromium, console) -> Iterator:
    """A phone: 390 by 844, a touch screen, in a context of its own (cookies, storage)."""
    context = chromium.new_context(
        viewport=PHONE, has_touch=True, is_mobile=True, color_scheme="light"
    )
    context.set_default_timeout(10_000)
    context.on("page", console.watch)
    yield context
    context.close()
    unexpected = console.unexpected()
    assert not unexpected, "the page logged errors:\n" + "\n".join(unexpected)


def held_with_long_words(owner, agent, workspace):
    """“Fix the login” answered with long words, code and a table, and holds a message
    from “Release notes” whose words are one long word and a long address."""
    receiver = ChatFactory(
        owner=owner, agent=agent, folder=workspace, title="Fix the login", reply=[{"say": REPLY}]
    )
    receiver = inbound_set(conversation=receiver, inbound=Inbound.HOLD)
    sender = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        title="Release notes",
        reply=[
            {
                "tool": "message_chat",
                "args": {"chat": receiver.public_id, "text": f"Please read {LONG_WORD} {LONG_URL}"},
            },
            {"say": "Asked it."},
        ],
    )
    return sender, receiver


def shown_with_its_held_message(tab, server, sender, receiver) -> None:
    page = tab.page
    open_chat(tab, server, receiver)
    message_send(conversation=receiver, text="Fix it")
    expect(page.locator("#transcript pre.code")).to_be_visible()
    message_send(conversation=sender, text="Ask the login chat")
    expect(page.locator("#transcript .card-message .badge")).to_have_text("held for you")


def sideways(page) -> list[str]:
    """What makes the page scroll sideways: nothing, or the elements wider than the screen."""
    return page.evaluate(
        """() => document.documentElement.scrollWidth <= window.innerWidth ? [] :
             [`the page is ${document.documentElement.scrollWidth} px wide`,
              ...[...document.querySelectorAll('body *')]
                .filter(e => e.getClientRects().length
                             && e.getBoundingClientRect().right > window.innerWidth + 0.5)
                .map(e => `${e.tagName.toLowerCase()}.${e.className} to ${e.getBoundingClientRect().right}`)]"""
    )


def drawer_button(page):
    return page.get_by_role("button", name="Chats")


def sidebar(page):
    return page.locator("#sidebar")


# ---------------------------------------------------------------------------- the drawer


def test_on_a_phone_the_chat_list_is_a_drawer_the_menu_button_opens_and_closes(
    phone, sign_in, conch_server, owner, agent, workspace
):
    sender, receiver = held_with_long_words(owner, agent, workspace)
    page = phone.new_page()
    tab = watch(page)
    sign_in(tab)
    shown_with_its_held_message(tab, conch_server, sender, receiver)

    # The list is out of the way; what needs you shows in the top bar.
    button = drawer_button(page)
    expect(sidebar(page)).not_to_be_visible()
    expect(button).to_have_attribute("aria-expanded", "false")
    expect(button).to_have_attribute("aria-controls", "sidebar")
    expect(button.locator(".badge")).to_have_text("1 needs you")
    expect(page.get_by_role("button", name="Send")).to_be_in_viewport()

    # Open: the drawer has the focus, and the page under it can't be tabbed to.
    button.click()
    expect(button).to_have_attribute("aria-expanded", "true")
    expect(sidebar(page)).to_be_visible()
    expect(page.get_by_role("link", name="New chat")).to_be_focused()
    expect(row(page, receiver).locator(".badge.is-held")).to_have_text("1 held")
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    assert page.evaluate("document.getElementById('main').inert") is True
    # Nor scrolled: the wheel over it moves nothing.
    scrolled = page.evaluate("window.scrollY")
    assert scrolled > 0  # the chat opened at its end
    page.mouse.move(PHONE["width"] - 10, PHONE["height"] // 2)
    page.mouse.wheel(0, -400)
    page.wait_for_timeout(300)  # a wheel's scroll would have landed by now
    assert page.evaluate("window.scrollY") == scrolled

    # Escape closes it, and the focus goes back to the button.
    page.keyboard.press("Escape")
    expect(sidebar(page)).not_to_be_visible()
    expect(button).to_have_attribute("aria-expanded", "false")
    expect(button).to_be_focused()
    assert page.evaluate("document.getElementById('main').inert") is False

    # A click outside it closes it too.
    button.click()
    expect(sidebar(page)).to_be_visible()
    page.mouse.click(PHONE["width"] - 10, PHONE["height"] // 2)
    expect(sidebar(page)).not_to_be_visible()
    expect(button).to_have_attribute("aria-expanded", "false")
    expect(button).to_be_focused()

    # A click inside it doesn't.
    button.click()
    sidebar(page).locator(".sidebar-foot").click(position={"x": 2, "y": 2})
    expect(sidebar(page)).to_be_visible()

    # Choosing a chat in it closes it at once. (The page holds that first click back,
    # as a slow answer would, so the test can look before the chat's page comes.)
    page.evaluate("document.addEventListener('click', e => e.preventDefault(), {once: true})")
    row(page, sender).get_by_role("link").click()
    expect(button).to_have_attribute("aria-expanded", "false")
    expect(sidebar(page)).not_to_be_visible()
    expect(page.locator("#chat-heading")).to_have_text("Fix the login")
    button.click()
    row(page, sender).get_by_role("link").click()
    expect(page.locator("#chat-heading")).to_have_text("Release notes")
    expect(sidebar(page)).not_to_be_visible()

    # A card's link swaps the whole page in place (hx-target="body"): the drawer
    # on the page it brings works as the first one did.
    page.evaluate("window.stillTheSamePage = true")
    page.locator("#transcript .card-message").get_by_role("link", name="Fix the login").click()
    expect(page.locator("#chat-heading")).to_have_text("Fix the login")
    assert page.evaluate("window.stillTheSamePage === true")
    drawer_button(page).click()
    expect(sidebar(page)).to_be_visible()
    expect(page.get_by_role("link", name="New chat")).to_be_focused()
    page.keyboard.press("Escape")
    expect(sidebar(page)).not_to_be_visible()
    expect(drawer_button(page)).to_be_focused()


def test_a_search_from_the_drawer_closes_it_to_show_the_results(
    phone, sign_in, conch_server, owner, agent, workspace
):
    sender, receiver = held_with_long_words(owner, agent, workspace)
    page = phone.new_page()
    tab = watch(page)
    sign_in(tab)
    shown_with_its_held_message(tab, conch_server, sender, receiver)

    drawer_button(page).click()
    page.get_by_label("Search your chats").fill("Supercalifragilisticexpialidocious")
    page.get_by_label("Search your chats").press("Enter")

    expect(page.get_by_role("heading", name="Search:")).to_be_visible()
    expect(sidebar(page)).not_to_be_visible()
    expect(drawer_button(page)).to_have_attribute("aria-expanded", "false")


def test_on_a_wide_screen_the_list_stays_beside_the_chat_with_no_menu_button(
    tab, sign_in, conch_server, owner, agent, workspace
):
    sender, receiver = held_with_long_words(owner, agent, workspace)
    page = tab.page
    sign_in(tab)
    shown_with_its_held_message(tab, conch_server, sender, receiver)

    expect(sidebar(page)).to_be_visible()
    expect(drawer_button(page)).to_be_hidden()
    expect(row(page, receiver).locator(".badge.is-held")).to_have_text("1 held")
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    page.get_by_label("Message").fill("Escape leaves the list where it is")
    page.keyboard.press("Escape")
    expect(sidebar(page)).to_be_visible()
    assert sideways(page) == []
    # The toolbar's last menu opens leftwards, on the screen.
    page.locator("#main summary", has_text="Delete…").click()
    expect(page.get_by_role("button", name="Delete for good")).to_be_in_viewport()
    assert sideways(page) == []


def test_the_needs_you_count_in_the_top_bar_follows_the_list_live(
    phone, sign_in, conch_server, owner, agent, workspace
):
    sender, receiver = held_with_long_words(owner, agent, workspace)
    page = phone.new_page()
    tab = watch(page)
    sign_in(tab)
    open_chat(tab, conch_server, sender)
    badge = drawer_button(page).locator(".badge")
    expect(badge).to_be_hidden()

    message_send(conversation=sender, text="Ask the login chat")  # its message is held

    expect(badge).to_have_text("1 needs you")
    expect(badge).to_be_visible()


# ---------------------------------------------------------------------------- sideways


@pytest.mark.parametrize("width", [390, 320])
def test_nothing_scrolls_sideways_on_a_phone(
    tab, sign_in, conch_server, owner, agent, workspace, width
):
    sender, receiver = held_with_long_words(owner, agent, workspace)
    page = tab.page
    page.set_viewport_size({"width": width, "height": 844})
    sign_in(tab)
    shown_with_its_held_message(tab, conch_server, sender, receiver)
    pages = {"the chat, with long words, code, a table and a card": page.url}
    assert sideways(page) == [], "the chat"
    # Its menus, open, stay on the screen.
    for menu in ("Rename", "Delete…", "Messages from other chats"):
        page.locator("#main summary", has_text=menu).first.click()
        assert sideways(page) == [], f"the chat, with {menu} open"
        page.keyboard.press("Escape")
    drawer_button(page).click()
    assert sideways(page) == [], "the chat, with the drawer open"

    url = conch_server.url
    pages.update(
        {
            "the new chat form": f"{url}/",
            "connect a model": f"{url}/connect/",
            "the routing playground": f"{url}/gateway/playground/",
            "routines": f"{url}/gateway/routines/",
            "archived chats": f"{url}/chats/archived/",
            "search": f"{url}/search/?q=Supercalifragilisticexpialidocious",
        }
    )
    for name, address in pages.items():
        page.goto(address)
        expect(page.locator("main")).to_be_visible()
        assert sideways(page) == [], name


def broken_words(locator) -> list[str]:
    """The words in an element that are cut over two lines, but for those wider than it."""
    return locator.evaluate(
        """element => {
             const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
             const pen = document.createElement('canvas').getContext('2d');
             const broken = [];
             for (let text = walker.nextNode(); text; text = walker.nextNode()) {
               for (const found of text.data.matchAll(/\\S+/g)) {
                 const range = document.createRange();
                 range.setStart(text, found.index);
                 range.setEnd(text, found.index + found[0].length);
                 const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
                 pen.font = getComputedStyle(text.parentElement).font;
                 if (tops.size > 1 && pen.measureText(found[0]).width <= element.clientWidth) {
                   broken.push(found[0]);
                 }
               }
             }
             return broken;
           }"""
    )


@pytest.mark.parametrize("width", [390, 320])
def test_words_in_cards_and_tables_break_only_where_they_must(
    tab, sign_in, conch_server, owner, agent, workspace, width
):
    sender, receiver = held_with_long_words(owner, agent, workspace)
    page = tab.page
    page.set_viewport_size({"width": width, "height": 844})
    sign_in(tab)
    shown_with_its_held_message(tab, conch_server, sender, receiver)

    card = page.locator("#transcript .card-message")
    expect(card.get_by_role("link", name="Release notes")).to_be_visible()
    assert broken_words(card.locator(".card-head")) == []
    assert broken_words(card.locator(".card-actions")) == []
    # A word wider than the card is broken (only it), and the card holds it.
    assert broken_words(card.locator(".card-words")) == []
    assert card.evaluate("c => c.scrollWidth <= c.clientWidth")
    # A table too wide for the column scrolls in its own box; its words stay whole.
    table = page.locator("#transcript .md table")
    assert broken_words(table) == []
    assert table.evaluate("t => t.scrollWidth > t.clientWidth")
    expect(table).to_have_attribute("tabindex", "0")  # so the keyboard can scroll it


# ---------------------------------------------------------------------------- Enter


@pytest.mark.parametrize("device", ["touch", "desktop"])
def test_enter_sends_on_a_desktop_and_makes_a_new_line_on_a_touch_screen(
    device, phone, tab, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, reply=[{"say": "Got it."}])
    if device == "touch":
        page = phone.new_page()
        tab = watch(page)
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    box = page.get_by_label("Message")
    hint = page.locator(".composer-bar .hint:visible")

    box.fill("first line")
    box.press("Enter")

    if device == "touch":
        expect(hint).to_have_text("Enter makes a new line · the Send button sends")
        expect(box).to_have_value("first line\n")
        box.press_sequentially("second line")
        expect(page.locator("#transcript .msg.from-person")).to_have_count(0)
        page.get_by_role("button", name="Send").tap()
        expect(page.locator("#transcript .msg.from-person .text")).to_have_text(
            "first line\nsecond line"
        )
    else:
        expect(hint).to_contain_text("Enter sends")
        expect(page.locator("#transcript .msg.from-person .text")).to_have_text("first line")
    expect(box).to_have_value("")
    expect(page.locator("#transcript .msg.from-assistant")).to_have_text("Got it.")


# ---------------------------------------------------------------------------- the theme

BACKGROUND = {"light": "rgb(246, 246, 243)", "dark": "rgb(18, 18, 20)"}
KEYWORD = {"light": "rgb(0, 128, 0)", "dark": "rgb(102, 217, 239)"}  # `def`: Pygments' colours


def theme_switch(page):
    return page.get_by_role("group", name="Theme")


def looks(page, theme: str) -> None:
    expect(page.locator("body")).to_have_css("background-color", BACKGROUND[theme])
    keyword = page.locator("#transcript pre.code .k").first
    if keyword.count():
        expect(keyword).to_have_css("color", KEYWORD[theme])


def test_the_theme_follows_the_system_until_one_is_chosen_and_the_browser_keeps_it(
    tab, browser_context, sign_in, conch_server, owner, agent, workspace
):
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, reply=[{"say": REPLY}])
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, chat)
    message_send(conversation=chat, text="Fix it")
    expect(page.locator("#transcript pre.code .k").first).to_be_visible()

    # No choice: the system's.
    expect(theme_switch(page).get_by_label("System")).to_be_checked()
    looks(page, "light")
    page.emulate_media(color_scheme="dark")
    looks(page, "dark")
    assert page.evaluate("document.documentElement.hasAttribute('data-theme')") is False

    # Light, chosen under a dark system; then dark, under a light one.
    theme_switch(page).get_by_label("Light").check()
    expect(page.locator("html")).to_have_attribute("data-theme", "light")
    looks(page, "light")
    page.emulate_media(color_scheme="light")
    theme_switch(page).get_by_label("Dark").check()
    looks(page, "dark")

    # Kept: after a reload, on a new page, and set before the page's first paint.
    page.reload()
    expect(theme_switch(page).get_by_label("Dark")).to_be_checked()
    looks(page, "dark")
    other = browser_context.new_page()
    other.add_init_script(
        """new MutationObserver((changes, observer) => {
             if (document.body) {
               window.themeAtFirstBody = document.documentElement.getAttribute('data-theme');
               observer.disconnect();
             }
           }).observe(document, {childList: true, subtree: true});"""
    )
    other.goto(f"{conch_server.url}/gateway/routines/")
    expect(other.locator("body")).to_have_css("background-color", BACKGROUND["dark"])
    assert other.evaluate("window.themeAtFirstBody") == "dark"

    # The other page hears a new choice at once; System goes back to the system's.
    theme_switch(page).get_by_label("System").check()
    expect(other.locator("body")).to_have_css("background-color", BACKGROUND["light"])
    page.emulate_media(color_scheme="dark")
    looks(page, "dark")
    page.reload()
    expect(theme_switch(page).get_by_label("System")).to_be_checked()
    assert page.evaluate("localStorage.getItem('conch-theme')") is None


# ---------------------------------------------------------------------------- the gateway


@pytest.mark.parametrize("size", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_the_gateway_tools_wait_in_their_menu_and_archived_and_sign_out_stay_in_sight(
    tab, sign_in, conch_server, owner, agent, size
):
    page = tab.page
    page.set_viewport_size(size)
    sign_in(tab)
    if size == PHONE:
        drawer_button(page).click()
    foot = sidebar(page).locator(".sidebar-foot")
    expect(foot.get_by_role("link", name="Archived chats")).to_be_visible()
    expect(foot.get_by_role("button", name="Sign out")).to_be_visible()
    playground = foot.get_by_role("link", name="Routing playground")
    routines = foot.get_by_role("link", name="Routines")
    expect(playground).to_be_hidden()
    expect(routines).to_be_hidden()

    foot.get_by_text("Gateway", exact=True).click()

    expect(routines).to_be_visible()
    playground.click()
    expect(page.get_by_role("heading", name="Routing playground")).to_be_visible()


# ---------------------------------------------------------------------------- axe


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_phone_has_no_serious_accessibility_violations_drawer_open_or_closed(
    phone, sign_in, conch_server, owner, agent, workspace, theme
):
    sender, receiver = held_with_long_words(owner, agent, workspace)
    page = phone.new_page()
    # The chosen theme, under a system saying the other one.
    page.emulate_media(color_scheme="light" if theme == "dark" else "dark")
    tab = watch(page)
    sign_in(tab)
    page.evaluate(f"localStorage.setItem('conch-theme', '{theme}')")
    shown_with_its_held_message(tab, conch_server, sender, receiver)
    expect(page.locator("body")).to_have_css("background-color", BACKGROUND[theme])
    assert axe_violations(page) == []

    drawer_button(page).click()
    sidebar(page).get_by_text("Gateway", exact=True).click()
    expect(sidebar(page).get_by_role("link", name="Routines")).to_be_visible()
    assert axe_violations(page) == []
