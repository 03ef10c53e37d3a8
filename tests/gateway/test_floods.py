"""Inbound floods, tried as a stranger on a chat app would.

300 DMs from 300 Telegram ids in 20 s used to make 300 chats and 300 model requests.
Here the same flood, smaller bounds so it runs quickly, through the real webhook door
and the generic one; the limiter is chats/gateway/floods.py.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from chats.gateway.floods import NOTICE, TOLD_BUSY, TOLD_SENDER, InboundLimited
from chats.gateway.models import InboundRecord, OutboxMessage, OwnerIdentity
from chats.models import Conversation, Turn
from tests.gateway import test_telegram_users as users
from tests.gateway.test_telegram_users import answered, load, post

pytestmark = pytest.mark.django_db

bot = users.bot  # a Telegram bot account, and the Bot API fake it sends to
bot_api = users.bot_api


@pytest.fixture
def bounds(settings):
    settings.CONCH_INBOUND_PER_SENDER = 3
    settings.CONCH_INBOUND_PER_ACCOUNT = 10
    settings.CONCH_INBOUND_PER_INSTALL = 15
    settings.CONCH_INBOUND_WINDOW_SECONDS = 60
    return settings


def dm(sender: int, n: int) -> dict:
    """A private message from Telegram user ``sender``, its ``n``th update."""
    return load(
        "private_text",
        message_id=sender * 1_000 + n,
        chat={"id": sender, "type": "private", "first_name": f"User {sender}"},
        **{"from": {"id": sender, "is_bot": False, "first_name": f"User {sender}"}},
        text=f"hello {n}",
    )


def limited() -> list[InboundRecord]:
    return list(InboundRecord.objects.filter(limited=True).order_by("pk"))


def test_a_flood_of_new_ids_starts_no_more_chats_than_the_bounds_and_telegram_gets_200(
    client, bot, bounds, bot_api
):
    answers = [post(client, bot, dm(1_000 + n, 1)) for n in range(40)]

    assert {a.status_code for a in answers if a.json()["outcome"] == "refused"} == {200}
    assert Conversation.objects.count() == 10  # the account's bound: 10 chats, 10 replies
    assert Turn.objects.count() == 10
    refused = limited()
    assert len(refused) == 30
    assert {r.outcome for r in refused} == {"refused"}  # kept in the admin as refused
    assert all("on one bot account" in r.reason for r in refused)
    # Each stranger is told to wait, but the notes are bounded too: no flood back out.
    notes = [
        m for m in OutboxMessage.objects.all() if m.text == TOLD_BUSY.format(window="1 minute")
    ]
    assert len(notes) == 10
    assert sum(r.told for r in refused) == 10


def test_one_sender_past_its_bound_is_told_once_in_words_to_wait(client, bot, bounds, bot_api):
    answers = [post(client, bot, dm(42, n)) for n in range(6)]

    assert [a.json()["outcome"] for a in answers] == ["started", "queued", "queued"] + [
        "refused"
    ] * 3
    assert [a.status_code for a in answers[3:]] == [200] * 3
    sent = [body for body in answered(bot_api) if body["chat_id"] == 42]
    assert [body["text"] for body in sent] == [TOLD_SENDER.format(window="1 minute")]
    assert [r.told for r in limited()] == [True, False, False]
    assert "3 from one sender in the last 1 minute" in limited()[0].reason


def test_the_generic_door_answers_429_with_retry_after_and_the_words(client, bounds, owner):
    from chats.gateway.services import gateway_token_rotate

    token = gateway_token_rotate(owner=owner)

    def send(n):
        body = {"channel": "slack", "chat_type": "dm", "peer": "U0FLOOD", "text": f"hi {n}"}
        body["message_id"] = f"flood-{n}"
        return client.post(
            "/gateway/inbound",
            json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )

    answers = [send(n) for n in range(4)]

    assert [a.status_code for a in answers] == [202, 202, 202, 429]
    assert answers[-1]["Retry-After"] == "60"
    assert answers[-1].json()["error"] == TOLD_SENDER.format(window="1 minute")
    # Sent again later, the refused message is taken: a refusal is not a receipt.
    bounds.CONCH_INBOUND_PER_SENDER = 10
    assert send(3).status_code == 202


def test_nothing_the_owner_sends_is_ever_limited(client, bot, bounds, bot_api, owner):
    OwnerIdentity.objects.create(owner=owner, channel="telegram", peer="7")
    for n in range(15):  # strangers fill the account's bound and the install's
        post(client, bot, dm(2_000 + n, 1))

    answers = [post(client, bot, dm(7, n)).json()["outcome"] for n in range(8)]

    assert "refused" not in answers
    assert not InboundRecord.objects.filter(limited=True, sender="7").exists()


def test_a_repeat_of_a_message_taken_before_is_a_duplicate_not_a_refusal(
    client, bot, bounds, bot_api
):
    first = [post(client, bot, dm(43, n)) for n in range(3)]
    assert post(client, bot, dm(43, 3)).json()["outcome"] == "refused"

    again = post(client, bot, dm(43, 1))  # Telegram resends one it took

    assert again.json()["outcome"] == "duplicate"
    assert first[1].json()["chat"] == again.json()["chat"]


def test_the_bound_is_a_window_and_routines_never_meet_it(receive, bounds):
    start = timezone.now()
    for _ in range(3):
        receive(peer="bob", now=start)
    with pytest.raises(InboundLimited):
        receive(peer="bob", now=start + dt.timedelta(seconds=30))

    # Past the window, bob is taken again.
    assert receive(peer="bob", now=start + dt.timedelta(seconds=61)).outcome == "queued"
    for _ in range(20):  # the owner's routines
        run = receive(channel="cron", chat_type="cron", job_id="mail", peer=None, now=start)
        assert run.outcome in ("started", "queued")
    assert not InboundRecord.objects.filter(limited=True).exclude(sender="bob").exists()


def test_the_owner_sees_a_notice_and_a_second_account_does_not(client, bot, bounds, bot_api, owner):
    for n in range(5):
        post(client, bot, dm(44, n))
    client.force_login(owner)

    page = client.get("/").content.decode()

    notice = NOTICE.format(
        count=2, messages="messages were", senders=1, people="sender", window="1 hour"
    )
    assert notice in page
    assert "/admin/gateway/inboundrecord/?limited__exact=1" in page
    other = get_user_model().objects.create_user("second", password="x")
    client.force_login(other)
    assert notice not in client.get("/").content.decode()
