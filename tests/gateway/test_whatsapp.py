"""WhatsApp (the Cloud API): signed notifications in, the outbox's messages out, over loopback.

Every notification posted here is a file in whatsapp_payloads/ (SOURCES.md says where
each shape comes from), signed as WhatsApp signs it; the fake Graph API
(whatsapp_api.py) answers with the real API's words.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import hmac
import io
import json
import socket
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from chats.gateway.models import (
    Binding,
    ChannelAccount,
    Delivery,
    DmScope,
    InboundRecord,
    OutboxMessage,
    OutboxState,
    OwnerIdentity,
    SentPart,
)
from chats.gateway.outbox import outbox_deliver, outbox_enqueue
from chats.gateway.selectors import gateway_config
from chats.gateway.services import channel_account_secret_rotate
from chats.gateway.whatsapp import (
    CANT_READ,
    GROUPS_NOT_TAKEN,
    SIGNATURE_HEADER,
    Take,
    signature_good,
    whatsapp_inbound,
)
from chats.models import Agent, Conversation, EntryRole, Taint
from chats.runtime.runner import drain
from chats.toolsets import OWNERS, STRANGERS, tool_set_for
from tests.gateway.whatsapp_api import (
    PHONE_NUMBER_ID,
    TOKEN,
    WINDOW_DETAILS,
    FakeGraphApi,
    status_notification,
)

PAYLOADS = Path(__file__).parent / "whatsapp_payloads"
APP_SECRET = "0123456789abcdef-app-secret"
PEER = "972987654321"  # the sender in pywa's recorded webhooks
URL = "/gateway/whatsapp/shop"
HEADER = f"HTTP_{SIGNATURE_HEADER.upper().replace('-', '_')}"


@pytest.fixture
def wa(owner, agent):
    account = ChannelAccount.objects.create(
        owner=owner,
        channel="whatsapp",
        account_id="shop",
        secret=TOKEN,
        signing_secret=APP_SECRET,
        platform_id=PHONE_NUMBER_ID,
    )
    account.verify_token = channel_account_secret_rotate(account=account)
    return account


@pytest.fixture
def graph(settings):
    with FakeGraphApi() as api:
        settings.CONCH_WHATSAPP_API_BASE = api.base
        yield api


@pytest.fixture
def echo(agent):
    Agent.objects.filter(is_default=True).update(engine="echo")


def load(name: str, **message) -> dict:
    """A recorded notification, with any of its first message's fields changed."""
    notification = copy.deepcopy(json.loads((PAYLOADS / f"{name}.json").read_text()))
    if message:
        notification["entry"][0]["changes"][0]["value"]["messages"][0].update(message)
    return notification


def signature(body: bytes, secret: str = APP_SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def post(client, payload, *, sign: str | None = None, url: str = URL, raw: bytes | None = None):
    """POST a notification as WhatsApp does: the raw bytes, signed with the app secret."""
    body = raw if raw is not None else json.dumps(payload).encode()
    headers = {} if sign == "" else {HEADER: sign or signature(body)}
    return client.post(url, body, content_type="application/json", **headers)


def results(response) -> list[dict]:
    assert response.status_code == 200, response.content
    return response.json()["results"]


def person_words(chat: Conversation) -> list[str]:
    return list(
        chat.entries.filter(role=EntryRole.PERSON).order_by("seq").values_list("text", flat=True)
    )


def queued(text="hello", **target) -> OutboxMessage:
    message = outbox_enqueue(
        conversation=None,
        channel="whatsapp",
        account_id="shop",
        target={"chat_id": PEER, **target},
        text=text,
    )
    assert message is not None
    return message


# ---------------------------------------------------------------------------
# The door: the signature and the verify handshake


def test_a_signed_dm_is_routed_into_the_owners_session_keyed_by_dm_scope(client, owner, wa):
    [answer] = results(post(client, load("text")))

    assert answer["outcome"] == "started"
    assert answer["session_key"] == f"agent:main:dm:whatsapp:{PEER}"  # per-channel-peer
    chat = Conversation.objects.get(public_id=answer["chat"])
    assert chat.owner == owner
    assert person_words(chat) == ["Body Text"]
    assert chat.gateway.reply_to == {"chat_id": PEER}
    assert chat.entries.get().data["said_by"] == {"name": "Test Name", "app": "whatsapp"}


@pytest.mark.parametrize(
    "sign",
    ["", "sha256=" + "0" * 64, signature(b"{}"), signature(b"x", secret="another app's secret")],
    ids=["missing", "zeros", "another-body", "another-secret"],
)
def test_a_bad_or_missing_signature_is_refused_before_anything_is_read(client, wa, sign):
    response = post(client, load("text"), sign=sign)

    assert response.status_code == 401
    assert not Conversation.objects.exists()
    assert not InboundRecord.objects.exists()


def test_the_signature_must_be_over_the_raw_bytes_as_sent(client, wa):
    sent = json.dumps(load("text"), indent=1).encode()
    same_json_other_bytes = json.dumps(load("text")).encode()

    assert post(client, None, raw=same_json_other_bytes, sign=signature(sent)).status_code == 401
    assert results(post(client, None, raw=sent))[0]["outcome"] == "started"


def test_a_signature_without_its_sha256_prefix_is_refused(client, wa):
    body = json.dumps(load("text")).encode()
    bare = signature(body).removeprefix("sha256=")
    assert post(client, None, raw=body, sign=bare).status_code == 401
    assert not signature_good(APP_SECRET, body, bare)
    assert not signature_good("", body, signature(body, secret=""))  # no app secret: nothing passes


def test_an_unknown_account_reads_the_same_as_a_bad_signature(client, wa):
    known = post(client, load("text"), sign="sha256=" + "0" * 64)
    unknown = post(client, load("text"), url="/gateway/whatsapp/nobody")
    assert (unknown.status_code, unknown.json()) == (known.status_code, known.json())


def test_the_verify_handshake_answers_the_challenge_as_plain_text(client, wa):
    response = client.get(
        URL,
        {
            "hub.mode": "subscribe",
            "hub.challenge": "1158201444",
            "hub.verify_token": wa.verify_token,
        },
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert response.content == b"1158201444"


@pytest.mark.parametrize(
    ("url", "mode", "token"),
    [
        (URL, "subscribe", "wrong"),
        (URL, "subscribe", ""),
        (URL, "unsubscribe", None),
        ("/gateway/whatsapp/nobody", "subscribe", None),
    ],
    ids=["wrong-token", "no-token", "wrong-mode", "unknown-account"],
)
def test_the_verify_handshake_refuses_anything_else(client, wa, url, mode, token):
    query = {"hub.mode": mode, "hub.challenge": "1158201444"}
    query["hub.verify_token"] = wa.verify_token if token is None else token
    response = client.get(url, query)
    assert response.status_code == 403
    assert b"1158201444" not in response.content


# ---------------------------------------------------------------------------
# Messages, routed as OpenClaw routes them


def test_whatsapp_sending_the_same_message_again_changes_nothing(client, wa):
    first = results(post(client, load("text")))[0]
    again = results(post(client, load("text")))[0]

    assert again["outcome"] == "duplicate"
    assert again["chat"] == first["chat"]
    assert person_words(Conversation.objects.get()) == ["Body Text"]


def test_a_binding_for_the_peer_routes_its_dm_to_that_persona(client, wa, personas):
    # As in OpenClaw, a binding that names no account is the default account's only.
    Binding.objects.create(
        agent=personas["work"], channel="whatsapp", account_id="shop", peer=PEER, peer_kind="direct"
    )
    [answer] = results(post(client, load("text")))
    assert (answer["agent"], answer["session_key"]) == ("work", f"agent:work:dm:whatsapp:{PEER}")


def test_dms_keyed_per_account_name_the_account(client, wa):
    config = gateway_config()
    config.dm_scope = DmScope.PER_ACCOUNT_CHANNEL_PEER
    config.save()
    [answer] = results(post(client, load("text")))
    assert answer["session_key"] == f"agent:main:dm:whatsapp:shop:{PEER}"


def test_a_reply_to_an_unknown_message_says_it_is_a_reply(client, wa):
    [answer] = results(post(client, load("reply")))
    chat = Conversation.objects.get(public_id=answer["chat"])
    assert person_words(chat) == ["(replying to an earlier message) replied text"]


def test_a_reply_to_one_of_our_replies_shows_the_words_it_answers(client, wa):
    ours = queued("The shop opens at nine.")
    SentPart.objects.create(
        message=ours, channel="whatsapp", account_id="shop", platform_message_id="wamid.xyzxyz=="
    )
    asked = whatsapp_inbound(load("reply"), account=wa)[0]
    assert isinstance(asked, Take)
    assert (asked.inbound.in_reply_to_name, asked.inbound.in_reply_to_text) == (
        "Conch",
        "The shop opens at nine.",
    )
    [answer] = results(post(client, load("reply")))
    [words] = person_words(Conversation.objects.get(public_id=answer["chat"]))
    assert "The shop opens at nine." in words
    assert words.endswith("replied text")
    assert "(replying to an earlier message)" not in words


def test_a_group_message_is_ignored_saying_whatsapp_has_no_bot_groups(client, wa):
    [answer] = results(post(client, load("group_message")))

    assert answer == {"outcome": "ignored", "reason": GROUPS_NOT_TAKEN}
    assert not Conversation.objects.exists()
    record = InboundRecord.objects.get()
    assert (record.outcome, record.reason) == ("ignored", GROUPS_NOT_TAKEN)


def test_each_message_of_a_notification_is_taken(client, wa):
    answers = results(post(client, load("two_messages")))
    assert [a["outcome"] for a in answers] == ["started", "queued"]
    assert answers[0]["chat"] == answers[1]["chat"]


def test_a_malformed_message_is_refused_naming_its_field_and_the_rest_are_taken(client, wa):
    notification = load("two_messages")
    del notification["entry"][0]["changes"][0]["value"]["messages"][0]["from"]
    refused, taken = results(post(client, notification))

    assert refused == {
        "outcome": "refused",
        "error": "is required.",
        "field": "entry.0.changes.0.value.messages.0.from",
    }
    assert taken["outcome"] == "started"
    record = InboundRecord.objects.get(message_id="wamid.xyzxyz")
    assert record.outcome == "refused"


def test_a_message_for_another_phone_number_is_ignored(client, wa):
    ChannelAccount.objects.filter(pk=wa.pk).update(platform_id="5550001111")
    [answer] = results(post(client, load("text")))
    assert answer["outcome"] == "ignored"
    assert "5550001111" in answer["reason"] and PHONE_NUMBER_ID in answer["reason"]
    assert not Conversation.objects.exists()


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"{not json", "body"),
        (b"[]", "body"),
        (json.dumps({"object": "page", "entry": []}).encode(), "object"),
        (json.dumps({"object": "whatsapp_business_account"}).encode(), "entry"),
    ],
)
def test_a_notification_we_cant_read_gets_a_200_refusal_naming_the_field(client, wa, raw, field):
    response = post(client, None, raw=raw)
    assert response.status_code == 200
    assert (response.json()["outcome"], response.json()["field"]) == ("refused", field)
    assert InboundRecord.objects.get().outcome == "refused"


def test_nul_in_the_words_is_refused_naming_them(client, wa):
    notification = load("text")
    notification["entry"][0]["changes"][0]["value"]["messages"][0]["text"]["body"] = "a\x00b"
    [answer] = results(post(client, notification))
    assert answer["field"] == "entry.0.changes.0.value.messages.0.text.body"


def test_other_notifications_are_acknowledged_and_ignored(client, wa):
    [answer] = results(post(client, load("account_update")))
    assert answer["outcome"] == "ignored"
    [answer] = results(post(client, load("errors_value")))
    assert answer["outcome"] == "ignored" and "130429" in answer["reason"]


# ---------------------------------------------------------------------------
# Media, reactions, edits


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("video_caption", "(forwarded) (sent a video) caption"),
        ("document_caption", "(forwarded) (sent a document, filename.pdf) caption"),
        (
            "location",
            "(forwarded) (shared a location: Facebook HQ; 1 Hacker Way, Menlo Park, CA 94025; "
            "37.4611978, -122.2164385)",
        ),
    ],
)
def test_media_with_a_caption_is_taken_as_its_caption_with_a_note(client, wa, name, words):
    [answer] = results(post(client, load(name)))
    assert person_words(Conversation.objects.get(public_id=answer["chat"])) == [words]


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("image_no_caption", "a photo"),
        ("voice", "a voice message"),
        ("sticker", "a sticker"),
        ("unsupported", "this kind of message (WhatsApp itself couldn't pass it on)"),
    ],
)
def test_a_message_without_words_is_answered_that_conch_cant_read_it(client, wa, graph, name, kind):
    [answer] = results(post(client, load(name)))

    assert (answer["outcome"], answer["told"]) == ("ignored", True)
    assert not Conversation.objects.exists()
    record = InboundRecord.objects.get()
    assert (record.outcome, record.sender) == ("ignored", PEER)
    assert kind in record.reason
    outbox_deliver()
    [sent] = graph.sent()
    assert sent["to"] == PEER
    assert sent["text"]["body"] == CANT_READ.format(kind=kind)


def test_a_wordless_message_sent_again_is_not_answered_twice(client, wa):
    post(client, load("image_no_caption"))
    again = results(post(client, load("image_no_caption")))[0]
    assert again["outcome"] == "duplicate"
    assert OutboxMessage.objects.count() == 1


def test_many_wordless_messages_are_answered_once_in_a_few_minutes(client, wa):
    for n in range(3):
        post(client, load("image_no_caption", id=f"wamid.photo{n}"))
    assert OutboxMessage.objects.count() == 1
    assert InboundRecord.objects.count() == 3  # each kept in the admin, with why


def test_a_reaction_is_ignored_with_its_reason(client, wa):
    [answer] = results(post(client, load("reaction")))
    assert answer["outcome"] == "ignored"
    assert answer["reason"].startswith("a reaction")
    assert not OutboxMessage.objects.exists()
    assert not Conversation.objects.exists()


def test_whatsapps_own_notices_are_ignored(client, wa):
    [answer] = results(post(client, load("system_number_change")))
    assert answer["outcome"] == "ignored"
    assert "changed from 972987654321" in answer["reason"]


def test_an_edit_is_ignored_unless_the_account_takes_edits_as_new(client, wa):
    # The recorded edit is to Meta's example number.
    ChannelAccount.objects.filter(pk=wa.pk).update(platform_id="106540352242922")
    [ignored] = results(post(client, load("edited_message")))
    assert ignored == {
        "outcome": "ignored",
        "reason": "an edit of a message already taken (this account ignores edits)",
    }

    ChannelAccount.objects.filter(pk=wa.pk).update(edited_messages="new")
    notification = load("edited_message", id="wamid.edit-2")
    [taken] = results(post(client, notification))
    [words] = person_words(Conversation.objects.get(public_id=taken["chat"]))
    assert words == "(edited) (sent a photo) Updated image caption"


# ---------------------------------------------------------------------------
# A stranger gets the persona's tools for other people


def test_a_stranger_on_whatsapp_gets_the_personas_tools_for_other_people(client, owner, wa):
    [answer] = results(post(client, load("text")))
    chat = Conversation.objects.get(public_id=answer["chat"])
    assert chat.taint == Taint.PERSON
    assert tool_set_for(chat).kind == STRANGERS


def test_the_owners_own_number_gets_the_owners_tools(client, owner, wa):
    OwnerIdentity.objects.create(owner=owner, channel="whatsapp", peer=PEER)
    [answer] = results(post(client, load("text")))
    chat = Conversation.objects.get(public_id=answer["chat"])
    assert chat.taint == Taint.NONE
    assert tool_set_for(chat).kind == OWNERS


# ---------------------------------------------------------------------------
# End to end over loopback: notification → session → reply → outbox → the fake


def test_a_whatsapp_message_is_answered_through_the_outbox_over_loopback(
    transactional_db, client, wa, graph, echo
):
    [answer] = results(post(client, load("text")))
    drain()  # the reply runs and ends; its end hook queues the words for WhatsApp

    message = OutboxMessage.objects.get()
    assert (message.channel, message.account_id, message.target, message.text) == (
        "whatsapp",
        "shop",
        {"chat_id": PEER},
        "echo: Body Text",
    )
    report = outbox_deliver()
    assert graph.called.wait(10), "the fake Graph API was never called"
    assert report.sent == [message.pk]
    [(method, path, auth, body)] = graph.calls
    assert (method, path, auth) == ("POST", f"/{PHONE_NUMBER_ID}/messages", f"Bearer {TOKEN}")
    assert body == {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": PEER,
        "type": "text",
        "text": {"preview_url": False, "body": "echo: Body Text"},
    }
    message.refresh_from_db()
    assert (message.state, message.delivery) == (OutboxState.SENT, Delivery.SENT)
    assert message.sent_ids == ["wamid.HBgM00000001"]


def test_a_reply_to_a_message_points_at_it(wa, graph):
    queued("yes", reply_to_message_id="wamid.theirs")
    outbox_deliver()
    [body] = graph.sent()
    assert body["context"] == {"message_id": "wamid.theirs"}


# ---------------------------------------------------------------------------
# Statuses: shown on the reply, never moving back


def deliver_one(graph) -> OutboxMessage:
    message = queued()
    outbox_deliver()
    message.refresh_from_db()
    assert message.state == OutboxState.SENT
    return message


def report(client, message: OutboxMessage, status: str, errors=None) -> dict:
    notification = status_notification(message.sent_ids[0], status, recipient=PEER, errors=errors)
    [answer] = results(post(client, notification))
    message.refresh_from_db()
    return answer


def test_statuses_move_a_reply_on_sent_delivered_read(client, wa, graph):
    message = deliver_one(graph)
    seen = []
    for status in ("sent", "delivered", "read"):
        report(client, message, status)
        seen.append(message.delivery)
    assert seen == [Delivery.SENT, Delivery.DELIVERED, Delivery.READ]


def test_a_status_that_comes_late_never_moves_a_reply_back(client, wa, graph):
    message = deliver_one(graph)
    report(client, message, "read")
    answer = report(client, message, "delivered")  # it came after "read"
    assert answer == {"outcome": "status", "status": "delivered", "delivery": "read"}
    assert message.delivery == Delivery.READ


def test_a_failed_status_keeps_whatsapps_words_and_stays_failed(client, wa, graph):
    message = deliver_one(graph)
    errors = load("status_failed")["entry"][0]["changes"][0]["value"]["statuses"][0]["errors"]
    report(client, message, "failed", errors=errors)
    assert message.delivery == Delivery.FAILED
    assert "User's number is part of an experiment" in message.delivery_error
    assert "this user's phone number is part of an experiment" in message.delivery_error
    report(client, message, "read")
    assert message.delivery == Delivery.FAILED


def test_a_status_for_a_message_that_isnt_ours_is_ignored(client, wa):
    [answer] = results(post(client, load("status_delivered")))
    assert answer["outcome"] == "ignored"


# ---------------------------------------------------------------------------
# The 24-hour window


def test_a_reply_refused_for_the_closed_window_is_kept_as_failed_with_why(wa, graph):
    graph.closed.add(PEER)
    message = queued()
    sent = outbox_deliver()

    message.refresh_from_db()
    assert sent.failed == [message.pk]
    assert (message.state, message.attempts) == (OutboxState.FAILED, 1)  # never retried
    assert "24-hour window closed" in message.last_error
    assert f"{PEER} must message first" in message.last_error
    assert WINDOW_DETAILS in message.last_error


def test_a_closed_window_reported_later_keeps_the_reply_failed_with_why(client, wa, graph):
    graph.closed.add(PEER)
    graph.window_later = True
    message = deliver_one(graph)  # WhatsApp took it…
    [notification] = graph.notifications  # …and then says it failed
    [answer] = results(post(client, notification))

    message.refresh_from_db()
    assert answer["delivery"] == Delivery.FAILED
    assert message.delivery == Delivery.FAILED
    assert "24-hour window closed" in message.delivery_error
    assert "must message first" in message.delivery_error


def test_a_recorded_window_failure_reads_the_same(client, wa, graph):
    message = deliver_one(graph)
    notification = load("status_failed_window")
    notification["entry"][0]["changes"][0]["value"]["statuses"][0]["id"] = message.sent_ids[0]
    results(post(client, notification))
    message.refresh_from_db()
    assert "24-hour window closed" in message.delivery_error


# ---------------------------------------------------------------------------
# Slowing down, refusals, long replies


@pytest.mark.parametrize("limit", ["throughput", "pair"])
def test_whatsapp_asking_to_slow_down_is_retried_with_backoff(wa, graph, limit):
    if limit == "throughput":
        graph.throttled = 1
    else:
        graph.pair_limited.add(PEER)
    message = queued()
    now = timezone.now()
    first = outbox_deliver(now=now)

    message.refresh_from_db()
    assert first.retrying == [message.pk]
    assert (message.state, message.attempts) == (OutboxState.PENDING, 1)
    assert "slow down" in message.last_error
    assert message.next_attempt_at == now + dt.timedelta(seconds=5)
    assert outbox_deliver(now=now + dt.timedelta(seconds=6)).sent == [message.pk]


def test_a_retry_after_is_honoured(wa, graph):
    graph.answers = [
        (429, {"error": {"message": "Too many calls", "code": 4}}, {"Retry-After": "30"})
    ]
    message = queued()
    now = timezone.now()
    outbox_deliver(now=now)
    message.refresh_from_db()
    assert message.next_attempt_at == now + dt.timedelta(seconds=30)


def test_a_refused_access_token_fails_at_once_and_never_shows(wa, graph):
    ChannelAccount.objects.filter(pk=wa.pk).update(secret="EAAG-an-expired-token-SECRET")
    message = queued()
    outbox_deliver()

    message.refresh_from_db()
    assert message.state == OutboxState.FAILED
    assert "access token" in message.last_error and "refused" in message.last_error
    assert "EAAG-an-expired-token-SECRET" not in message.last_error
    assert TOKEN not in message.last_error


def test_an_unreachable_api_is_retried_and_the_token_never_shows(wa, settings):
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.CONCH_WHATSAPP_API_BASE = f"http://127.0.0.1:{port}/v21.0"
    message = queued()
    outbox_deliver()
    message.refresh_from_db()
    assert message.state == OutboxState.PENDING
    assert "could not be reached" in message.last_error
    assert TOKEN not in message.last_error


def test_an_account_without_its_phone_number_id_fails_saying_so(wa, graph):
    ChannelAccount.objects.filter(pk=wa.pk).update(platform_id="")
    message = queued()
    outbox_deliver()
    message.refresh_from_db()
    assert message.state == OutboxState.FAILED
    assert "phone number id" in message.last_error
    assert graph.calls == []


def test_a_long_reply_goes_in_parts_and_a_retry_sends_only_the_rest(wa, graph):
    graph.answers = [
        (200, {"messages": [{"id": "wamid.part1"}]}),
        (500, {"error": {"message": "An unknown error occurred", "code": 1}}),
    ]
    message = queued(text="x" * 5000)
    now = timezone.now()
    outbox_deliver(now=now)
    message.refresh_from_db()
    assert (message.parts_sent, message.state) == (1, OutboxState.PENDING)
    outbox_deliver(now=now + dt.timedelta(minutes=1))
    message.refresh_from_db()
    sent = [len(body["text"]["body"]) for _, _, _, body in graph.calls]
    assert sent == [4096, 904, 904]  # the first part once, the second until it went
    assert message.state == OutboxState.SENT
    assert message.sent_ids == ["wamid.part1", "wamid.HBgM00000001"]


def test_a_part_whatsapp_finds_too_long_is_cut_smaller_and_every_piece_is_kept(wa, graph):
    graph.text_limit = 60
    message = queued(text="y" * 100)
    outbox_deliver()
    message.refresh_from_db()
    assert message.state == OutboxState.SENT
    assert [len(body["text"]["body"]) for body in graph.sent()] == [50, 50]
    assert len(message.sent_ids) == 2
    assert SentPart.objects.filter(message=message).count() == 2


# ---------------------------------------------------------------------------
# Setting up: manage.py conch_whatsapp


def setup(monkeypatch, *args, stdin=f"{TOKEN}\n{APP_SECRET}\n"):
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    out, err = io.StringIO(), io.StringIO()
    call_command("conch_whatsapp", *args, stdout=out, stderr=err)
    return out.getvalue().strip(), err.getvalue()


def test_setting_up_makes_the_account_and_shows_the_verify_token_once(
    client, owner, agent, graph, monkeypatch
):
    verify_token, said = setup(
        monkeypatch, "shop", "--phone-number-id", PHONE_NUMBER_ID, "--owner", owner.username
    )

    account = ChannelAccount.objects.get(channel="whatsapp", account_id="shop")
    assert (account.owner, account.platform_id) == (owner, PHONE_NUMBER_ID)
    assert (account.secret, account.signing_secret) == (TOKEN, APP_SECRET)
    assert "+972 12-345-6789 (Conch Test)" in said
    assert "/gateway/whatsapp/shop" in said
    assert verify_token not in said
    handshake = {"hub.mode": "subscribe", "hub.challenge": "42", "hub.verify_token": verify_token}
    assert client.get(URL, handshake).content == b"42"
    assert results(post(client, load("text")))[0]["outcome"] == "started"


def test_setting_up_again_changes_the_secrets_and_the_verify_token(
    owner, agent, graph, monkeypatch
):
    first, _ = setup(monkeypatch, "shop", "--phone-number-id", PHONE_NUMBER_ID)
    second, _ = setup(
        monkeypatch, "shop", "--phone-number-id", PHONE_NUMBER_ID, stdin=f"{TOKEN}\nnew-secret\n"
    )
    account = ChannelAccount.objects.get(account_id="shop")
    assert first != second
    assert account.signing_secret == "new-secret"
    assert account.owner == owner
    assert ChannelAccount.objects.count() == 1


def test_a_token_whatsapp_refuses_is_said_at_setup(owner, agent, graph, monkeypatch):
    refused = "EAAG-refused-token-XYZ"
    _, said = setup(
        monkeypatch,
        "shop",
        "--phone-number-id",
        PHONE_NUMBER_ID,
        stdin=f"{refused}\n{APP_SECRET}\n",
    )
    assert "didn't say which number" in said and "access token" in said
    assert refused not in said


@pytest.mark.parametrize(
    ("args", "stdin", "words"),
    [
        (["shop", "--phone-number-id", "+1 555 0100"], None, "all digits"),
        (["Shop Front", "--phone-number-id", PHONE_NUMBER_ID], None, "lowercase"),
        (["shop", "--phone-number-id", PHONE_NUMBER_ID], f"{TOKEN}\n", "app secret"),
        (["shop", "--phone-number-id", PHONE_NUMBER_ID], "", "access token"),
    ],
    ids=["phone-number-id", "account-name", "no-app-secret", "nothing"],
)
def test_setting_up_refuses_bad_input_clearly(owner, agent, monkeypatch, args, stdin, words):
    with pytest.raises(CommandError, match=words):
        setup(monkeypatch, *args, stdin=stdin if stdin is not None else f"{TOKEN}\n{APP_SECRET}\n")
    assert not ChannelAccount.objects.exists()


def test_one_number_is_one_account(owner, agent, wa, graph, monkeypatch):
    with pytest.raises(CommandError, match="already the WhatsApp account 'shop'"):
        setup(monkeypatch, "other", "--phone-number-id", PHONE_NUMBER_ID)
