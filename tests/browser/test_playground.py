"""The routing playground in a real browser: headless Chromium against a real Daphne.

Every wait is on a condition in the page: a region swapped in by HTMX.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from chats.gateway.models import Binding
from tests.factories import AgentFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RED = "rgb(176, 49, 43)"  # --stopped in the light scheme: the leak's colour


def open_playground(tab, sign_in, server) -> None:
    sign_in(tab)
    tab.page.goto(f"{server.url}/gateway/playground/")
    expect(tab.page.get_by_role("heading", name="Routing playground")).to_be_visible()
    # A page that reloads loses this; the HTMX swaps keep it.
    tab.page.evaluate("window.stillTheSamePage = true")


def add_binding(page, **fields) -> None:
    form = page.locator("#pg-add")
    labels = {"agent": "Agent", "channel": "Channel", "peer": "Peer", "team_id": "Team"}
    for name, value in fields.items():
        form.get_by_label(labels[name], exact=True).fill(value)
    count = page.locator(".pg-binding").count()
    form.get_by_role("button", name="Add binding").click()
    expect(page.locator(".pg-binding")).to_have_count(count + 1)


def fire(page, message_id: str, n: int) -> None:
    page.locator(f'#pg-palette button[value="{message_id}"]').click()
    expect(page.locator(f"#pg-fired-{n}")).to_be_visible()


def test_a_peer_rule_beats_a_team_rule_and_shared_dms_show_red(
    tab, sign_in, conch_server, agent, tmp_path, console
):
    AgentFactory(slug="family", name="Family helper", workspace=str(tmp_path))
    AgentFactory(slug="work", name="Work assistant", workspace=str(tmp_path))
    page = tab.page
    open_playground(tab, sign_in, conch_server)

    # per-channel-peer is the default, so its button is pressed before the answer comes; the
    # answer redraws every region, the bindings form too: wait for that before filling it in.
    page.evaluate("document.getElementById('pg-add').dataset.before = 'yes'")
    page.get_by_role("button", name="per-channel-peer", exact=True).click()
    expect(page.locator("#pg-add[data-before]")).to_have_count(0)
    expect(page.get_by_role("button", name="per-channel-peer", exact=True)).to_have_attribute(
        "aria-pressed", "true"
    )
    add_binding(page, agent="work", channel="slack", team_id="family")
    add_binding(page, agent="family", channel="slack", peer="mom")

    # Mom, in the family Slack team: both rules match; the peer rule wins.
    fire(page, "mom-slack", 3)
    result = page.locator("#pg-result")
    expect(result.locator(".pg-agent")).to_contain_text("Family helper")
    expect(result.locator(".pg-won-rule")).to_have_text("peer: slack peer direct:mom → family")
    expect(result.locator(".rung.is-won")).to_have_attribute("data-tier", "peer")
    expect(result.locator(".rung.is-outranked")).to_have_attribute("data-tier", "team")
    expect(result.locator(".pg-key")).to_have_text("agent:family:dm:slack:mom")
    winner = page.locator(".pg-binding.is-winner")
    expect(winner).to_have_count(1)
    expect(winner).to_contain_text("peer: slack peer direct:mom → family")

    # A tie is refused, naming both: a 400 on purpose, which Chromium logs.
    console.allow(r"status of 400 \(Bad Request\) \(http://[^ ]+/gateway/playground/bindings/:")
    form = page.locator("#pg-add")
    form.get_by_label("Agent", exact=True).fill("work")
    form.get_by_label("Channel", exact=True).fill("slack")
    form.get_by_label("Peer", exact=True).fill("mom")
    form.get_by_role("button", name="Add binding").click()
    expect(page.locator("#pg-add [role=alert]")).to_contain_text(
        "“peer: slack peer direct:mom → work” and “peer: slack peer direct:mom → family” would tie"
    )
    expect(page.locator(".pg-binding")).to_have_count(2)

    # Under shared, two people's DMs land on one key, drawn red.
    page.get_by_role("button", name="shared", exact=True).click()
    expect(page.get_by_role("button", name="shared", exact=True)).to_have_attribute(
        "aria-pressed", "true"
    )
    fire(page, "alice-whatsapp", 4)
    fire(page, "bob-telegram", 5)
    alice = page.locator("#pg-fired-4 .pg-key")
    bob = page.locator("#pg-fired-5 .pg-key")
    expect(alice).to_have_text("agent:main:dm:shared")
    expect(bob).to_have_text("agent:main:dm:shared")
    for key in (alice, bob, result.locator(".pg-key")):
        expect(key).to_have_class("pg-key is-leak")
        expect(key).to_have_css("color", RED)
    expect(page.locator("#pg-sessions")).to_contain_text("Leak: Alice, Bob share")
    # Mom's DM moved into the shared session too; it says where it was.
    expect(page.locator("#pg-fired-3 .pg-key")).to_have_text("agent:family:dm:shared")
    expect(page.locator("#pg-fired-3 .moved")).to_contain_text("agent:family:dm:slack:mom")

    assert tab.page.evaluate("window.stillTheSamePage === true")  # all of it by HTMX swaps
    assert not Binding.objects.exists()  # a sandbox: the gateway's bindings are untouched
