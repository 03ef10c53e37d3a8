"""Telegram: the webhook Update in, the outbox's sendMessage out, over loopback."""

from __future__ import annotations

import datetime as dt
import json
import socket

import pytest
from django.utils import timezone

from chats.gateway.inbound import (
    ERR_NUL,
    ERR_SURROGATE,
    ERR_TOO_BIG,
    ERR_TOO_DEEP,
    InboundError,
)
from chats.gateway.models import ChannelAccount, OutboxMessage, OutboxState
from chats.gateway.outbox import outbox_deliver, outbox_enqueue
from chats.gateway.services import channel_account_secret_rotate
from chats.gateway.telegram import SECRET_HEADER, Ignore, Take, split_message, telegram_inbound
from chats.limits import LIMITS
from chats.models import Conversation, EntryRole
from chats.runtime.runner import drain
from tests.gateway.botapi import FakeBotApi

BOT_TOKEN = "123456:SECRET-bot-token"
URL = "/gateway/telegram/mybot"


@pytest.fixture
def bot(owner, agent):
    account = ChannelAccount.objects.create(
        owner=owner, channel="telegram", account_id="mybot", secret=BOT_TOKEN
    )
    account.webhook_secret = channel_account_secret_rotate(account=account)
    return account


@pytest.fixture
def bot_api(settings):
    with FakeBotApi() as api:
        settings.CONCH_TELEGRAM_API_BASE = api.base
        yield api


def update(text="hi", *, chat_id=42, chat_type="private", sender=42, message_id=7, **extra):
    message = {
        "message_id": message_id,
        "from": {"id": sender, "is_bot": False, "first_name": "Alice"},
        "chat": {"id": chat_id, "type": chat_type},
        "date": 1700000000,
        "text": text,
        **extra,
    }
    return {"update_id": 1000 + message_id, "message": message}


def taken(payload, **account):
    """The inbound and its reply target, for an update that is a person's words."""
    asked = telegram_inbound(payload, account=ChannelAccount(account_id="b", **account))
    assert isinstance(asked, Take), asked
    return asked.inbound, asked.reply_to


def deliver(client, bot, payload, secret=None):
    headers = {}
    if secret is not False:
        headers[f"HTTP_{SECRET_HEADER.upper().replace('-', '_')}"] = secret or bot.webhook_secret
    return client.post(URL, payload, content_type="application/json", **headers)


# ---------------------------------------------------------------------------
# The Update, mapped


def test_a_private_message_is_a_dm_from_its_sender():
    inbound, reply_to = taken(update("hello", chat_id=42, sender=42))
    assert (inbound.channel, inbound.chat_type, inbound.peer, inbound.account_id) == (
        "telegram",
        "dm",
        "42",
        "b",
    )
    assert inbound.message_id == "42:7"  # message ids are per chat
    assert reply_to == {"chat_id": 42}


def test_a_group_message_is_the_groups_with_its_sender_as_peer():
    inbound, reply_to = taken(update(chat_id=-100500, chat_type="supergroup", sender=9))
    assert (inbound.chat_type, inbound.group_id, inbound.peer) == ("group", "-100500", "9")
    assert reply_to == {"chat_id": -100500, "reply_to_message_id": 7}


def test_a_forum_topic_message_is_a_thread_under_its_group():
    inbound, reply_to = taken(
        update(chat_id=-100500, chat_type="supergroup", message_thread_id=77, is_topic_message=True)
    )
    assert (inbound.chat_type, inbound.group_id, inbound.thread_id) == ("thread", "-100500", "77")
    assert reply_to == {"chat_id": -100500, "message_thread_id": 77, "reply_to_message_id": 7}


def test_a_reply_in_an_ordinary_group_stays_in_the_group(db):
    inbound, _ = taken(update(chat_id=-1, chat_type="group", message_thread_id=5))
    assert inbound.chat_type == "group"


def test_an_edited_message_taken_as_new_says_so():
    edited = {"update_id": 5, "edited_message": update("fixed")["message"] | {"edit_date": 99}}
    inbound, _ = taken(edited, edited_messages="new")
    assert inbound.message_id == "42:7:edited:99"
    assert inbound.text == "(edited) fixed"


@pytest.mark.parametrize(
    "payload",
    [
        update(text=None),
        {"update_id": 1, "message": {**update()["message"], "from": None}},
        update(chat_type="channel"),
    ],
    ids=["no-text", "no-sender", "channel-post"],
)
def test_updates_that_are_not_a_persons_words_are_ignored(payload):
    if payload.get("message", {}).get("text", "") is None:
        del payload["message"]["text"]
    assert isinstance(telegram_inbound(payload, account_id="b"), Ignore)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ([], "body"),
        ({"message": "hi"}, "message"),
        ({"message": {"message_id": 1, "text": "x"}}, "message.chat"),
        (
            {"message": {**update()["message"], "chat": {"id": "x", "type": "private"}}},
            "message.chat.id",
        ),
        ({"message": {**update()["message"], "message_id": "7"}}, "message.message_id"),
        ({"message": {**update()["message"], "from": {"id": None}}}, "message.from.id"),
    ],
)
def test_a_malformed_update_is_refused_naming_the_field(payload, field):
    with pytest.raises(InboundError) as refused:
        telegram_inbound(payload, account_id="b")
    assert refused.value.field == field


def test_a_long_reply_is_cut_into_telegram_sized_parts():
    text = ("a" * 3000 + "\n") * 3
    parts = split_message(text)
    assert all(len(p) <= 4096 for p in parts)
    assert "".join(parts).replace("\n", "") == text.replace("\n", "")


# ---------------------------------------------------------------------------
# The webhook


def test_the_webhook_refuses_a_missing_or_wrong_secret(client, bot):
    assert deliver(client, bot, update(), secret=False).status_code == 401
    assert deliver(client, bot, update(), secret="wrong").status_code == 401
    assert not Conversation.objects.exists()


def test_an_unknown_account_reads_the_same_as_a_wrong_secret(client, bot):
    response = client.post(
        "/gateway/telegram/otherbot",
        update(),
        content_type="application/json",
        **{f"HTTP_{SECRET_HEADER.upper().replace('-', '_')}": bot.webhook_secret},
    )
    assert response.status_code == 401


def test_the_webhook_routes_a_message_into_the_accounts_owners_session(client, owner, bot):
    response = deliver(client, bot, update("hello bot"))
    assert response.status_code == 202
    answer = response.json()
    assert answer["session_key"] == "agent:main:dm:telegram:42"
    chat = Conversation.objects.get(public_id=answer["chat"])
    assert chat.owner == owner
    assert chat.entries.get().text == "hello bot"


def test_telegram_sending_the_same_update_again_changes_nothing(client, bot):
    deliver(client, bot, update())
    again = deliver(client, bot, update())
    assert again.json()["outcome"] == "duplicate"
    assert Conversation.objects.get().entries.count() == 1


def test_a_non_message_update_is_acknowledged_and_ignored(client, bot):
    response = deliver(client, bot, {"update_id": 3, "my_chat_member": {}})
    assert (response.status_code, response.json()["outcome"]) == (200, "ignored")


def test_a_malformed_update_gets_a_200_refusal_naming_the_field(client, bot):
    response = deliver(client, bot, {"update_id": 3, "message": {"text": "x"}})
    assert (response.status_code, response.json()["field"]) == (200, "message.chat")
    assert response.json()["outcome"] == "refused"


def test_a_body_that_is_not_json_gets_a_200_refusal_naming_the_body(client, bot):
    response = deliver(client, bot, "{not json")
    assert (response.status_code, response.json()["field"]) == (200, "body")


@pytest.mark.parametrize(
    "depth", [LIMITS.inbound_depth_levels, 100_000]
)  # 100,000: a RecursionError in json
def test_an_update_nested_too_deeply_gets_a_200_refusal_naming_the_body(client, bot, depth):
    raw = json.dumps(update(reply_markup="@")).replace('"@"', "[" * depth + "]" * depth)
    response = deliver(client, bot, raw)
    assert response.status_code == 200
    assert response.json() == {"outcome": "refused", "error": ERR_TOO_DEEP, "field": "body"}
    assert not Conversation.objects.exists()


@pytest.mark.parametrize("words", ["text", "caption"])
def test_a_lone_surrogate_in_the_words_gets_a_200_refusal_naming_them(client, bot, words):
    message = {k: v for k, v in update()["message"].items() if k != "text"} | {words: "@"}
    raw = json.dumps({"update_id": 1, "message": message}).replace('"@"', '"hi \\ud800"')
    response = deliver(client, bot, raw)
    assert response.status_code == 200
    assert response.json() == {
        "outcome": "refused",
        "error": ERR_SURROGATE,
        "field": f"message.{words}",
    }
    assert not Conversation.objects.exists()


def test_nul_in_the_words_gets_a_200_refusal_naming_them(client, bot):
    response = deliver(client, bot, update("before\x00after"))
    assert response.status_code == 200
    assert response.json() == {"outcome": "refused", "error": ERR_NUL, "field": "message.text"}
    assert not Conversation.objects.exists()


def test_an_update_over_the_limit_gets_a_200_refusal_naming_the_body(client, bot):
    response = deliver(client, bot, update("x" * (10 * 1024 * 1024)))  # 10 MB
    assert response.status_code == 200
    assert response.json() == {"outcome": "refused", "error": ERR_TOO_BIG, "field": "body"}
    assert not Conversation.objects.exists()


# ---------------------------------------------------------------------------
# End to end over loopback: webhook → session → reply → outbox → sendMessage


def test_a_telegram_message_is_answered_through_the_outbox_over_loopback(
    transactional_db, client, bot, bot_api
):
    bot.owner  # noqa: B018
    from chats.models import Agent

    Agent.objects.filter(is_default=True).update(engine="echo")
    response = deliver(client, bot, update("ping", chat_id=42))
    assert response.status_code == 202
    drain()  # the reply runs and ends; its end hook queues the words for Telegram

    queued = OutboxMessage.objects.get()
    assert (queued.channel, queued.account_id, queued.target, queued.text) == (
        "telegram",
        "mybot",
        {"chat_id": 42},
        "echo: ping",
    )
    report = outbox_deliver()
    assert bot_api.called.wait(10), "the fake Bot API was never called"
    assert report.sent == [queued.pk]
    [(path, body)] = bot_api.calls
    assert path == f"/bot{BOT_TOKEN}/sendMessage"
    assert body == {"chat_id": 42, "text": "echo: ping"}
    queued.refresh_from_db()
    assert (queued.state, queued.attempts) == (OutboxState.SENT, 1)


def test_a_topic_reply_goes_back_to_its_topic(transactional_db, client, bot, bot_api):
    from chats.models import Agent

    Agent.objects.filter(is_default=True).update(engine="echo")
    deliver(
        client,
        bot,
        update(
            "in topic",
            chat_id=-100,
            chat_type="supergroup",
            message_thread_id=5,
            is_topic_message=True,
        ),
    )
    drain()
    outbox_deliver()
    assert bot_api.called.wait(10)
    [(_, body)] = bot_api.calls
    assert body == {
        "chat_id": -100,
        "text": "echo: Alice: in topic",
        "message_thread_id": 5,
        "reply_parameters": {"message_id": 7, "allow_sending_without_reply": True},
    }


def test_new_over_telegram_is_acknowledged(transactional_db, client, bot, bot_api):
    deliver(client, bot, update("/new", message_id=1))
    outbox_deliver()
    assert bot_api.called.wait(10)
    assert bot_api.calls[0][1]["text"].startswith("Started fresh")


# ---------------------------------------------------------------------------
# Retries


def queued_for(bot, text="hello") -> OutboxMessage:
    return outbox_enqueue(
        conversation=None, channel="telegram", account_id="mybot", target={"chat_id": 1}, text=text
    )


def test_a_failed_send_is_retried_after_a_backoff_and_then_goes_out(bot, bot_api):
    bot_api.answers = [(502, {"ok": False, "description": "Bad Gateway"})]
    message = queued_for(bot)
    now = timezone.now()
    first = outbox_deliver(now=now)
    message.refresh_from_db()
    assert first.retrying == [message.pk]
    assert (message.state, message.attempts) == (OutboxState.PENDING, 1)
    assert "Bad Gateway" in message.last_error
    assert message.next_attempt_at == now + dt.timedelta(seconds=5)
    assert outbox_deliver(now=now + dt.timedelta(seconds=4)).sent == []  # not yet due
    assert outbox_deliver(now=now + dt.timedelta(seconds=6)).sent == [message.pk]
    message.refresh_from_db()
    assert (message.state, message.attempts, message.last_error) == (OutboxState.SENT, 2, "")
    assert len(bot_api.calls) == 2


def test_the_backoff_doubles(bot, bot_api):
    bot_api.answers = [(500, {"ok": False})] * 3
    message = queued_for(bot)
    now = timezone.now()
    waits = []
    for _ in range(3):
        outbox_deliver(now=now)
        message.refresh_from_db()
        waits.append((message.next_attempt_at - now).total_seconds())
        now = message.next_attempt_at
    assert waits == [5.0, 10.0, 20.0]


def test_telegram_asking_to_slow_down_is_honoured(bot, bot_api):
    bot_api.answers = [
        (429, {"ok": False, "description": "Too Many Requests", "parameters": {"retry_after": 30}})
    ]
    message = queued_for(bot)
    now = timezone.now()
    outbox_deliver(now=now)
    message.refresh_from_db()
    assert message.next_attempt_at == now + dt.timedelta(seconds=30)
    assert message.state == OutboxState.PENDING


def test_a_refusal_that_retrying_cannot_fix_fails_at_once(bot, bot_api):
    bot_api.answers = [(400, {"ok": False, "description": "Bad Request: chat not found"})]
    message = queued_for(bot)
    report = outbox_deliver()
    message.refresh_from_db()
    assert report.failed == [message.pk]
    assert message.state == OutboxState.FAILED
    assert "chat not found" in message.last_error


def test_after_the_last_attempt_a_message_is_failed_for_good(bot, bot_api, settings):
    settings.CONCH_OUTBOX_MAX_ATTEMPTS = 2
    bot_api.answers = [(503, {"ok": False})] * 2
    message = queued_for(bot)
    now = timezone.now()
    outbox_deliver(now=now)
    outbox_deliver(now=now + dt.timedelta(hours=1))
    message.refresh_from_db()
    assert (message.state, message.attempts) == (OutboxState.FAILED, 2)


def test_a_retry_sends_only_the_parts_that_did_not_go_out(bot, bot_api):
    bot_api.answers = [(200, {"ok": True}), (500, {"ok": False})]
    message = queued_for(bot, text="x" * 5000)  # two parts
    now = timezone.now()
    outbox_deliver(now=now)
    message.refresh_from_db()
    assert (message.parts_sent, message.state) == (1, OutboxState.PENDING)
    outbox_deliver(now=now + dt.timedelta(minutes=1))
    sent = [len(body["text"]) for _, body in bot_api.calls]
    assert sent == [4096, 904, 904]  # the first part once, the second until it went


def test_an_unreachable_api_is_retried_and_the_bot_token_never_shows(bot, settings):
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.CONCH_TELEGRAM_API_BASE = f"http://127.0.0.1:{port}"
    message = queued_for(bot)
    outbox_deliver()
    message.refresh_from_db()
    assert message.state == OutboxState.PENDING
    assert "could not be reached" in message.last_error
    assert BOT_TOKEN not in message.last_error


def test_a_channel_with_no_sender_queues_nothing(owner):
    assert (
        outbox_enqueue(
            conversation=None,
            channel="smoke-signals",
            account_id="a",
            target={"chat_id": 1},
            text="x",
        )
        is None
    )


def test_a_reply_is_queued_once_per_turn(transactional_db, client, bot):
    from chats.gateway.models import SessionOrigin
    from chats.gateway.outbox import outbox_enqueue_reply
    from chats.models import Agent, Turn

    Agent.objects.filter(is_default=True).update(engine="echo")
    deliver(client, bot, update("once"))
    drain()
    turn = Turn.objects.get()
    assert outbox_enqueue_reply(turn=turn, origin=SessionOrigin.objects.get()) is None
    assert OutboxMessage.objects.count() == 1
    assert turn.entries.filter(role=EntryRole.ASSISTANT).get().text == "echo: once"


def test_the_runner_delivers_the_outbox_on_a_sweep():
    from chats.hooks import sweeps

    names = {sweep.name for sweep in sweeps}
    assert {"gateway.outbox", "gateway.resets", "gateway.maintenance"} <= names


def test_a_message_never_lands_in_another_persons_chat(client, owner, second_owner, bot):
    from chats.gateway.services import channel_account_secret_rotate

    deliver(client, bot, update("mine", chat_id=42, sender=42, message_id=1))
    theirs = ChannelAccount.objects.create(
        owner=second_owner, channel="telegram", account_id="theirbot", secret="9:x"
    )
    secret = channel_account_secret_rotate(account=theirs)
    response = client.post(
        "/gateway/telegram/theirbot",
        update("hello?", chat_id=42, sender=42, message_id=2),
        content_type="application/json",
        **{f"HTTP_{SECRET_HEADER.upper().replace('-', '_')}": secret},
    )
    # Same key under per-channel-peer: refused, not joined; Telegram still hears 200.
    assert (response.status_code, response.json()["outcome"]) == (200, "refused")
    chat = Conversation.objects.get()
    assert chat.owner == owner
    assert list(chat.entries.values_list("text", flat=True)) == ["mine"]
