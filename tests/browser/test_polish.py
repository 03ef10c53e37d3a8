"""Polish, in a real browser: a 404 in the app's style with a way
back, "Entries" in the admin, and the demo's replies starting on the first visit."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from chats.demo import demo_seed
from chats.models import Turn
from tests.browser.conftest import BROWSER_HOME
from tests.factories import ConversationFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_unknown_chat_is_a_404_in_the_apps_style_with_a_way_back(
    tab, sign_in, conch_server, owner, second_owner, agent, console
):
    theirs = ConversationFactory(owner=second_owner, agent=agent, title="Not yours")
    page = tab.page
    sign_in(tab)
    console.allow(r"status of 404")  # the page's own status, on purpose

    for address in ("/c/c_nosuchchat/", f"/c/{theirs.public_id}/"):
        response = page.goto(conch_server.url + address)
        assert response.status == 404
        expect(page).to_have_title("Not found · Conch")
        expect(page.get_by_role("heading", name="Nothing here")).to_be_visible()
        expect(page.get_by_text("Not yours")).to_have_count(0)

    page.get_by_role("link", name="Back to your chats").click()
    expect(page.get_by_role("heading", name="New chat")).to_be_visible()


def test_the_admin_says_entries(tab, conch_server, owner, agent):
    owner.set_password("a-long-test-password")
    owner.save()
    page = tab.page
    page.goto(f"{conch_server.url}/admin/login/?next=/admin/")
    page.get_by_label("Username").fill(owner.username)
    page.get_by_label("Password").fill("a-long-test-password")
    page.get_by_role("button", name="Log in").click()

    expect(page.get_by_role("link", name="Entries", exact=True)).to_be_visible()
    expect(page.get_by_text("Entrys")).to_have_count(0)


def test_the_demos_replies_start_on_the_first_visit(tab, sign_in, conch_server, owner, settings):
    settings.CONCH_HOME = BROWSER_HOME  # the server's home, where the note is left for it
    _, created, _ = demo_seed(owner=owner)
    assert created and not Turn.objects.exists()  # seeded, and nothing plays yet

    sign_in(tab)  # the first visit

    page = tab.page
    tidy = page.locator("#row-c_demo_tidy")
    expect(tidy.locator(".badge")).to_have_text("working")
    expect(page.locator("#chat-rows .badge.is-working")).to_have_count(len(created))
