"""POST /gateway/inbound and manage.py conch_inbound: token, idempotency, errors, which chats are yours."""

from __future__ import annotations

import io
import json

import pytest
from channels.testing import HttpCommunicator
from django.core.management import CommandError, call_command
from django.urls import reverse

from chats.gateway.inbound import (
    ERR_ACCOUNT_STAR,
    ERR_CHANNEL,
    ERR_CHAT_TYPE,
    ERR_GROUP_ID,
    ERR_ID_TYPE,
    ERR_MESSAGE_ID,
    ERR_NO_WORDS,
    ERR_NOT_AN_OBJECT,
    ERR_NUL,
    ERR_REQUIRED,
    ERR_ROLES,
    ERR_ROLES_NEED_GUILD,
    ERR_SURROGATE,
    ERR_TEXT,
    ERR_TOO_BIG,
    ERR_TOO_DEEP,
    ERR_UNKNOWN_FIELD,
)
from chats.gateway.models import GatewayToken, InboundRecord, OwnerIdentity, SessionOrigin
from chats.gateway.services import gateway_token_rotate
from chats.limits import LIMITS
from chats.models import (
    Conversation,
    Entry,
    EntryRole,
    Lane,
    Mode,
    Origin,
    QueuedInput,
    Taint,
    Turn,
)
from chats.runtime.runner import drain
from conch.asgi import application

URL = "/gateway/inbound"


def body(**fields):
    data = {
        "channel": "telegram",
        "account_id": "bot1",
        "chat_type": "dm",
        "peer": "alice",
        "message_id": "1",
        "text": "hello",
    }
    data.update(fields)
    return {k: v for k, v in data.items() if v is not None}


def post(client, data, token=None, **headers):
    if token:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    raw = data if isinstance(data, str | bytes) else json.dumps(data)
    return client.post(URL, raw, content_type="application/json", **headers)


def test_the_url_is_gateway_inbound():
    assert reverse("gateway:inbound") == URL


def test_without_a_token_it_is_refused(client, agent):
    response = post(client, body())
    assert response.status_code == 401
    assert "Bearer" in response["WWW-Authenticate"]
    assert not Conversation.objects.exists()


def test_a_wrong_token_is_refused(client, agent, gateway_token):
    response = post(client, body(), token=gateway_token + "x")
    assert response.status_code == 401
    assert post(client, body(), token="conch_gw_made_up").status_code == 401
    assert not Conversation.objects.exists()


def test_the_browser_session_is_not_a_gateway_token(client, owner, agent, gateway_token):
    client.force_login(owner)
    assert post(client, body()).status_code == 401


def test_a_rotated_token_stops_working_and_the_new_one_works(client, owner, agent, gateway_token):
    newer = gateway_token_rotate(owner=owner)
    assert post(client, body(message_id="a"), token=gateway_token).status_code == 401
    assert post(client, body(message_id="b"), token=newer).status_code == 202


def test_only_the_tokens_digest_is_kept(gateway_token):
    stored = GatewayToken.objects.get()
    assert gateway_token not in stored.digest
    assert len(stored.digest) == 64


def test_only_post_is_taken(client, agent, gateway_token):
    response = client.get(URL, HTTP_AUTHORIZATION=f"Bearer {gateway_token}")
    assert response.status_code == 405


def test_a_message_lands_in_its_session_and_starts_a_reply(client, owner, agent, gateway_token):
    response = post(client, body(text="what's up"), token=gateway_token)
    assert response.status_code == 202
    answer = response.json()
    assert answer["outcome"] == "started"
    assert answer["session_key"] == "agent:main:dm:telegram:alice"
    assert answer["rule"].startswith("default")
    chat = Conversation.objects.get(public_id=answer["chat"])
    assert (chat.owner, chat.agent, chat.session_key) == (owner, agent, answer["session_key"])
    assert chat.folder == agent.workspace  # the persona's workspace
    assert chat.entries.get().text == "what's up"
    assert chat.turns.get().started_by == "person"


def test_the_same_message_twice_is_taken_in_once(client, agent, gateway_token):
    first = post(client, body(message_id="42"), token=gateway_token)
    again = post(client, body(message_id="42"), token=gateway_token)
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["outcome"] == "duplicate"
    assert again.json()["chat"] == first.json()["chat"]
    assert Entry.objects.count() == 1
    assert InboundRecord.objects.count() == 1


def test_the_same_message_id_on_another_account_or_channel_is_another_message(
    client, agent, gateway_token
):
    post(client, body(message_id="42"), token=gateway_token)
    other_account = post(client, body(message_id="42", account_id="bot2"), token=gateway_token)
    other_channel = post(client, body(message_id="42", channel="slack"), token=gateway_token)
    # per-channel-peer: bot2's alice shares the session (and queues); slack's alice doesn't
    assert other_account.json()["outcome"] == "queued"
    assert other_channel.json()["outcome"] == "started"
    assert InboundRecord.objects.count() == 3


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ("not json", "body"),
        ([1, 2], "body"),
        (body(channel=None), "channel"),
        (body(channel="Tele gram!"), "channel"),
        (body(chat_type="email"), "chat_type"),
        (body(chat_type=None), "chat_type"),
        (body(peer=None), "peer"),
        (body(peer=["alice"]), "peer"),
        (body(message_id=None), "message_id"),
        (body(text=None), "text"),
        (body(text="   "), "text"),
        (body(text="x" * 40_000), "text"),
        (body(chat_type="group"), "group_id"),
        (body(chat_type="thread", group_id="g"), "thread_id"),
        (body(chat_type="cron"), "job_id"),
        (body(member_roles="mod", guild_id="G"), "member_roles"),
        (body(member_roles=["mod"]), "member_roles"),
        (body(member_roles=["mo\x07d"], guild_id="G"), "member_roles"),
        (body(account_id="*"), "account_id"),
        (body(surprise=1), "surprise"),
        (body(surprise=1, another=2, text=None), "another"),  # unknown fields first, by name
        (body(channel=""), "channel"),
        (body(peer=True), "peer"),
        (body(peer=1.5), "peer"),
        (body(peer="x" * 129), "peer"),
        (body(peer="al\x01ice"), "peer"),
        (body(message_id="x" * 201), "message_id"),
        (body(message_id="   "), "message_id"),
        (body(member_roles=[True], guild_id="G"), "member_roles"),
        (body(member_roles=["x" * 129], guild_id="G"), "member_roles"),
        (body(member_roles=list(range(257)), guild_id="G"), "member_roles"),
        (body(chat_type="thread", thread_id="t"), "parent_peer"),
    ],
)
def test_a_malformed_body_gets_a_400_naming_the_field(client, agent, gateway_token, data, field):
    response = post(client, data, token=gateway_token)
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert not Conversation.objects.exists()
    assert not InboundRecord.objects.exists()


@pytest.mark.parametrize(
    ("data", "answer"),
    [
        ([1, 2], {"field": "body", "error": ERR_NOT_AN_OBJECT}),
        (body(surprise=1), {"field": "surprise", "error": ERR_UNKNOWN_FIELD}),
        (body(channel="Tele gram!"), {"field": "channel", "error": ERR_CHANNEL}),
        (body(chat_type="email"), {"field": "chat_type", "error": ERR_CHAT_TYPE}),
        (body(chat_type=None), {"field": "chat_type", "error": ERR_REQUIRED}),
        (body(peer=["alice"]), {"field": "peer", "error": ERR_ID_TYPE}),
        (body(peer="x" * 129), {"field": "peer", "error": "is at most 128 characters."}),
        (body(message_id=None), {"field": "message_id", "error": ERR_MESSAGE_ID}),
        (body(text=7), {"field": "text", "error": ERR_TEXT}),
        (body(text="   "), {"field": "text", "error": ERR_NO_WORDS}),
        (body(text="x" * 40_000), {"field": "text", "error": "is at most 32000 characters."}),
        (body(member_roles="mod", guild_id="G"), {"field": "member_roles", "error": ERR_ROLES}),
        (body(member_roles=["m"]), {"field": "member_roles", "error": ERR_ROLES_NEED_GUILD}),
        (body(chat_type="group"), {"field": "group_id", "error": ERR_GROUP_ID}),
        (body(account_id="*"), {"field": "account_id", "error": ERR_ACCOUNT_STAR}),
    ],
)
def test_a_400_says_what_is_wrong_in_the_gateways_own_words(
    client, agent, gateway_token, data, answer
):
    response = post(client, data, token=gateway_token)
    assert (response.status_code, response.json()) == (400, answer)


def test_ids_may_be_whole_numbers_and_roles_are_kept_once_each(client, agent, gateway_token):
    from chats.gateway.inbound import inbound_parse

    message = inbound_parse(
        body(peer=42, message_id=7, guild_id=9, member_roles=[" mod", "admin", 3, "mod", ""])
    )
    assert (message.peer, message.message_id, message.guild_id) == ("42", "7", "9")
    assert message.member_roles == ("3", "admin", "mod")
    assert message.account_id == "bot1"
    assert inbound_parse(body(account_id=None)).account_id == "default"


# ---------------------------------------------------------------------------
# Bodies built to break the parser or the database get a 4xx naming the field


def nested(depth: int) -> str:
    """A body whose text field sits under ``depth`` levels of lists."""
    return json.dumps(body() | {"text": "@"}).replace('"@"', "[" * depth + "1" + "]" * depth)


@pytest.mark.parametrize(
    "depth", [LIMITS.inbound_depth_levels, 100_000]
)  # 100,000: a RecursionError in json
def test_a_body_nested_too_deeply_gets_a_400_naming_the_body(client, agent, gateway_token, depth):
    response = post(client, nested(depth), token=gateway_token)
    assert response.status_code == 400
    assert response.json() == {"error": ERR_TOO_DEEP, "field": "body"}
    assert not InboundRecord.objects.exists()


def test_a_body_nested_to_the_limit_is_judged_on_its_fields(client, agent, gateway_token):
    response = post(
        client, nested(LIMITS.inbound_depth_levels - 1), token=gateway_token
    )  # the body is one level
    assert (response.status_code, response.json()["field"]) == (400, "text")


@pytest.mark.parametrize("field", ["text", "peer", "message_id", "group_id"])
@pytest.mark.parametrize("surrogate", ["\\ud800", "\\udfff", "a\\udc80b"])
def test_a_lone_surrogate_gets_a_400_naming_its_field(
    client, agent, gateway_token, field, surrogate
):
    data = body(chat_type="group", group_id="g") | {field: "@"}
    raw = json.dumps(data).replace('"@"', f'"{surrogate}"')  # the escape JSON allows
    response = post(client, raw, token=gateway_token)
    assert response.status_code == 400
    assert response.json() == {"error": ERR_SURROGATE, "field": field}
    assert not Conversation.objects.exists()


def test_a_lone_surrogate_among_the_roles_gets_a_400_naming_them(client, agent, gateway_token):
    raw = json.dumps(body(guild_id="G", member_roles=["@"])).replace('"@"', '"\\ud800"')
    response = post(client, raw, token=gateway_token)
    assert (response.status_code, response.json()["field"]) == (400, "member_roles")


def test_a_surrogate_pair_is_one_character_and_welcome(client, agent, gateway_token):
    raw = json.dumps(body(text="@")).replace('"@"', '"shell \\ud83d\\udc1a"')
    assert post(client, raw, token=gateway_token).status_code == 202
    assert Entry.objects.get(role=EntryRole.PERSON).text == "shell \U0001f41a"


@pytest.mark.parametrize("text", ["\x00", "before\x00after"])
def test_nul_in_the_text_gets_a_400_naming_the_text(client, agent, gateway_token, text):
    """PostgreSQL's text can't hold NUL: every database gives the same answer, before any write."""
    response = post(client, body(text=text), token=gateway_token)
    assert response.status_code == 400
    assert response.json() == {"error": ERR_NUL, "field": "text"}
    assert not Conversation.objects.exists()
    assert not InboundRecord.objects.exists()


def test_a_body_over_the_limit_gets_a_413_naming_the_body(client, agent, gateway_token):
    raw = json.dumps(body(text="x" * (10 * 1024 * 1024)))  # 10 MB
    response = post(client, raw, token=gateway_token)
    assert response.status_code == 413
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"error": ERR_TOO_BIG, "field": "body"}
    assert not InboundRecord.objects.exists()


def test_a_body_just_under_the_limit_is_judged_on_its_fields(client, agent, gateway_token):
    raw = json.dumps(body(text="x"))
    raw = raw[:-1] + " " * (LIMITS.inbound_body_bytes - len(raw)) + "}"  # whitespace is still JSON
    assert len(raw) == LIMITS.inbound_body_bytes
    assert post(client, raw, token=gateway_token).status_code == 202


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "length",
    [None, b"20"],
    ids=["chunked-with-no-length", "a-length-that-lies"],
)
async def test_a_body_with_no_honest_length_is_cut_off_at_the_limit(owner, agent, length):
    """Over the real ASGI path: the read itself stops past the limit, whatever was declared."""
    from channels.db import database_sync_to_async

    token = await database_sync_to_async(gateway_token_rotate)(owner=owner)
    headers = [
        (b"host", b"127.0.0.1"),
        (b"content-type", b"application/json"),
        (b"authorization", f"Bearer {token}".encode()),
    ]
    if length is not None:
        headers.append((b"content-length", length))
    raw = json.dumps(body(text="x" * (2 * LIMITS.inbound_body_bytes))).encode()
    communicator = HttpCommunicator(application, "POST", URL, body=raw, headers=headers)
    response = await communicator.get_response(timeout=10)
    assert response["status"] == 413
    assert json.loads(response["body"]) == {"error": ERR_TOO_BIG, "field": "body"}


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(
    client, agent, gateway_token
):
    response = client.generic(
        "POST",
        URL,
        json.dumps(body()),  # small: only the declared length says otherwise
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {gateway_token}",
        CONTENT_LENGTH=str(LIMITS.inbound_body_bytes + 1),
    )
    assert response.status_code == 413
    assert response.json() == {"error": ERR_TOO_BIG, "field": "body"}
    assert not InboundRecord.objects.exists()


def test_a_content_length_that_is_not_a_number_gets_a_400(client, agent, gateway_token):
    response = client.generic(
        "POST",
        URL,
        json.dumps(body()),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {gateway_token}",
        CONTENT_LENGTH="lots",
    )
    assert (response.status_code, response.json()["field"]) == (400, "body")


def test_a_message_while_a_reply_runs_is_queued_not_lost(
    client, agent, gateway_token, django_capture_on_commit_callbacks
):
    first = post(client, body(message_id="1", text="one"), token=gateway_token)
    second = post(client, body(message_id="2", text="two"), token=gateway_token)
    assert second.json()["outcome"] == "queued"
    assert second.json()["chat"] == first.json()["chat"]
    assert QueuedInput.objects.get().text == "two"
    with django_capture_on_commit_callbacks(execute=True):
        drain()
    drain()
    chat = Conversation.objects.get()
    assert chat.turns.count() == 2
    assert list(chat.entries.filter(role=EntryRole.PERSON).values_list("text", flat=True)) == [
        "one",
        "two",
    ]


def test_the_owners_own_dm_is_their_own_chat_from_a_chat_app(client, owner, agent, gateway_token):
    OwnerIdentity.objects.create(owner=owner, channel="telegram", peer="me")
    answer = post(client, body(peer="me"), token=gateway_token).json()
    chat = Conversation.objects.get(public_id=answer["chat"])
    assert (chat.origin, chat.origin_channel, chat.taint, chat.mode) == (
        Origin.CHAT_APP,
        "telegram",
        Taint.NONE,
        Mode.AUTO,
    )


def test_a_dm_from_anyone_else_is_a_chat_with_someone_elses_words(
    client, owner, agent, gateway_token
):
    OwnerIdentity.objects.create(owner=owner, channel="telegram", peer="me")
    answer = post(client, body(peer="stranger"), token=gateway_token).json()
    chat = Conversation.objects.get(public_id=answer["chat"])
    assert (chat.origin, chat.taint) == (Origin.CHAT_APP, Taint.PERSON)
    assert chat.mode == Mode.ASK  # someone else's words never write without the owner's OK


def test_a_group_is_someone_elses_words_even_when_the_owner_speaks(
    client, owner, agent, gateway_token
):
    OwnerIdentity.objects.create(owner=owner, channel="telegram", peer="me")
    answer = post(
        client, body(peer="me", chat_type="group", group_id="family"), token=gateway_token
    ).json()
    chat = Conversation.objects.get(public_id=answer["chat"])
    assert chat.taint == Taint.PERSON
    assert chat.entries.get().text == "me: hello"  # several people talk here: it says who


def test_a_shared_dm_that_a_stranger_joins_becomes_someone_elses_words(
    client, owner, agent, gateway_token
):
    from chats.gateway.models import DmScope
    from chats.gateway.selectors import gateway_config

    config = gateway_config()
    config.dm_scope = DmScope.SHARED
    config.save()
    OwnerIdentity.objects.create(owner=owner, channel="telegram", peer="me")
    mine = post(client, body(peer="me", message_id="1"), token=gateway_token).json()
    assert Conversation.objects.get(public_id=mine["chat"]).taint == Taint.NONE
    theirs = post(client, body(peer="bob", message_id="2"), token=gateway_token).json()
    assert theirs["chat"] == mine["chat"]
    assert theirs["shared_dm"] is True  # the leak, flagged
    shared = Conversation.objects.get(public_id=mine["chat"])
    assert shared.taint == Taint.PERSON
    assert shared.mode == Mode.ASK  # a stranger's words now in it: writes wait for your OK


def test_a_cron_run_is_a_routine_on_the_cron_lane(client, agent, gateway_token):
    answer = post(
        client,
        body(channel="cron", chat_type="cron", job_id="mail", peer=None, message_id="run-1"),
        token=gateway_token,
    ).json()
    chat = Conversation.objects.get(public_id=answer["chat"])
    assert (chat.origin, chat.taint) == (Origin.ROUTINE, Taint.NONE)
    assert Turn.objects.get(conversation=chat).lane == Lane.CRON
    assert SessionOrigin.objects.get(pk=chat.pk).job_id == "mail"


# ---------------------------------------------------------------------------
# manage.py conch_inbound


def run_inbound(*args, stdin=None):
    out = io.StringIO()
    if stdin is not None:
        import sys

        real = sys.stdin
        sys.stdin = io.StringIO(stdin)
        try:
            call_command("conch_inbound", *args, stdout=out)
        finally:
            sys.stdin = real
    else:
        call_command("conch_inbound", *args, stdout=out)
    return json.loads(out.getvalue())


def test_conch_inbound_takes_json_on_stdin(owner, agent, gateway_token):
    answer = run_inbound(stdin=json.dumps(body(message_id="s1")))
    assert answer["outcome"] == "started"
    assert Conversation.objects.get(public_id=answer["chat"]).owner == owner


def test_conch_inbound_takes_field_options(owner, agent):
    answer = run_inbound(
        "--owner",
        "owner",
        "--channel",
        "slack",
        "--chat-type",
        "group",
        "--group-id",
        "eng",
        "--peer",
        "bob",
        "--message-id",
        "9",
        "--text",
        "standup?",
    )
    assert answer["session_key"] == "agent:main:group:slack:eng"


def test_conch_inbound_is_idempotent_too(owner, agent, gateway_token):
    run_inbound("--json", json.dumps(body(message_id="x")))
    assert run_inbound("--json", json.dumps(body(message_id="x")))["outcome"] == "duplicate"


@pytest.mark.parametrize(
    ("given", "field"),
    [
        (["--json", "{"], "body"),
        (["--json", json.dumps(body(chat_type="fax"))], "chat_type"),
        (["--json", json.dumps(body(text=""))], "text"),
        (["--json", nested(100_000)], "body"),
        (["--json", json.dumps(body(text="a\x00b"))], "text"),
    ],
)
def test_conch_inbound_refuses_a_bad_message_naming_the_field(
    owner, agent, gateway_token, given, field
):
    with pytest.raises(CommandError, match=f"^{field}:"):
        call_command("conch_inbound", *given, stdout=io.StringIO())
    assert not Conversation.objects.exists()


def test_conch_inbound_exits_non_zero_on_bad_input(tmp_path, owner):
    import subprocess
    import sys

    from tests.scaleout.processes import REPO, process_env

    done = subprocess.run(
        [sys.executable, "manage.py", "conch_inbound", "--json", '{"channel": "x"}'],
        cwd=REPO,
        env=process_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "chat_type" in done.stderr


def test_the_owners_identity_matches_whatever_the_channels_case(
    client, owner, agent, gateway_token
):
    OwnerIdentity.objects.create(owner=owner, channel="Telegram", peer="me")
    answer = post(client, body(peer="me"), token=gateway_token).json()
    assert Conversation.objects.get(public_id=answer["chat"]).taint == Taint.NONE


def test_conch_gateway_token_prints_a_working_token_once_and_rotates(client, owner, agent):
    first, second = io.StringIO(), io.StringIO()
    call_command("conch_gateway_token", "--owner", "owner", stdout=first, stderr=io.StringIO())
    call_command("conch_gateway_token", "--owner", "owner", stdout=second, stderr=io.StringIO())
    old, new = first.getvalue().strip(), second.getvalue().strip()
    assert post(client, body(message_id="1"), token=old).status_code == 401
    assert post(client, body(message_id="2"), token=new).status_code == 202
    assert GatewayToken.objects.filter(revoked_at__isnull=True).count() == 1


def test_conch_gateway_token_makes_a_telegram_webhook_secret(client, owner, agent, monkeypatch):
    from chats.gateway.models import ChannelAccount

    monkeypatch.setattr("sys.stdin", io.StringIO("777:bot-token\n"))
    out = io.StringIO()
    call_command(
        "conch_gateway_token",
        "--owner",
        "owner",
        "--telegram",
        "mybot",
        "--bot-token-stdin",
        stdout=out,
        stderr=io.StringIO(),
    )
    secret = out.getvalue().strip()
    account = ChannelAccount.objects.get(account_id="mybot")
    assert (account.owner, account.secret) == (owner, "777:bot-token")
    assert secret not in account.webhook_secret_digest
    update = {
        "message": {
            "message_id": 1,
            "from": {"id": 5},
            "chat": {"id": 5, "type": "private"},
            "text": "hi",
        }
    }
    response = client.post(
        "/gateway/telegram/mybot",
        update,
        content_type="application/json",
        HTTP_X_TELEGRAM_BOT_API_SECRET_TOKEN=secret,
    )
    assert response.status_code == 202
