"""The chat list people can organise: grouped by the person's own days,
what needs you at the top, and pinning, kept live in every tab."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine
from channels.db import database_sync_to_async
from django.test import Client
from django.utils import timezone

from chats.models import Conversation, Status
from chats.runtime import selectors
from conch.http import TIME_ZONE_COOKIE
from tests.factories import ConversationFactory
from tests.web.sockets import session_cookie, socket

pytestmark = pytest.mark.django_db

NEW_YORK = ZoneInfo("America/New_York")
# Noon in New York on 15 January 2026 (17:00 UTC): "today" there began at 05:00 UTC.
NOON = datetime(2026, 1, 15, 12, 0, tzinfo=NEW_YORK)
GROUP = re.compile(r'<div class="chat-group" id="group-([\w-]+)" data-starts="([^"]*)"( hidden)?>')


def grouped(page: str) -> dict[str, list[str]]:
    """Each heading the list shows, with the ids of its rows, in order."""
    nav = page.split('id="chat-list"', 1)[1].split("</nav>", 1)[0]
    found: dict[str, list[str]] = {}
    pieces = GROUP.split(nav)
    # [before, name, starts, hidden, body, name, starts, hidden, body, …]
    for at in range(1, len(pieces), 4):
        name, hidden, body = pieces[at], pieces[at + 2], pieces[at + 3]
        rows = re.findall(r'<li id="row-([^"]+)"', body)
        assert bool(hidden) == (not rows), (name, "a heading shows only with rows under it")
        if rows:
            found[name] = rows
    return found


def at(chat: Conversation, moment: datetime, **fields) -> Conversation:
    Conversation.objects.filter(pk=chat.pk).update(last_interaction_at=moment, **fields)
    return chat


def the_list(client: Client, zone: str | None) -> str:
    if zone is not None:
        client.cookies[TIME_ZONE_COOKIE] = zone
    response = client.get("/chats/")
    assert response.status_code == 200
    return response.content.decode()


# ---------------------------------------------------------------------------
# Groups by the person's days


@pytest.mark.parametrize(
    "hour, in_utc",
    [
        # Noon in New York is 17:00 UTC, the same date: UTC's today holds both.
        (12, {"today": ["morning", "late"]}),
        # 22:00 in New York is 03:00 UTC on the 16th: both are yesterday in UTC.
        (22, {"yesterday": ["morning", "late"]}),
    ],
    ids=["at-noon", "late-in-the-evening"],
)
def test_a_chat_at_half_past_eleven_last_night_is_yesterday_in_new_york_whatever_utc_says(
    htmx, owner, agent, hour, in_utc
):
    chats = {
        # 04:30 UTC on the 15th: still the 14th in New York.
        "late": at(
            ConversationFactory(owner=owner, agent=agent),
            datetime(2026, 1, 14, 23, 30, tzinfo=NEW_YORK),
        ),
        "morning": at(
            ConversationFactory(owner=owner, agent=agent),
            datetime(2026, 1, 15, 0, 30, tzinfo=NEW_YORK),
        ),
    }

    with time_machine.travel(datetime(2026, 1, 15, hour, tzinfo=NEW_YORK), tick=False):
        in_new_york = grouped(the_list(htmx, "America/New_York"))
        utc = grouped(the_list(htmx, "UTC"))

    ids = {name: chat.public_id for name, chat in chats.items()}
    assert in_new_york == {"today": [ids["morning"]], "yesterday": [ids["late"]]}
    assert utc == {group: [ids[name] for name in names] for group, names in in_utc.items()}


def test_each_group_begins_at_the_first_moment_of_its_day(htmx, owner, agent):
    today = datetime(2026, 1, 15, tzinfo=NEW_YORK)
    micro = timedelta(microseconds=1)
    moments = {
        "today": today,
        "yesterday_last": today - micro,
        "yesterday": today - timedelta(days=1),
        "week_last": today - timedelta(days=1) - micro,
        "week": today - timedelta(days=7),
        "older": today - timedelta(days=7) - micro,
    }
    chats = {
        name: at(ConversationFactory(owner=owner, agent=agent), moment)
        for name, moment in moments.items()
    }

    with time_machine.travel(NOON, tick=False):
        groups = grouped(the_list(htmx, "America/New_York"))

    ids = {name: chat.public_id for name, chat in chats.items()}
    assert groups == {
        "today": [ids["today"]],
        "yesterday": [ids["yesterday_last"], ids["yesterday"]],
        "week": [ids["week_last"], ids["week"]],
        "older": [ids["older"]],
    }


def test_a_time_zone_the_tz_database_doesnt_know_falls_back_to_conchs_own(
    htmx, owner, agent, settings
):
    settings.TIME_ZONE = "America/New_York"
    late = at(
        ConversationFactory(owner=owner, agent=agent),
        datetime(2026, 1, 14, 23, 30, tzinfo=NEW_YORK),
    )

    with time_machine.travel(NOON, tick=False):
        for zone in (None, "Mars/Olympus_Mons", "../../../etc/passwd", "/etc/localtime", "x" * 500):
            htmx.cookies.pop(TIME_ZONE_COOKIE, None)
            page = the_list(htmx, zone)
            assert grouped(page) == {"yesterday": [late.public_id]}, zone
            assert 'data-time-zone="America/New_York"' in page


def test_the_list_says_when_its_day_turns_in_the_persons_zone(htmx, owner, agent):
    ConversationFactory(owner=owner, agent=agent)

    with time_machine.travel(NOON, tick=False):
        page = the_list(htmx, "America/New_York")

    midnight = datetime(2026, 1, 16, tzinfo=NEW_YORK)  # 05:00 UTC on the 16th
    assert f'data-regroup-at="{int(midnight.timestamp() * 1000)}"' in page
    assert 'data-time-zone="America/New_York"' in page


def test_what_needs_you_comes_first_then_the_pinned_then_the_days(htmx, owner, agent, today_in_utc):
    now = timezone.now()
    recent = at(ConversationFactory(owner=owner, agent=agent), now)
    pinned = at(
        ConversationFactory(owner=owner, agent=agent), now - timedelta(days=400), pinned=True
    )
    asking = at(
        ConversationFactory(owner=owner, agent=agent, status=Status.NEEDS_YOU),
        now - timedelta(days=30),
    )
    pinned_asking = at(
        ConversationFactory(owner=owner, agent=agent, status=Status.NEEDS_YOU),
        now - timedelta(days=300),
        pinned=True,
    )

    groups = grouped(the_list(htmx, "UTC"))

    assert list(groups) == ["needs-you", "pinned", "today"]
    # Within Needs you, as everywhere, a pinned chat before the others.
    assert groups["needs-you"] == [pinned_asking.public_id, asking.public_id]
    assert groups["pinned"] == [pinned.public_id]
    assert groups["today"] == [recent.public_id]


def test_each_rows_key_falls_in_its_own_groups_run_of_keys(owner, agent):
    """What conch.js relies on to place a pushed row: the first group whose start its key
    reaches is the group the server put it in."""
    zone = ZoneInfo("Pacific/Auckland")
    now = timezone.now()
    for days in (0, 0.5, 1, 2, 6, 7, 8, 40):
        at(ConversationFactory(owner=owner, agent=agent), now - timedelta(days=days))
    at(ConversationFactory(owner=owner, agent=agent), now, pinned=True)
    at(ConversationFactory(owner=owner, agent=agent, status=Status.NEEDS_YOU), now)
    rows = selectors.chat_list_rows(owner_id=owner.pk)

    groups = selectors.chat_groups(rows, now=now, zone=zone)

    assert sum(len(group.rows) for group in groups) == len(rows)
    for group in groups:
        for row in group.rows:
            key = selectors.row_sort_key(row)
            assert next(g for g in groups if key >= g.starts) is group


def test_the_sort_key_puts_a_chat_that_needs_you_first_and_takes_it_back_once_answered(
    owner, agent
):
    now = timezone.now()
    old = at(ConversationFactory(owner=owner, agent=agent), now - timedelta(days=90))
    new = at(ConversationFactory(owner=owner, agent=agent), now)

    def first() -> int:
        rows = selectors.chat_list_rows(owner_id=owner.pk)
        return max(rows, key=selectors.row_sort_key).pk

    assert first() == new.pk
    Conversation.objects.filter(pk=old.pk).update(status=Status.NEEDS_YOU)
    assert first() == old.pk
    Conversation.objects.filter(pk=old.pk).update(status=Status.WORKING)
    assert first() == new.pk


# ---------------------------------------------------------------------------
# Pinning


def test_pin_and_unpin_move_the_chat_and_say_so_on_the_button(htmx, owner, agent):
    chat = ConversationFactory(owner=owner, agent=agent, title="Keep me handy")
    at(chat, timezone.now() - timedelta(days=100))

    response = htmx.post(f"/c/{chat.public_id}/pin/", {"pinned": "1"})

    assert response.status_code == 200
    chat.refresh_from_db()
    assert chat.pinned
    body = response.content.decode()
    assert grouped(body) == {"pinned": [chat.public_id]}
    assert re.search(r'<input type="hidden" name="pinned" value="0">\s*<button[^>]*>Unpin<', body)

    htmx.post(f"/c/{chat.public_id}/pin/", {"pinned": "0"})

    chat.refresh_from_db()
    assert not chat.pinned
    assert grouped(the_list(htmx, "UTC")) == {"older": [chat.public_id]}


def test_pin_without_javascript_goes_back_to_the_chat(signed_in, owner, agent):
    chat = ConversationFactory(owner=owner, agent=agent)

    response = signed_in.post(f"/c/{chat.public_id}/pin/", {"pinned": "1"})

    assert response.status_code == 302
    assert response["Location"] == f"/c/{chat.public_id}/"
    chat.refresh_from_db()
    assert chat.pinned


def test_pin_is_refused_to_another_account_to_a_get_and_without_the_csrf_token(
    owner, second_owner, agent
):
    chat = ConversationFactory(owner=owner, agent=agent)
    url = f"/c/{chat.public_id}/pin/"
    theirs = Client()
    theirs.force_login(second_owner)
    mine = Client()
    mine.force_login(owner)
    no_token = Client(enforce_csrf_checks=True)
    no_token.force_login(owner)

    assert theirs.post(url, {"pinned": "1"}).status_code == 404
    assert mine.get(url).status_code == 405
    assert no_token.post(url, {"pinned": "1"}).status_code == 403

    chat.refresh_from_db()
    assert not chat.pinned


@pytest.mark.django_db(transaction=True)
async def test_a_pin_is_pushed_to_every_tab_as_the_rows_new_place(owner, agent):
    from chats.runtime.chats import conversation_pin

    chat = await database_sync_to_async(ConversationFactory)(owner=owner, agent=agent)
    cookie = await database_sync_to_async(session_cookie)(owner)
    tabs = [socket(cookie=cookie), socket(cookie=cookie, path=f"/ws/?chat={chat.public_id}")]
    try:
        for tab in tabs:
            connected, _ = await tab.connect(timeout=5)
            assert connected
            await tab.receive_from(timeout=5)  # hello

        await database_sync_to_async(conversation_pin)(conversation=chat, pinned=True)
        pushes = [await tab.receive_from(timeout=5) for tab in tabs]
    finally:
        for tab in tabs:
            await tab.disconnect()

    for push in pushes:
        row = re.search(rf'<li id="row-{chat.public_id}"[^>]*data-sort="([^"]+)"', push)
        assert row and row.group(1).startswith("0.1."), push[:400]
    assert "Unpin" in pushes[1]  # the tab showing the chat gets its button anew
    assert pushes[0].split("</ul>")[0] == pushes[1].split("</ul>")[0]  # the same row for each


def test_a_pinned_chat_stays_pinned_when_it_is_archived_and_back(htmx, owner, agent):
    chat = ConversationFactory(owner=owner, agent=agent)
    htmx.post(f"/c/{chat.public_id}/pin/", {"pinned": "1"})
    htmx.post(f"/c/{chat.public_id}/archive/", {"archived": "1"})
    assert grouped(the_list(htmx, "UTC")) == {}
    htmx.post(f"/c/{chat.public_id}/archive/", {"archived": "0"})
    assert grouped(the_list(htmx, "UTC")) == {"pinned": [chat.public_id]}


@pytest.fixture
def today_in_utc():
    """A fixed moment, so "today" can't turn while a test runs."""
    with time_machine.travel(datetime(2026, 3, 1, 12, tzinfo=UTC), tick=False):
        yield
