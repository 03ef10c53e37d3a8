"""A clean console and an accessible page, in a real browser.

axe-core (vendored, tests/browser/a11y.py) runs on the chat list, a chat with its
steps and a request for an OK, ADR 0134's cards, the routing playground after a
message, and the routines page: no serious or critical violation on any. Every
browser test also fails on any console error (conftest.py's ``console``); the
first test here is the flow that used to log ``htmx:oobErrorNoTarget``.
"""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.test import RequestFactory
from django.urls import reverse
from playwright.sync_api import expect

from chats.models import AuthProfile, McpServer, McpStatus, McpTool, Mode, Taint
from chats.runtime.chats import conversation_archive
from chats.runtime.turns import message_send
from chats.taint import Cause, taint_raise
from tests.browser.a11y import axe_violations
from tests.browser.test_together import held_pair, message_card
from tests.browser.test_workspace import STEP, open_chat, row
from tests.factories import ChatFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_new_chat_logs_nothing_in_another_tabs_console(
    tab, browser_context, sign_in, conch_server, owner, agent, console
):
    page = tab.page
    sign_in(tab)
    watching = browser_context.new_page()
    watching.goto(conch_server.url + "/")
    expect(watching.locator("body")).to_have_attribute("data-socket", "open")

    page.get_by_label("Title").fill("Brand new")
    page.get_by_role("button", name="Start chat").click()
    expect(page.get_by_role("heading", name="Brand new")).to_be_visible()

    # The other tab's list gains the row from the push itself: no miss, no refetch.
    expect(watching.locator("#chat-rows .row-title")).to_have_text(["Brand new"])
    assert watching.evaluate("document.body.getAttribute('data-refetches')") is None
    assert console.errors == []


def test_the_list_and_a_chat_have_no_serious_accessibility_violations(
    tab, sign_in, conch_server, owner, agent, workspace
):
    asking = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        title="Roll out 2.4",
        mode=Mode.ASK,
        reply=[
            {"tool": "list_files", "args": {}, "delay": STEP},
            {"say": "I'll write the version file."},
            {"tool": "write_file", "args": {"path": "deploy.txt", "content": "2.4"}},
        ],
    )
    ChatFactory(owner=owner, agent=agent, folder=workspace, title="Fix the login")
    page = tab.page
    sign_in(tab)
    expect(page.locator("#chat-rows li.chat-row")).to_have_count(2)
    assert axe_violations(page) == []  # the list, and the new chat form

    open_chat(tab, conch_server, asking)
    message_send(conversation=asking, text="Roll it out")
    expect(page.locator(".request")).to_contain_text("It needs your OK")
    expect(row(page, asking).locator(".badge")).to_have_text("needs you")
    assert axe_violations(page) == []


def test_the_cards_have_no_serious_accessibility_violations(
    tab, sign_in, conch_server, owner, agent, workspace
):
    sender, receiver = held_pair(owner, agent, workspace)
    page = tab.page
    sign_in(tab)
    open_chat(tab, conch_server, receiver)
    message_send(conversation=sender, text="Ask the login chat to run its tests")
    expect(message_card(page).locator(".badge")).to_have_text("held for you")
    assert axe_violations(page) == []  # the held message, with Pass it on and Dismiss

    open_chat(tab, conch_server, sender)
    expect(message_card(page)).to_be_visible()
    assert axe_violations(page) == []  # the sender's side


def test_the_playground_and_routines_have_no_serious_accessibility_violations(
    tab, sign_in, conch_server, owner, agent
):
    page = tab.page
    sign_in(tab)
    page.goto(f"{conch_server.url}/gateway/playground/")
    expect(page.get_by_role("heading", name="Routing playground")).to_be_visible()
    page.locator("#pg-palette button[name]").first.click()
    expect(page.locator("#pg-result .pg-key")).to_be_visible()
    assert axe_violations(page) == []

    page.goto(f"{conch_server.url}/gateway/routines/")
    expect(page.get_by_role("heading", name="Routines", exact=True)).to_be_visible()
    assert axe_violations(page) == []


def test_axe_finds_a_nameless_button(tab, sign_in, conch_server, owner, agent):
    """The check above can fail: a button with no name is a critical violation."""
    page = tab.page
    sign_in(tab)
    page.evaluate("document.getElementById('main').appendChild(document.createElement('button'))")

    found = axe_violations(page)

    assert len(found) == 1 and found[0].startswith("button-name (critical)")


# ---------------------------------------------------------------------------
# Every page, at a desktop's size and a phone's, in light and in dark

SIZES = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
SCHEMES = ("light", "dark")
# What was once found on these pages, judged at any impact: axe calls some of them only moderate or minor.
NAMED_RULES = (
    "color-contrast",
    "link-in-text-block",
    "label",
    "heading-order",
    "landmark-unique",
    "aria-allowed-role",
)


def settled(page) -> None:
    """Wait for the colour transitions a change of scheme or size starts (the admin's
    links fade): axe would read a colour half-way."""
    page.evaluate(
        "async () => { await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));"
        " await Promise.all(document.getAnimations().filter(a => a instanceof CSSTransition)"
        ".map(a => a.finished.catch(() => null))); }"
    )


AXES_OWN_STYLE = "Applying inline style violates"


def violations_everywhere(page, tab=None, console=None) -> list[str]:
    """axe on the page as it is, at each size in each colour scheme.

    On some admin pages axe itself sets an inline style while it checks, which the CSP
    refuses: given the ``tab`` and ``console``, what axe alone caused is taken back out
    of them, so the page's own are still caught."""
    found = []
    for size, viewport in SIZES.items():
        page.set_viewport_size(viewport)
        for scheme in SCHEMES:
            page.emulate_media(color_scheme=scheme)
            settled(page)
            before = (len(tab.csp_violations), len(console.errors)) if tab and console else None
            found += [f"{size}, {scheme}: {v}" for v in axe_violations(page, rules=NAMED_RULES)]
            if before:
                for messages, start in (
                    (tab.csp_violations, before[0]),
                    (console.errors, before[1]),
                ):
                    messages[start:] = [m for m in messages[start:] if AXES_OWN_STYLE not in m]
    page.set_viewport_size(SIZES["desktop"])
    page.emulate_media(color_scheme="light")
    return found


RICH_REPLY = """## What changed

The sum is $\\sum_{i=1}^{n} i = \\frac{n(n+1)}{2}$, and it costs $5 and $10.

$$
\\sqrt{x^2 + y^2}
$$

#### Left to do

- [x] fix `login()`
- [ ] write the test

| file | lines |
|:-----|------:|
| login.py | 12 |

```python
def login(user):
    return True
```

# Done
"""


def test_the_chat_pages_have_no_accessibility_violations_at_any_size_or_scheme(
    tab, sign_in, conch_server, owner, agent, workspace
):
    """The list, the new chat form, a chat with every card kind, a reply with headings,
    maths, a task list, a table and code, and a message queued behind a running reply."""
    other = ChatFactory(
        owner=owner,
        agent=agent,
        folder=workspace,
        title="Fix the login",
        reply=[*[{"tool": "list_files", "args": {}, "delay": STEP}] * 60],
    )
    cards = ChatFactory(  # looks, messages the login chat, waits on it, then sums up
        owner=owner,
        agent=agent,
        folder=workspace,
        title="Release notes",
        script=[
            [
                {"tool": "list_chats", "args": {}},
                {
                    "tool": "message_chat",
                    "args": {
                        "chat": other.public_id,
                        "text": "Run the tests.",
                        "start_reply": True,
                    },
                },
                {"tool": "list_chats", "args": {}},  # two cards of a kind: no two landmarks
                {"tool": "wait_for", "args": {"kind": "chat", "id": other.public_id}},
            ],
            [{"say": RICH_REPLY}],
        ],
    )
    busy = ChatFactory(  # stops the login chat, then works on
        owner=owner,
        agent=agent,
        folder=workspace,
        title="Watch the deploy",
        reply=[
            {"tool": "stop_chat", "args": {"chat": other.public_id, "reason": "same files"}},
            *[{"tool": "list_files", "args": {}, "delay": STEP}] * 60,
        ],
    )
    page = tab.page
    sign_in(tab)
    expect(page.locator("#chat-rows li.chat-row")).to_have_count(3)
    assert violations_everywhere(page) == []  # the list, and the new chat form

    open_chat(tab, conch_server, cards)
    message_send(conversation=cards, text="Tell the login chat, then sum it up")
    expect(page.locator("#transcript .card-look")).to_have_count(2)
    expect(page.locator("#transcript .card-message")).to_be_visible()
    expect(page.locator("#transcript .card-wait")).to_be_visible()
    assert violations_everywhere(page) == []

    open_chat(tab, conch_server, busy)
    message_send(conversation=busy, text="Watch it")
    expect(page.locator("#stop-button")).to_be_visible()
    message_send(conversation=busy, text="and tell me when it is done")
    expect(page.locator("#transcript .queued")).to_be_visible()
    assert violations_everywhere(page) == []
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("#chat-title .badge")).to_have_text("stopped")

    open_chat(tab, conch_server, other)
    expect(page.locator("#transcript .card-stopped")).to_be_visible()
    expect(page.locator("#transcript .card-message")).to_be_visible()
    assert violations_everywhere(page) == []

    open_chat(tab, conch_server, cards)
    expect(page.locator("#chat-title .badge")).to_have_text("idle")
    reply = page.locator("#transcript .msg.from-assistant .text.md").last
    expect(reply.locator("math")).to_have_count(2)
    expect(reply.locator("input[type=checkbox]")).to_have_count(2)
    assert violations_everywhere(page) == []


def test_the_other_pages_have_no_accessibility_violations_at_any_size_or_scheme(
    tab, browser_context, sign_in, conch_server, owner, agent, workspace, console
):
    """Connect, the playground, routines, archived chats, search, sign-in and a 404."""
    console.allow(r"status of 404 \(Not Found\) \(http://[^ ]+/c/no-such-chat/")
    old = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Old login work")
    conversation_archive(conversation=old, archived=True)
    page = tab.page
    sign_in(tab)
    pages = {
        "/connect/": "Connect a model",
        "/gateway/playground/": "Routing playground",
        "/gateway/routines/": "Routines",
        "/chats/archived/": "Archived chats",
        "/search/?q=login": "login",
        "/c/no-such-chat/": None,
    }
    for path, heading in pages.items():
        page.goto(conch_server.url + path)
        if heading:
            expect(page.get_by_role("heading", level=1)).to_contain_text(heading)
        found = violations_everywhere(page)
        assert found == [], path

    signed_out = browser_context.new_page()  # another tab, signed out: the sign-in page
    browser_context.clear_cookies()
    signed_out.goto(conch_server.url + "/")
    expect(signed_out.get_by_role("heading", level=1)).to_be_visible()
    assert violations_everywhere(signed_out) == []


# ---------------------------------------------------------------------------
# The admin: its index, and each registered model's list, add and change pages


def admin_models() -> list[str]:
    """Every model the admin shows, so a model registered later is checked too."""
    return sorted(model._meta.label_lower for model in admin.site._registry)


def test_the_admin_index_has_no_accessibility_violations_at_any_size_or_scheme(
    tab, sign_in, conch_server, owner, agent
):
    page = tab.page
    sign_in(tab)
    page.goto(conch_server.url + "/admin/")
    expect(page.locator("#site-name")).to_be_visible()
    assert violations_everywhere(page) == []


@pytest.mark.parametrize("label", admin_models())
def test_each_admin_page_has_no_accessibility_violations_at_any_size_or_scheme(
    tab, console, sign_in, conch_server, owner, agent, workspace, label
):
    chat = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Fix the login")
    message_send(conversation=chat, text="Run the tests")  # a turn and its entries
    # Its trust timeline: a rise that came from another chat, which read a page.
    notes = ChatFactory(owner=owner, agent=agent, folder=workspace, title="Release notes")
    taint_raise(conversation=notes, taint=Taint.UNTRUSTED, cause=Cause.page("https://x.test/"))
    taint_raise(
        conversation=chat, taint=Taint.UNTRUSTED, cause=Cause.message(notes, message_id="m_1")
    )
    AuthProfile.objects.create(agent=agent, name="openai", secret="sk-live-abcdefghijkl1234")
    # An MCP server as its last listing left it: a tool of its, and one not offered.
    server = McpServer.objects.create(
        agent=agent, name="git", command=["mcp-server-git"], status=McpStatus.OK
    )
    McpTool.objects.create(
        server=server,
        name="git_status",
        call_name="mcp__git__git_status",
        read_only=True,
        description="Shows the working tree status",
        asks_first=False,
    )
    McpTool.objects.create(
        server=server,
        name="odd",
        call_name="mcp__git__odd",
        problem="its schema is not valid",
    )
    model = apps.get_model(label)
    model_admin = admin.site._registry[model]
    request = RequestFactory().get("/admin/")
    request.user = owner
    opts = model._meta
    urls = [reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")]
    if model_admin.has_add_permission(request):
        urls.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_add"))
    first = model.objects.order_by("pk").first()
    if first is not None:
        urls.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[first.pk]))
    page = tab.page
    sign_in(tab)
    for url in urls:
        response = page.goto(conch_server.url + url)
        assert response is not None and response.status == 200, url
        assert violations_everywhere(page, tab, console) == [], url
