"""Signing in, in a real browser: a used link while signed in, a
fresh link from ``conch signin`` for the running server, and the admin's sign-in
saying how to give the owner a password."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from chats.signin import signin_link_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_used_link_opened_while_signed_in_goes_to_the_workspace(
    tab, conch_server, owner, agent, console
):
    page = tab.page
    token = signin_link_create(user=owner)
    page.goto(f"{conch_server.url}/signin/{token}/")
    expect(page.get_by_role("heading", name="New chat")).to_be_visible()

    page.goto(f"{conch_server.url}/signin/{token}/")  # from the history, say

    expect(page).to_have_url(f"{conch_server.url}/")
    expect(page.get_by_role("heading", name="New chat")).to_be_visible()

    # Signed out, the same used link is refused, and says how to get a new one.
    page.get_by_role("button", name="Sign out").click()
    console.allow(r"status of 403")  # the refusal's own status, on purpose
    page.goto(f"{conch_server.url}/signin/{token}/")
    expect(page.get_by_role("alert")).to_contain_text("Run conch signin for a new one")


def test_conch_signin_prints_a_fresh_link_the_running_server_takes(tab, conch_server, owner, agent):
    out = io.StringIO()
    call_command("signin", "--url", conch_server.url, stdout=out)
    link = re.search(r"http://\S+/signin/\S+/", out.getvalue()).group(0)

    tab.page.goto(link)

    expect(tab.page).to_have_url(f"{conch_server.url}/")
    expect(tab.page.get_by_role("heading", name="New chat")).to_be_visible()


def test_the_admins_sign_in_says_how_to_set_the_owners_password(tab, conch_server, owner):
    page = tab.page
    page.goto(f"{conch_server.url}/admin/login/?next=/admin/")

    expect(page.locator(".conch-password-help")).to_contain_text(
        "set one first: conch changepassword owner"
    )
    expect(page.get_by_label("Username")).to_be_visible()  # the admin's own form is still there
