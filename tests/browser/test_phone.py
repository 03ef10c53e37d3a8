"""The theme follows the system unless the person chose one, and the choice stays with
the browser (issue 33, item 12). Chromium, against a real Daphne.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from chats.runtime.turns import message_send
from tests.browser.test_workspace import open_chat
from tests.factories import ChatFactory

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
