"""Telegram as its users meet it: real-shaped updates in, a Bot API fake that
answers as the real one does out.

Every update posted here is a file in telegram_updates/, and SOURCES.md says
where each shape comes from; the fake's refusals are the real server's words.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from chats.gateway.models import (
    ChannelAccount,
    InboundRecord,
    OutboxMessage,
    OutboxState,
    SessionOrigin,
)
from chats.gateway.outbox import outbox_deliver
from chats.gateway.services import channel_account_secret_rotate, gateway_token_rotate
from chats.gateway.telegram import SAID_THREAD_GONE, SECRET_HEADER, utf16_units
from chats.models import Agent, Conversation, EntryRole
from chats.runtime.runner import drain
from tests.gateway.botapi import (
    BLOCKED,
    THREAD_NOT_FOUND,
    TOO_LONG,
    UPGRADED,
    FakeBotApi,
)

UPDATES = Path(__file__).parent / "telegram_updates"
BOT_TOKEN = "123456:SECRET-bot-token"
OUR_BOT = "conch_test_bot"
OLD_GROUP = -4519735426
SUPERGROUP = -1001234567489  # the forum supergroup of the fixtures, and the group's new id


def load(name: str, **message) -> dict:
    """A recorded update, with any of its message's fields changed."""
    update = json.loads((UPDATES / f"{name}.json").read_text())
    update = copy.deepcopy(update)
    for key in ("message", "edited_message"):
        if key in update:
            update[key].update(message)
    return update


@pytest.fixture
def bot(owner, agent):
    account = ChannelAccount.objects.create(
        owner=owner,
        channel="telegram",
        account_id="mybot",
        secret=BOT_TOKEN,
        bot_username=OUR_BOT,
    )
    account.webhook_secret = channel_account_secret_rotate(account=account)
    return account


@pytest.fixture
def bot_api(settings):
    with FakeBotApi(username=OUR_BOT) as api:
        settings.CONCH_TELEGRAM_API_BASE = api.base
        yield api


@pytest.fixture
def echo(agent):
    Agent.objects.filter(is_default=True).update(engine="echo")


def post(client, bot, update):
    header = f"HTTP_{SECRET_HEADER.upper().replace('-', '_')}"
    return client.post(
        "/gateway/telegram/mybot",
        update,
        content_type="application/json",
        **{header: bot.webhook_secret},
    )


def person_words(chat: Conversation) -> list[str]:
    return list(
        chat.entries.filter(role=EntryRole.PERSON).order_by("seq").values_list("text", flat=True)
    )


def answered(bot_api: FakeBotApi) -> list[dict]:
    """Deliver what is queued; the bodies Telegram took."""
    outbox_deliver()
    return bot_api.sent()


# ---------------------------------------------------------------------------
# 1. Commands for another bot


def test_a_command_for_another_bot_leaves_our_session_alone(client, bot):
    started = post(client, bot, load("supergroup_message"))
    chat = Conversation.objects.get(public_id=started.json()["chat"])

    response = post(client, bot, load("supergroup_command_for_another_bot"))

    assert (response.status_code, response.json()["outcome"]) == (200, "ignored")
    assert InboundRecord.objects.filter(outcome__startswith="reset").count() == 0
    chat.refresh_from_db()
    assert not chat.archived
    assert not SessionOrigin.objects.get(pk=chat.pk).reset_pending
    assert not chat.queued_inputs.exists()
    assert Conversation.objects.count() == 1
    assert person_words(chat) == ["Mario Bros (@MarioBros): foo"]
    record = InboundRecord.objects.get(message_id=f"{SUPERGROUP}:36")
    assert (record.outcome, record.reason) == ("ignored", "a command for another bot")


@pytest.mark.parametrize("name", ["supergroup_command_for_us", "supergroup_bare_command"])
def test_a_command_naming_our_bot_or_no_bot_starts_a_group_afresh(client, bot, name):
    first = post(client, bot, load("supergroup_message")).json()["chat"]

    response = post(client, bot, load(name))

    # The first message's reply is still running (no runner here): the reset waits for it.
    assert response.json()["outcome"] == "reset_pending"
    assert SessionOrigin.objects.get(conversation__public_id=first).reset_pending


def test_while_our_name_is_unknown_a_command_naming_a_bot_is_not_taken(client, bot):
    ChannelAccount.objects.filter(pk=bot.pk).update(bot_username="")
    post(client, bot, load("supergroup_message"))
    response = post(client, bot, load("supergroup_command_for_us"))
    assert response.json()["outcome"] == "ignored"
    assert not Conversation.objects.filter(archived=True).exists()


def test_setting_up_the_account_learns_the_bots_name_from_getme(owner, agent, bot_api, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{BOT_TOKEN}\n"))
    err = io.StringIO()
    call_command(
        "conch_gateway_token",
        "--owner",
        "owner",
        "--telegram",
        "fresh",
        "--bot-token-stdin",
        stdout=io.StringIO(),
        stderr=err,
    )
    assert ChannelAccount.objects.get(account_id="fresh").bot_username == OUR_BOT
    assert [path for path, _ in bot_api.calls] == [f"/bot{BOT_TOKEN}/getMe"]
    assert f"@{OUR_BOT}" in err.getvalue()


# ---------------------------------------------------------------------------
# 2. A group upgraded to a supergroup


@pytest.mark.parametrize(
    "service_message", ["group_migrate_to_chat_id", "supergroup_migrate_from_chat_id"]
)
def test_a_group_that_became_a_supergroup_keeps_its_session(client, bot, service_message):
    before = post(client, bot, load("group_message")).json()

    moved = post(client, bot, load(service_message))
    after = post(client, bot, load("supergroup_after_migration")).json()

    assert (moved.status_code, moved.json()["outcome"]) == (200, "migrated")
    assert after["chat"] == before["chat"]
    assert after["outcome"] == "queued"  # behind the first message's reply, in the same chat
    assert after["session_key"] == f"agent:main:group:telegram:{SUPERGROUP}"
    chat = Conversation.objects.get(public_id=after["chat"])
    assert person_words(chat) == ["Mario Bros (@MarioBros): what did we decide about friday?"]
    assert SessionOrigin.objects.get(pk=chat.pk).group_id == str(SUPERGROUP)


def test_a_supergroup_that_spoke_before_the_move_keeps_the_groups_chat_as_its_earlier_one(
    client, bot
):
    before = post(client, bot, load("group_message")).json()
    after = post(client, bot, load("supergroup_after_migration")).json()  # before the notice

    moved = post(client, bot, load("supergroup_migrate_from_chat_id"))

    assert moved.json()["outcome"] == "migrated"
    old = Conversation.objects.get(public_id=before["chat"])
    assert old.archived
    assert old.session_key == after["session_key"]
    assert SessionOrigin.objects.get(pk=old.pk).ended_because == "the group became a supergroup"
    live = Conversation.objects.get(session_key=after["session_key"], archived=False)
    assert live.public_id == after["chat"]


def test_replies_queued_to_the_old_group_go_to_its_new_id(
    transactional_db, client, bot, bot_api, echo
):
    bot_api.migrated[OLD_GROUP] = SUPERGROUP
    post(client, bot, load("group_message"))
    drain()

    sent = answered(bot_api)

    queued = OutboxMessage.objects.get()
    assert queued.state == OutboxState.SENT, queued.last_error
    assert [body["chat_id"] for body, _, _ in bot_api.refused] == [OLD_GROUP]
    assert bot_api.refused[0][2]["description"] == UPGRADED
    assert [body["chat_id"] for body in sent] == [SUPERGROUP]
    # The session went with it: the group's next words land in the same chat.
    assert SessionOrigin.objects.get().group_id == str(SUPERGROUP)


# ---------------------------------------------------------------------------
# 3. Long replies, counted as Telegram counts


def test_a_long_emoji_reply_goes_out_whole_in_parts_telegram_takes(
    transactional_db, client, bot, bot_api, echo
):
    post(client, bot, load("private_text", text="😀" * 4000))
    drain()

    sent = answered(bot_api)

    queued = OutboxMessage.objects.get()
    assert queued.state == OutboxState.SENT, queued.last_error
    assert bot_api.refused == []  # no part was over Telegram's count
    assert len(sent) == 2
    assert all(utf16_units(body["text"]) <= 4096 for body in sent)
    assert "".join(body["text"] for body in sent) == "echo: " + "😀" * 4000


def test_a_message_is_too_long_refusal_is_cut_smaller_and_sent_never_dropped(
    transactional_db, client, bot, bot_api, echo
):
    bot_api.text_limit = 1000  # Telegram counting longer than we do
    post(client, bot, load("private_text", text="word " * 600))
    drain()

    sent = answered(bot_api)

    queued = OutboxMessage.objects.get()
    assert queued.state == OutboxState.SENT, queued.last_error
    assert bot_api.refused and all(a["description"] == TOO_LONG for _, _, a in bot_api.refused)
    assert all(utf16_units(body["text"]) <= 1000 for body in sent)
    assert "".join(body["text"] for body in sent) == queued.text


# ---------------------------------------------------------------------------
# 4. One shape for a reply's target, through both doors


def test_a_forum_topic_reply_through_the_webhook_goes_to_its_topic(
    transactional_db, client, bot, bot_api, echo
):
    bot_api.forums[SUPERGROUP] = {33}
    post(client, bot, load("forum_topic_message"))
    drain()

    [body] = answered(bot_api)

    assert (body["chat_id"], body["message_thread_id"]) == (SUPERGROUP, 33)


def test_a_forum_topic_reply_through_the_inbound_door_goes_to_its_topic(
    transactional_db, client, owner, bot, bot_api, echo
):
    bot_api.forums[SUPERGROUP] = {33}
    update = load("forum_topic_message")["message"]
    token = gateway_token_rotate(owner=owner)
    response = client.post(
        "/gateway/inbound",
        {
            "channel": "telegram",
            "account_id": "mybot",
            "chat_type": "thread",
            "peer": update["from"]["id"],
            "sender_name": update["from"]["first_name"],
            "group_id": update["chat"]["id"],
            "thread_id": update["message_thread_id"],
            "message_id": f"{update['chat']['id']}:{update['message_id']}",
            "text": update["text"],
        },
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 202, response.json()
    drain()

    [body] = answered(bot_api)

    assert str(body["chat_id"]) == str(SUPERGROUP)
    assert str(body.get("message_thread_id")) == "33"


def test_a_reply_to_a_topic_that_is_gone_goes_to_the_group_and_the_chat_says_so(
    transactional_db, client, bot, bot_api, echo
):
    bot_api.forums[SUPERGROUP] = set()  # the topic was deleted
    started = post(client, bot, load("forum_topic_message"))
    drain()

    [body] = answered(bot_api)

    assert body["chat_id"] == SUPERGROUP and "message_thread_id" not in body
    assert body["text"].startswith("echo: ")
    assert OutboxMessage.objects.get().state == OutboxState.SENT
    chat = Conversation.objects.get(public_id=started.json()["chat"])
    assert chat.entries.filter(role="conch", text=SAID_THREAD_GONE).count() == 1
    assert [answer["description"] for _, _, answer in bot_api.refused] == [THREAD_NOT_FOUND]


def test_a_user_who_blocked_the_bot_fails_at_once_with_telegrams_words(
    transactional_db, client, bot, bot_api, echo
):
    bot_api.blocked.add(12345678)
    post(client, bot, load("private_text"))
    drain()

    assert answered(bot_api) == []

    queued = OutboxMessage.objects.get()
    assert (queued.state, queued.attempts) == (OutboxState.FAILED, 1)
    assert BLOCKED in queued.last_error


def test_telegram_asking_to_slow_down_is_waited_for(transactional_db, client, bot, bot_api, echo):
    from tests.gateway.botapi import slow_down

    bot_api.answers = [slow_down(14)]
    post(client, bot, load("private_text"))
    drain()

    outbox_deliver()

    queued = OutboxMessage.objects.get()
    assert queued.state == OutboxState.PENDING
    assert round((queued.next_attempt_at - queued.created_at).total_seconds()) >= 14
    assert "retry after 14" in queued.last_error


# ---------------------------------------------------------------------------
# 5. 200 for every update we choose not to take


def test_an_update_with_no_chat_type_is_acknowledged_and_kept_as_refused(client, bot):
    response = post(client, bot, load("missing_chat_type"))

    assert response.status_code == 200
    assert response.json()["outcome"] == "refused"
    assert response.json()["field"] == "message.chat.type"
    record = InboundRecord.objects.get()
    assert (record.outcome, record.message_id) == ("refused", f"{SUPERGROUP}:45")
    assert "message.chat.type" in record.reason
    assert not Conversation.objects.exists()


def test_a_refused_update_sent_again_is_kept_once(client, bot):
    post(client, bot, load("missing_chat_type"))
    again = post(client, bot, load("missing_chat_type"))
    assert again.status_code == 200
    assert InboundRecord.objects.count() == 1


def test_a_session_key_clash_is_acknowledged_and_kept_as_refused(client, owner, second_owner, bot):
    post(client, bot, load("private_text"))
    theirs = ChannelAccount.objects.create(
        owner=second_owner, channel="telegram", account_id="theirbot", secret="9:x"
    )
    secret = channel_account_secret_rotate(account=theirs)
    response = client.post(
        "/gateway/telegram/theirbot",
        load("private_text", message_id=123457),
        content_type="application/json",
        **{f"HTTP_{SECRET_HEADER.upper().replace('-', '_')}": secret},
    )
    assert (response.status_code, response.json()["outcome"]) == (200, "refused")
    record = InboundRecord.objects.get(account_id="theirbot")
    assert record.outcome == "refused"
    assert "another person's chat" in record.reason


def test_a_member_change_is_acknowledged_and_ignored(client, bot):
    response = post(client, bot, load("my_chat_member"))
    assert (response.status_code, response.json()["outcome"]) == (200, "ignored")


# ---------------------------------------------------------------------------
# 6. Who speaks in groups


def test_a_group_speaker_is_named_and_routed_by_id(client, bot):
    chat = post(client, bot, load("supergroup_message")).json()["chat"]
    chat = Conversation.objects.get(public_id=chat)
    assert person_words(chat) == ["Mario Bros (@MarioBros): foo"]
    assert SessionOrigin.objects.get(pk=chat.pk).peer == "123456"


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("anonymous_admin", "the group's admins: pinned rules apply to everyone"),
        ("channel_as_sender", "the channel Opsdroid-test: hello from the channel"),
    ],
)
def test_an_anonymous_admin_or_a_channel_is_named_as_such(client, bot, name, said):
    chat = post(client, bot, load(name)).json()["chat"]
    assert person_words(Conversation.objects.get(public_id=chat)) == [said]


def test_a_linked_channels_post_starts_no_reply(client, bot):
    response = post(client, bot, load("linked_channel_post"))
    assert (response.status_code, response.json()["outcome"]) == (200, "ignored")
    assert not Conversation.objects.exists()


def test_a_linked_channels_post_starts_a_reply_when_the_account_says_so(client, bot):
    ChannelAccount.objects.filter(pk=bot.pk).update(linked_channel_posts=True)
    chat = post(client, bot, load("linked_channel_post")).json()["chat"]
    words = person_words(Conversation.objects.get(public_id=chat))
    assert words == ["the channel Opsdroid-test: New post: release notes"]


# ---------------------------------------------------------------------------
# 7. Replies tie to the question


def test_a_group_reply_points_at_the_message_it_answers(
    transactional_db, client, bot, bot_api, echo
):
    post(client, bot, load("supergroup_message"))
    drain()

    [body] = answered(bot_api)

    assert body["chat_id"] == SUPERGROUP
    assert body["reply_parameters"] == {"message_id": 35, "allow_sending_without_reply": True}


def test_a_dm_reply_is_not_tied(transactional_db, client, bot, bot_api, echo):
    post(client, bot, load("private_text"))
    drain()
    [body] = answered(bot_api)
    assert "reply_parameters" not in body


# ---------------------------------------------------------------------------
# 8. Edited messages


def test_an_edit_is_ignored_by_default(client, bot):
    post(client, bot, load("edited_message"))
    assert not Conversation.objects.exists()
    assert InboundRecord.objects.get().outcome == "ignored"


def test_an_edit_is_a_new_message_when_the_account_says_so(client, bot):
    ChannelAccount.objects.filter(pk=bot.pk).update(edited_messages="new")
    chat = post(client, bot, load("edited_message")).json()["chat"]
    [words] = person_words(Conversation.objects.get(public_id=chat))
    # It answers an earlier message: that one is fenced before it, as its writer's words.
    assert words == (
        '<replying-to who="Mario (@super)">\nThis message\n</replying-to>\n'
        "(edited) Editing this message"
    )
