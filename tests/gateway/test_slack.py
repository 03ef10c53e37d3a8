"""Slack: the Events API in (signed, acknowledged at once), chat.postMessage out, over loopback.

The payloads are Slack's own (slack_payloads/SOURCES.md); the Web API is a fake
that answers as Slack does (slack_api.py), spoken to by slack_sdk itself.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import hmac
import io
import json
import socket
import time
from pathlib import Path

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.utils import timezone

from chats.gateway.models import (
    Binding,
    ChannelAccount,
    EditedMessages,
    GroupActivation,
    InboundRecord,
    OutboxMessage,
    OutboxState,
    OwnerIdentity,
    SentPart,
)
from chats.gateway.outbox import outbox_deliver, outbox_enqueue
from chats.gateway.slack import (
    SIGNATURE_HEADER,
    TEXT_LIMIT,
    TIMESTAMP_HEADER,
    Ignore,
    Take,
    slack_inbound,
    slack_request_verified,
)
from chats.models import Agent, Conversation, TurnState
from chats.runtime.runner import drain
from chats.toolsets import OWNERS, STRANGERS, tool_set_for
from tests.gateway.slack_api import BOT_USER, TOKEN, FakeSlackApi, refusal, slow_down

PAYLOADS = Path(__file__).parent / "slack_payloads"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
URL = "/gateway/slack/work"


def payload(name: str) -> dict:
    return json.loads((PAYLOADS / f"{name}.json").read_text())


@pytest.fixture
def app(owner, agent):
    return ChannelAccount.objects.create(
        owner=owner,
        channel="slack",
        account_id="work",
        secret=TOKEN,
        signing_secret=SIGNING_SECRET,
        bot_user_id=BOT_USER,
    )


@pytest.fixture
def slack_api(settings):
    api = FakeSlackApi().start()
    settings.CONCH_SLACK_API_BASE = api.base
    yield api
    api.stop()


def signed(body: bytes, *, secret: str = SIGNING_SECRET, at: int | None = None) -> dict:
    """The headers Slack sends with ``body``, written from Slack's recipe, not slack_sdk's."""
    timestamp = str(int(time.time()) if at is None else at)
    base = f"v0:{timestamp}:".encode() + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        f"HTTP_{SIGNATURE_HEADER.upper().replace('-', '_')}": f"v0={digest}",
        f"HTTP_{TIMESTAMP_HEADER.upper().replace('-', '_')}": timestamp,
    }


def deliver(client, body: dict | bytes, *, headers: dict | None = None, url: str = URL):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(
        url,
        raw,
        content_type="application/json",
        **(signed(raw) if headers is None else headers),
    )


def taken(body: dict, **account) -> tuple:
    fields = {"account_id": "work", "bot_user_id": BOT_USER, **account}
    asked = slack_inbound(body, account=ChannelAccount(**fields))
    assert isinstance(asked, Take), asked
    return asked.inbound, asked.reply_to


def mention(body: dict) -> dict:
    body = copy.deepcopy(body)
    body["event"]["text"] = f"<@{BOT_USER}> {body['event']['text']}"
    return body


# ---------------------------------------------------------------------------
# The signature


def test_slacks_published_example_signature_is_accepted_at_its_time(app):
    # Slack's own worked example ("Verifying requests from Slack"), byte for byte.
    body = (
        b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id="
        b"G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook"
        b"-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F3977"
        b"00885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d"
        b"10d2c447fce8b6703c"
    )
    signature = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    with time_machine.travel(dt.datetime.fromtimestamp(1531420618 + 30, tz=dt.UTC), tick=False):
        assert slack_request_verified(app, body=body, timestamp="1531420618", signature=signature)
        assert not slack_request_verified(
            app, body=body + b"x", timestamp="1531420618", signature=signature
        )
    # The same request six minutes later is a replay: refused.
    with time_machine.travel(dt.datetime.fromtimestamp(1531420618 + 360, tz=dt.UTC), tick=False):
        assert not slack_request_verified(
            app, body=body, timestamp="1531420618", signature=signature
        )


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"HTTP_X_SLACK_REQUEST_TIMESTAMP": str(int(time.time()))},
        "wrong-secret",
        "stale",
        "junk-timestamp",
    ],
    ids=["none", "no signature", "wrong secret", "six minutes old", "not a timestamp"],
)
def test_a_request_slack_did_not_sign_now_is_refused_and_nothing_is_kept(client, app, headers):
    raw = json.dumps(payload("dm_message")).encode()
    if headers == "wrong-secret":
        headers = signed(raw, secret="not-the-secret")
    elif headers == "stale":
        headers = signed(raw, at=int(time.time()) - 360)
    elif headers == "junk-timestamp":
        headers = {**signed(raw), "HTTP_X_SLACK_REQUEST_TIMESTAMP": "soon"}
    response = deliver(client, raw, headers=headers)
    assert response.status_code == 401
    assert "signature" in response.json()["error"]
    assert not Conversation.objects.exists()
    assert not InboundRecord.objects.exists()


def test_an_unknown_account_reads_the_same_as_a_wrong_signature(client, app):
    response = deliver(client, payload("dm_message"), url="/gateway/slack/nobody")
    assert response.status_code == 401
    assert response.json() == deliver(client, payload("dm_message"), headers={}).json()


def test_a_signed_body_changed_on_the_way_is_refused(client, app):
    raw = json.dumps(payload("dm_message")).encode()
    headers = signed(raw)
    response = deliver(client, raw.replace(b"Hello hello", b"Transfer all"), headers=headers)
    assert response.status_code == 401


def test_the_url_verification_challenge_is_answered(client, app):
    response = deliver(client, payload("url_verification"))
    assert response.status_code == 200
    assert response.json() == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}


# ---------------------------------------------------------------------------
# Keys and agents, as OpenClaw chooses them


def test_a_dm_is_keyed_by_dm_scope_with_its_sender_as_peer(client, app):
    response = deliver(client, payload("dm_message"))
    assert response.status_code == 200, response.content
    chat = Conversation.objects.get()
    # Under the default per-channel-peer; a person's id is lower-cased in a DM key.
    assert chat.session_key == "agent:main:dm:slack:u2147483697"
    origin = chat.gateway
    assert (origin.channel, origin.chat_type, origin.peer, origin.team_id) == (
        "slack",
        "dm",
        "U2147483697",
        "T061EG9R6",
    )
    assert origin.reply_to == {"chat_id": "D024BE91L", "reply_to_message_id": "1355517523.000005"}


def test_a_channel_message_is_the_channels_keeping_its_ids_case(client, app):
    deliver(client, mention(payload("channel_message")))
    chat = Conversation.objects.get()
    assert chat.session_key == "agent:main:group:slack:C111"
    assert chat.gateway.peer == "W111"  # the speaker, for the assistant's eyes


def test_a_threaded_reply_is_its_threads_with_the_channel_as_its_parent(client, app, personas):
    Binding.objects.create(
        agent=personas["work"],
        channel="slack",
        account_id="*",
        peer="C123ABC456",
        peer_kind="channel",
    )
    body = payload("thread_reply")
    body["event"]["parent_user_id"] = BOT_USER  # a thread the bot is in: no mention needed
    response = deliver(client, body)
    assert response.status_code == 200, response.content
    chat = Conversation.objects.get()
    # The thread inherits the channel's agent (the parentPeer tier) but is a session of its own.
    assert chat.session_key == "agent:work:thread:slack:C123ABC456:1482960137.003543"
    origin = chat.gateway
    assert (origin.chat_type, origin.parent_peer, origin.thread_id) == (
        "thread",
        "C123ABC456",
        "1482960137.003543",
    )
    assert origin.reply_to["message_thread_id"] == "1482960137.003543"


def test_the_team_tier_is_filled_from_the_events_team(client, app, personas):
    Binding.objects.create(
        agent=personas["home"], channel="slack", account_id="*", team_id="T061EG9R6"
    )
    deliver(client, payload("dm_message"))
    assert Conversation.objects.get().session_key == "agent:home:dm:slack:u2147483697"


def test_a_mention_sent_twice_as_message_and_app_mention_is_one_message(client, app):
    event = payload("app_mention")
    as_message = copy.deepcopy(event)
    as_message["event"].update(type="message", channel_type="channel")
    first = deliver(client, as_message)
    second = deliver(client, event)
    assert first.json()["outcome"] != "duplicate"
    assert second.json()["outcome"] == "duplicate"
    chat = Conversation.objects.get()
    assert chat.turns.count() == 1


def test_slack_sending_the_same_event_again_changes_nothing(client, app):
    deliver(client, payload("dm_message"))
    again = deliver(client, payload("dm_message"), headers=None)
    assert again.json()["outcome"] == "duplicate"
    assert Conversation.objects.get().turns.count() == 1


def test_the_mention_is_dropped_from_the_words(client, app):
    inbound, _ = taken(payload("app_mention"))
    assert inbound.text == "What is the hour of the pearl, <@U0LAN0Z89>?"  # not at the start
    inbound, _ = taken(mention(payload("channel_message")))
    assert inbound.text == "Hello World!"


# ---------------------------------------------------------------------------
# What is not taken


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("bot_message_classic", "a bot's message"),
        ("bot_message_app", "a bot's message"),
        ("message_changed", "an edit"),
        ("channel_join", "channel_join"),
    ],
)
def test_bots_edits_and_joins_are_acknowledged_and_kept_as_ignored(client, app, name, why):
    response = deliver(
        client, mention(payload(name)) if name != "message_changed" else payload(name)
    )
    assert response.status_code == 200
    assert response.json()["outcome"] == "ignored"
    assert why in response.json()["reason"]
    assert not Conversation.objects.exists()
    assert InboundRecord.objects.get().outcome == "ignored"


def test_the_bots_own_message_is_never_answered(app):
    body = payload("dm_message")
    body["event"]["user"] = BOT_USER
    asked = slack_inbound(body, account=app)
    assert isinstance(asked, Ignore) and "bot" in asked.reason


def test_an_edit_is_taken_as_new_when_the_account_says_so():
    inbound, _ = taken(payload("message_changed"), edited_messages=EditedMessages.NEW,
                       group_activation=GroupActivation.ALWAYS)  # fmt: skip
    assert inbound.text == "(edited) updated message"
    assert inbound.message_id == "C111:1665102338.901939:edited:1665102362.000000"


def test_in_a_channel_only_a_mention_or_the_bots_thread_is_answered_by_default():
    quiet = slack_inbound(payload("channel_message"), account=ChannelAccount(bot_user_id=BOT_USER))
    assert isinstance(quiet, Ignore) and "only when mentioned" in quiet.reason
    assert taken(mention(payload("channel_message")))[0].text == "Hello World!"
    assert taken(payload("app_mention"))[0].chat_type == "group"
    others_thread = slack_inbound(
        payload("thread_reply"), account=ChannelAccount(bot_user_id=BOT_USER)
    )
    assert isinstance(others_thread, Ignore)
    # A DM needs no mention; an account set to "always" answers every channel message.
    assert taken(payload("dm_message"))[0].chat_type == "dm"
    assert taken(payload("channel_message"), group_activation=GroupActivation.ALWAYS)[0].text


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: b["event"].update(channel=None), "event.channel"),
        (lambda b: b["event"].update(ts=7), "event.ts"),
        (lambda b: b["event"].update(text={"nested": True}), "event.text"),
        (lambda b: b.update(event="hi"), "event"),
    ],
)
def test_an_event_we_cant_read_gets_a_200_refusal_naming_the_field(client, app, change, field):
    body = payload("dm_message")
    change(body)
    response = deliver(client, body)
    assert response.status_code == 200
    assert (response.json()["outcome"], response.json()["field"]) == ("refused", field)
    assert InboundRecord.objects.get().outcome == "refused"


def test_a_body_over_the_limit_is_refused_before_the_signature_is_checked(client, app, settings):
    from chats.limits import LIMITS

    raw = b'{"pad": "' + b"x" * LIMITS.inbound_body_bytes + b'"}'
    response = deliver(client, raw)
    assert response.status_code == 413


# ---------------------------------------------------------------------------
# The answer comes at once; the reply after


def test_the_webhook_answers_before_the_reply_runs(client, app, slack_api):
    Agent.objects.filter(is_default=True).update(engine="echo")
    response = deliver(client, payload("dm_message"))
    assert response.status_code == 200
    turn = Conversation.objects.get().turns.get()
    assert turn.state == TurnState.RUNNING and not turn.entries.filter(role="assistant").exists()
    assert slack_api.calls == []


def test_a_slack_message_is_answered_through_the_outbox_over_loopback(
    transactional_db, client, app, slack_api
):
    Agent.objects.filter(is_default=True).update(engine="echo")
    body = payload("thread_reply")
    body["event"]["parent_user_id"] = BOT_USER
    deliver(client, body)
    drain()
    queued = OutboxMessage.objects.get()
    report = outbox_deliver()
    assert report.sent == [queued.pk]
    [(method, sent, headers)] = slack_api.calls
    assert method == "chat.postMessage"
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert sent == {
        "channel": "C123ABC456",
        "text": "echo: U123ABC456: Is this a thread reply?",
        "thread_ts": "1482960137.003543",
    }
    queued.refresh_from_db()
    assert (queued.state, queued.sent_ids) == (OutboxState.SENT, ["1700000000.000001"])
    assert SentPart.objects.get().platform_message_id == "1700000000.000001"


def test_a_stranger_gets_the_personas_tools_for_other_people_and_the_owner_their_own(
    client, app, owner
):
    deliver(client, payload("dm_message"))
    stranger = Conversation.objects.get()
    assert tool_set_for(stranger).kind == STRANGERS
    OwnerIdentity.objects.create(owner=owner, channel="slack", peer="U999OWNER")
    body = payload("dm_message")
    body["event"].update(user="U999OWNER", ts="1355517600.000001")
    deliver(client, body)
    mine = Conversation.objects.exclude(pk=stranger.pk).get()
    assert tool_set_for(mine).kind == OWNERS


# ---------------------------------------------------------------------------
# The outbox's sender, against the fake


def queued(text="hello", **target) -> OutboxMessage:
    message = outbox_enqueue(
        conversation=None,
        channel="slack",
        account_id="work",
        target={"chat_id": "C111", **target},
        text=text,
    )
    assert message is not None
    return message


def test_slack_saying_slow_down_is_honoured_by_its_retry_after(app, slack_api):
    slack_api.answers = [slow_down(30)]
    message = queued()
    now = timezone.now()
    report = outbox_deliver(now=now)
    message.refresh_from_db()
    assert report.retrying == [message.pk]
    assert "slow down" in message.last_error
    assert message.next_attempt_at == now + dt.timedelta(seconds=30)
    assert outbox_deliver(now=now + dt.timedelta(seconds=29)).sent == []
    assert outbox_deliver(now=now + dt.timedelta(seconds=31)).sent == [message.pk]


def test_a_refusal_retrying_cant_fix_fails_at_once_with_slacks_words(app, slack_api):
    slack_api.answers = [refusal("not_in_channel")]
    message = queued()
    report = outbox_deliver()
    message.refresh_from_db()
    assert report.failed == [message.pk]
    assert (message.state, message.attempts) == (OutboxState.FAILED, 1)
    assert "not_in_channel" in message.last_error


def test_a_refused_token_fails_and_never_shows(app, slack_api):
    slack_api.token = "xoxb-another"
    message = queued()
    outbox_deliver()
    message.refresh_from_db()
    assert message.state == OutboxState.FAILED
    assert "invalid_auth" in message.last_error
    assert TOKEN not in message.last_error


def test_a_transient_refusal_is_retried(app, slack_api):
    slack_api.answers = [refusal("internal_error")]
    message = queued()
    assert outbox_deliver().retrying == [message.pk]


def test_a_long_reply_goes_in_parts_and_too_long_for_slack_is_cut_smaller(app, slack_api):
    message = queued("a" * (TEXT_LIMIT + 10), message_thread_id="1.2")
    slack_api.text_limit = 3000  # Slack's limit turned out lower: the part is cut and resent
    outbox_deliver()
    message.refresh_from_db()
    sizes = [len(body["text"]) for body in slack_api.posted()]
    assert sizes == [TEXT_LIMIT, 2000, 2000, 10]
    assert {body["thread_ts"] for body in slack_api.posted()} == {"1.2"}
    assert (message.state, len(message.sent_ids)) == (OutboxState.SENT, 3)


def test_an_unreachable_slack_is_retried_and_the_token_never_shows(app, settings):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.CONCH_SLACK_API_BASE = f"http://127.0.0.1:{port}/api/"
    message = queued()
    outbox_deliver()
    message.refresh_from_db()
    assert message.state == OutboxState.PENDING
    assert "could not be reached" in message.last_error
    assert TOKEN not in message.last_error


# ---------------------------------------------------------------------------
# Setting up


def test_conch_slack_connects_an_app_and_learns_the_bots_user(owner, slack_api, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{TOKEN}\n{SIGNING_SECRET}\n"))
    out = io.StringIO()
    call_command("conch_slack", "team", "--owner", owner.username, stdout=out, stderr=io.StringIO())
    account = ChannelAccount.objects.get(channel="slack", account_id="team")
    assert (account.bot_user_id, account.secret, account.signing_secret) == (
        BOT_USER,
        TOKEN,
        SIGNING_SECRET,
    )
    assert "/gateway/slack/team" in out.getvalue()
    assert TOKEN not in out.getvalue() and SIGNING_SECRET not in out.getvalue()


@pytest.mark.parametrize(
    ("stdin", "words"),
    [
        ("", "bot token"),
        ("xoxp-user-token\nsecret\n", "not a bot token"),
        (f"{TOKEN}\n\n", "signing secret"),
    ],
)
def test_conch_slack_refuses_what_it_cant_use_and_keeps_nothing(owner, monkeypatch, stdin, words):
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    with pytest.raises(CommandError, match=words):
        call_command("conch_slack", "team", "--owner", owner.username)
    assert not ChannelAccount.objects.exists()


# ---------------------------------------------------------------------------
# The admin


def test_the_admin_never_shows_the_secrets_and_keeps_them_when_not_retyped(
    admin_client, app, slack_api
):
    from django.urls import reverse

    url = reverse("admin:gateway_channelaccount_change", args=[app.pk])
    page = admin_client.get(url).content.decode()
    assert TOKEN not in page and SIGNING_SECRET not in page
    response = admin_client.post(
        url,
        {
            "owner": app.owner_id,
            "channel": "slack",
            "account_id": "work",
            "secret": "",
            "signing_secret": "",
            "public_key": "",
            "platform_id": "",
            "group_activation": GroupActivation.ALWAYS,
            "edited_messages": EditedMessages.IGNORE,
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    app.refresh_from_db()
    assert (app.secret, app.signing_secret, app.group_activation) == (
        TOKEN,
        SIGNING_SECRET,
        GroupActivation.ALWAYS,
    )


# ---------------------------------------------------------------------------
# OpenClaw's own Slack cases (src/slack/monitor/message-handler/
# prepare.thread-session-key.test.ts, replyToMode "off", its default for channels),
# played through our webhook: same messages, the same sessions.


def _openclaw_channel_message(**overrides) -> dict:
    event = {"channel": "C123", "channel_type": "channel", "user": "U1",
             "text": f"<@{BOT_USER}> hello", "ts": "1770408518.451689", "type": "message",
             **overrides}  # fmt: skip
    return {"type": "event_callback", "team_id": "T1", "event": event}


def test_openclaw_keeps_top_level_channel_turns_in_one_session(client, app):
    deliver(client, _openclaw_channel_message(ts="1770408518.451689"))
    deliver(client, _openclaw_channel_message(ts="1770408520.000001"))
    keys = set(Conversation.objects.values_list("session_key", flat=True))
    assert keys == {"agent:main:group:slack:C123"}  # one session, no thread in its key


def test_openclaw_uses_the_parent_thread_ts_for_thread_replies(client, app):
    deliver(
        client,
        _openclaw_channel_message(
            user="U2", text=f"<@{BOT_USER}> reply", ts="1770408522.168859",
            thread_ts="1770408518.451689",
        ),
    )  # fmt: skip
    key = Conversation.objects.get().session_key
    assert key.endswith(":1770408518.451689") and "1770408522.168859" not in key


def test_openclaw_keeps_one_thread_session_across_users_in_the_same_thread(client, app):
    for user, ts in (("U1", "1770408522.168859"), ("U2", "1770408523.168859")):
        deliver(
            client,
            _openclaw_channel_message(
                user=user, text=f"<@{BOT_USER}> in the thread", ts=ts,
                thread_ts="1770408518.451689",
            ),
        )  # fmt: skip
    assert list(Conversation.objects.values_list("session_key", flat=True)) == [
        "agent:main:thread:slack:C123:1770408518.451689"
    ]
    chat = Conversation.objects.get()  # both people's words went to it (the second waits)
    assert (
        InboundRecord.objects.filter(conversation=chat, outcome__in=["started", "queued"]).count()
        == 2
    )
