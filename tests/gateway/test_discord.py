"""Discord: the Gateway (``conch discord``) and the Interactions endpoint in, the REST
API out, against a fake Discord on loopback (tests/gateway/discord_fake.py).

Every payload is a file in discord_payloads/, and SOURCES.md says where each shape
comes from; the fake's refusals are Discord's own words and codes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from chats.gateway.discord import (
    ERR_BAD_SIGNATURE,
    SIGNATURE_HEADER,
    TEXT_LIMIT,
    TIMESTAMP_HEADER,
    Answer,
    Ignore,
    Take,
    Where,
    discord_deliver,
    discord_inbound,
    discord_interaction,
)
from chats.gateway.discord_gateway import GatewayError, GatewayRun
from chats.gateway.inbound import InboundError
from chats.gateway.models import (
    Binding,
    ChannelAccount,
    GroupActivation,
    InboundRecord,
    OutboxMessage,
    OutboxState,
    OwnerIdentity,
    SessionOrigin,
)
from chats.gateway.outbox import outbox_deliver, outbox_enqueue, sender_for
from chats.gateway.routing import route_index
from chats.models import Agent, Conversation, EntryRole
from chats.runtime.runner import drain
from chats.toolsets import OWNERS, STRANGERS, tool_set_for
from tests.gateway.discord_fake import FakeDiscord, payload, rate_limited

BOT = "1219741658916802560"  # the bot's user id, and its application's
GUILD = "1247389570122563624"
GENERAL = "1247389570789330984"
THREAD = "1251573042181324842"
DM_CHANNEL = "1250187326490951731"
ALICE = "1118295468731793408"
BOB = "1118295921632735252"
MOD, MEMBER = "1247389570122563630", "1247391022857633812"
ZEYLA, ZEYLA_DM = "114941315417899012", "244567637332328449"  # message_create_dm.json's

BOT_TOKEN = "MTIxOTc0MTY1ODkxNjgwMjU2MA.GQ7xkL.s3cret-bot-token-never-shown-0123456789"
KEY = Ed25519PrivateKey.generate()
PUBLIC_KEY = KEY.public_key().public_bytes_raw().hex()
URL = "/gateway/discord/home/interactions"


@pytest.fixture
def bot(owner, agent) -> ChannelAccount:
    return ChannelAccount.objects.create(
        owner=owner,
        channel="discord",
        account_id="home",
        secret=BOT_TOKEN,
        public_key=PUBLIC_KEY,
        platform_id=BOT,
        bot_user_id=BOT,
    )


@pytest.fixture
def fake(settings) -> Iterator[FakeDiscord]:
    with FakeDiscord(token=BOT_TOKEN) as api:
        settings.CONCH_DISCORD_API_BASE = api.base
        api.channels[GENERAL] = payload("channel_general")
        yield api


@pytest.fixture(autouse=True)
def fresh_sender():
    """The sender is one per process: each test starts with no buckets remembered."""
    sender = sender_for("discord")
    sender.forget()  # type: ignore[union-attr]
    yield
    sender.forget()  # type: ignore[union-attr]


@pytest.fixture
def echo(agent):
    Agent.objects.filter(is_default=True).update(engine="echo")


def wait_until(
    check: Callable[[], object],
    *,
    changed: threading.Condition,
    timeout: float = 15.0,
    what: str = "it",
) -> None:
    """Wait, without polling, until ``check`` holds: it is asked again each time the
    thread doing the work notifies ``changed`` (a run's recorded outcome, the fake's
    heartbeat or RESUME)."""
    with changed:
        if not changed.wait_for(check, timeout=timeout):
            raise AssertionError(f"timed out waiting for {what}")


@contextlib.contextmanager
def gateway(account: ChannelAccount) -> Iterator[GatewayRun]:
    """``conch discord``'s run, on a thread of its own, stopped at the end."""
    run = GatewayRun(account, BOT_TOKEN)
    failed: list[BaseException] = []

    def target() -> None:
        try:
            run.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            failed.append(exc)

    thread = threading.Thread(target=target, name="test-discord-gateway", daemon=True)
    thread.start()
    try:
        yield run
    finally:
        run.stop()
        thread.join(20)
        assert not thread.is_alive(), "the Gateway run didn't stop"
    if failed:
        raise failed[0]


def outcomes(run: GatewayRun) -> list[tuple[str, str]]:
    return list(run.client.outcomes) if run.client is not None else []


def chat_for(key: str) -> Conversation:
    return Conversation.objects.get(session_key=key, archived=False)


def person_words(chat: Conversation) -> list[str]:
    return list(
        chat.entries.filter(role=EntryRole.PERSON).order_by("seq").values_list("text", flat=True)
    )


def taken(name_or_payload, *, where: Where | None = None, **account) -> Take:
    """A recorded message as discord_inbound reads it for the bot; it must be taken."""
    raw = payload(name_or_payload) if isinstance(name_or_payload, str) else name_or_payload
    bot = ChannelAccount(account_id="home", bot_user_id=BOT, **account)
    asked = discord_inbound(raw, account=bot, where=where)
    assert isinstance(asked, Take), asked
    return asked


def ignored(name_or_payload, **account) -> Ignore:
    raw = payload(name_or_payload) if isinstance(name_or_payload, str) else name_or_payload
    bot = ChannelAccount(account_id="home", bot_user_id=BOT, **account)
    asked = discord_inbound(raw, account=bot)
    assert isinstance(asked, Ignore), asked
    return asked


IN_THE_THREAD = Where(thread_parent=GENERAL, name="#general")


def deliver(bot: ChannelAccount, name: str, *, where: Where | None = None) -> str:
    """A recorded message handed to the inbound path as ``conch discord`` hands it."""
    return discord_deliver(bot, discord_inbound(payload(name), account=bot, where=where))


# ---------------------------------------------------------------------------
# The Gateway, end to end against the fake


def test_a_dm_and_a_server_message_come_over_the_gateway_into_their_sessions(
    transactional_db, bot, fake
):
    with gateway(bot) as run:
        assert fake.ready.wait(15), "no IDENTIFY reached the fake Gateway"
        [identify] = fake.identifies
        assert identify["token"] == BOT_TOKEN
        assert identify["intents"] == (1 << 0) | (1 << 9) | (1 << 12) | (1 << 15)
        assert fake.connections[0].query == {
            "v": "10",
            "encoding": "json",
            "compress": "zlib-stream",
        }
        fake.dispatch("MESSAGE_CREATE", payload("message_create_dm"))
        fake.dispatch("MESSAGE_CREATE", payload("message_create_guild_mention"))
        wait_until(
            lambda: len(outcomes(run)) == 2, changed=run.outcome_recorded, what="both messages"
        )
        wait_until(lambda: len(fake.heartbeats) >= 2, changed=fake.changed, what="heartbeats")
    assert [o for _, o in outcomes(run)] == ["started", "started"]
    assert person_words(chat_for(f"agent:main:dm:discord:{ZEYLA}")) == ["a"]
    group = chat_for(f"agent:main:group:discord:{GENERAL}")
    assert person_words(group) == ["@alice: what's on today?"]
    origin = SessionOrigin.objects.get(conversation=group)
    assert (origin.guild_id, origin.reply_to) == (
        GUILD,
        {"chat_id": GENERAL, "reply_to_message_id": "1251590378442002472"},
    )


def test_a_dropped_connection_resumes_and_no_message_is_lost_or_taken_twice(
    transactional_db, bot, fake
):
    first = payload("message_create_guild_mention")
    missed = payload("message_create_guild_guest")  # dispatched while the connection is down
    after = payload("message_create_reply_to_bot")
    with gateway(bot) as run:
        assert fake.ready.wait(15)
        seen = fake.dispatch("MESSAGE_CREATE", first)
        wait_until(
            lambda: len(outcomes(run)) == 1, changed=run.outcome_recorded, what="the first message"
        )
        fake.drop()  # no close frame: a network gone
        fake.dispatch("MESSAGE_CREATE", missed)
        assert fake.resumed.wait(15), "the client never RESUMEd"
        wait_until(
            lambda: len(outcomes(run)) == 2,
            changed=run.outcome_recorded,
            what="the missed message, replayed",
        )
        fake.reconnect()  # op 7: Discord asks for a new connection, resumed
        wait_until(
            lambda: len(fake.resumes) == 2 and fake.resumed.is_set(),
            changed=fake.changed,
            what="a 2nd RESUME",
        )
        fake.dispatch("MESSAGE_CREATE", after)
        wait_until(
            lambda: len(outcomes(run)) == 3, changed=run.outcome_recorded, what="the message after"
        )
    assert len(fake.identifies) == 1  # resumed, never identified afresh
    assert fake.resumes[0] == {"token": BOT_TOKEN, "session_id": fake.session_id, "seq": seen}
    assert [c.path.split("?")[0] for c in fake.connections] == ["/", "/resume", "/resume"]
    ids = [first["id"], missed["id"], after["id"]]
    assert [receipt for receipt, _ in outcomes(run)] == ids  # each once, in order
    assert "duplicate" not in [outcome for _, outcome in outcomes(run)]
    assert sorted(InboundRecord.objects.values_list("message_id", flat=True)) == sorted(ids)
    chat = chat_for(f"agent:main:group:discord:{GENERAL}")
    assert set(InboundRecord.objects.values_list("conversation", flat=True)) == {chat.pk}


def test_a_thread_the_gateway_told_of_is_its_own_session_under_its_channel(
    transactional_db, bot, fake
):
    with gateway(bot) as run:
        assert fake.ready.wait(15)
        fake.dispatch("THREAD_CREATE", payload("thread_create"))
        fake.dispatch("MESSAGE_CREATE", payload("message_create_thread"))
        wait_until(
            lambda: len(outcomes(run)) == 1,
            changed=run.outcome_recorded,
            what="the thread's message",
        )
    chat = chat_for(f"agent:main:thread:discord:{GENERAL}:{THREAD}")
    origin = SessionOrigin.objects.get(conversation=chat)
    assert (origin.chat_type, origin.thread_id, origin.parent_peer, origin.group_id) == (
        "thread",
        THREAD,
        GENERAL,
        GENERAL,
    )
    assert origin.reply_to == {"chat_id": THREAD, "reply_to_message_id": "1251591020451659846"}
    assert not [c for c in fake.calls if c.path.endswith(f"/channels/{THREAD}")]


def test_a_thread_not_seen_yet_is_looked_up_once(transactional_db, bot, fake):
    fake.channels[THREAD] = payload("thread_create")
    with gateway(bot) as run:
        assert fake.ready.wait(15)
        fake.dispatch("MESSAGE_CREATE", payload("message_create_thread"))
        again = payload("message_create_thread") | {"id": "1251591020451659999"}
        fake.dispatch("MESSAGE_CREATE", again)
        wait_until(
            lambda: len(outcomes(run)) == 2,
            changed=run.outcome_recorded,
            what="the thread's messages",
        )
    assert chat_for(f"agent:main:thread:discord:{GENERAL}:{THREAD}")
    lookups = [c for c in fake.calls if c.method == "GET" and c.path.endswith(f"/{THREAD}")]
    assert len(lookups) == 1


def test_over_the_gateway_bots_are_never_answered_and_a_malformed_message_is_kept_as_refused(
    transactional_db, bot, fake
):
    malformed = payload("message_create_guild_mention")
    del malformed["author"]
    with gateway(bot) as run:
        assert fake.ready.wait(15)
        fake.dispatch("MESSAGE_CREATE", payload("message_create_own"))
        fake.dispatch("MESSAGE_CREATE", payload("message_create_other_bot"))
        fake.dispatch("MESSAGE_CREATE", malformed)
        wait_until(
            lambda: len(outcomes(run)) == 3, changed=run.outcome_recorded, what="the three messages"
        )
    assert [o for _, o in outcomes(run)] == ["ignored", "ignored", "refused"]
    assert not Conversation.objects.exists()
    kept = dict(InboundRecord.objects.values_list("message_id", "outcome"))
    assert kept == {"1251591455359930438": "ignored", malformed["id"]: "refused"}
    assert InboundRecord.objects.get(outcome="refused").reason == "author: is required."


def test_a_refused_bot_token_stops_the_gateway_with_words_to_fix_it(transactional_db, bot, fake):
    fake.token = "another-token"
    with pytest.raises(GatewayError, match="refused the bot token") as refused:
        GatewayRun(bot, BOT_TOKEN).run()  # ends on its own: retrying can't help
    assert BOT_TOKEN not in str(refused.value)
    assert not fake.identifies  # refused at login, before the Gateway


def test_the_message_content_intent_turned_off_stops_the_gateway_saying_where_to_turn_it_on(
    transactional_db, bot, fake
):
    fake.message_content_allowed = False
    with pytest.raises(GatewayError, match="Message Content Intent"):
        GatewayRun(bot, BOT_TOKEN).run()
    assert fake.closed_with == [4014]


def test_web_processes_never_load_discord_py():
    """Only `conch discord` needs discord.py: the URLs, the views and the outbox don't."""
    check = (
        "import django, sys; django.setup(); import conch.urls, chats.gateway.discord; "
        "from django.apps import apps; assert apps.ready; "
        "sys.exit(1 if any(m == 'discord' or m.startswith('discord.') for m in sys.modules) else 0)"
    )
    done = subprocess.run(  # noqa: S603 - this interpreter, on this repository
        [sys.executable, "-c", check],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "conch.settings"},
    )
    assert done.returncode == 0, done.stderr or "discord.py was imported"


# ---------------------------------------------------------------------------
# `conch discord`


def test_conch_discord_names_an_unknown_account_and_a_missing_token(bot):
    with pytest.raises(CommandError, match="no Discord account called 'work'.*'home'"):
        call_command("discord", "work")
    ChannelAccount.objects.filter(pk=bot.pk).update(secret="")
    with pytest.raises(CommandError, match="has no bot token"):
        call_command("discord", "home")


def test_conch_discord_takes_messages_until_sigterm_then_ends_cleanly(
    transactional_db, bot, fake, monkeypatch
):
    from chats.management.commands import discord as command

    runs: list[GatewayRun] = []

    class Watched(GatewayRun):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            runs.append(self)

    monkeypatch.setattr(command, "GatewayRun", Watched)
    failed: list[BaseException] = []

    def then_stop() -> None:
        try:
            assert fake.ready.wait(15), "no IDENTIFY"
            fake.dispatch("MESSAGE_CREATE", payload("message_create_dm"))
            wait_until(
                lambda: outcomes(runs[0]), changed=runs[0].outcome_recorded, what="the DM taken"
            )
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            failed.append(exc)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    # A SIGTERM that came after the command had ended must not end the test run.
    before = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        stopper = threading.Thread(target=then_stop, daemon=True)
        stopper.start()
        call_command("discord", "home")  # returns: what `conch discord` exits 0 on
        stopper.join(5)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert not failed, failed
    assert outcomes(runs[0]) == [("302917639565475840", "started")]
    assert chat_for(f"agent:main:dm:discord:{ZEYLA}")


# ---------------------------------------------------------------------------
# Messages, mapped and routed as OpenClaw would


def test_a_dm_is_the_authors_with_its_reply_to_the_dm_channel():
    asked = taken("message_create_dm")
    inbound = asked.inbound
    assert (inbound.channel, inbound.chat_type, inbound.peer, inbound.message_id) == (
        "discord",
        "dm",
        ZEYLA,
        "302917639565475840",
    )
    assert (inbound.guild_id, inbound.member_roles) == ("", ())
    assert asked.reply_to == {"chat_id": ZEYLA_DM}


def test_a_server_message_is_its_channels_with_the_server_and_the_authors_roles():
    asked = taken("message_create_guild_mention", where=Where(name="#general"))
    inbound = asked.inbound
    assert (inbound.chat_type, inbound.group_id, inbound.peer, inbound.guild_id) == (
        "group",
        GENERAL,
        ALICE,
        GUILD,
    )
    assert inbound.member_roles == tuple(sorted([MOD, MEMBER]))
    assert (inbound.text, inbound.sender_name, inbound.group_name) == (
        "what's on today?",  # the bot's own mention dropped
        "@alice",
        "#general",
    )
    assert asked.reply_to == {"chat_id": GENERAL, "reply_to_message_id": "1251590378442002472"}


def test_a_thread_message_is_the_threads_under_its_parent_channel():
    inbound = taken("message_create_thread", where=IN_THE_THREAD).inbound
    assert (inbound.chat_type, inbound.thread_id, inbound.parent_peer, inbound.group_id) == (
        "thread",
        THREAD,
        GENERAL,
        GENERAL,
    )
    assert inbound.peer_kind == "channel"


def test_dm_server_thread_and_duplicate_land_where_openclaw_would_put_them(bot):
    assert deliver(bot, "message_create_dm") == "started"
    assert deliver(bot, "message_create_guild_mention") == "started"
    assert deliver(bot, "message_create_thread", where=IN_THE_THREAD) == "started"
    assert deliver(bot, "message_create_guild_mention") == "duplicate"
    keys = set(Conversation.objects.values_list("session_key", flat=True))
    assert keys == {
        f"agent:main:dm:discord:{ZEYLA}",
        f"agent:main:group:discord:{GENERAL}",
        f"agent:main:thread:discord:{GENERAL}:{THREAD}",
    }
    assert len(person_words(chat_for(f"agent:main:group:discord:{GENERAL}"))) == 1


def test_the_guild_roles_and_guild_tiers_are_chosen_from_real_messages(bot, personas):
    Binding.objects.create(
        agent=personas["work"], channel="discord", account_id="*", guild_id=GUILD, roles=[MOD]
    )
    Binding.objects.create(
        agent=personas["home"], channel="discord", account_id="*", guild_id=GUILD
    )
    index = route_index()
    mod = index.resolve(taken("message_create_guild_mention").inbound)  # alice: mod + member
    guest = index.resolve(taken("message_create_guild_guest").inbound)  # bob: member only
    assert (mod.agent.slug, mod.rule.tier) == ("work", "guild+roles")
    assert (guest.agent.slug, guest.rule.tier) == ("home", "guild")
    assert deliver(bot, "message_create_guild_mention") == "started"
    assert deliver(bot, "message_create_guild_guest") == "started"
    assert set(Conversation.objects.values_list("session_key", flat=True)) == {
        f"agent:work:group:discord:{GENERAL}",
        f"agent:home:group:discord:{GENERAL}",
    }


def test_a_thread_follows_its_channels_binding(personas):
    Binding.objects.create(
        agent=personas["work"],
        channel="discord",
        account_id="home",
        peer=GENERAL,
        peer_kind="group",
    )
    route = route_index().resolve(taken("message_create_thread", where=IN_THE_THREAD).inbound)
    assert (route.agent.slug, route.rule.tier) == ("work", "parentPeer")


def test_in_a_server_only_a_mention_or_a_reply_to_the_bot_is_taken_by_default():
    chatter = ignored("message_create_guild")
    assert chatter.message_id == ""  # a busy server's chatter isn't kept in the admin
    assert taken("message_create_guild_mention").inbound.text == "what's on today?"
    reply = taken("message_create_reply_to_bot").inbound
    assert (reply.text, reply.in_reply_to_name, reply.in_reply_to_text) == (
        "and tomorrow?",
        "@conch",
        "echo: hello",
    )


def test_a_mention_written_in_the_words_counts_without_the_mentions_list():
    raw = payload("message_create_guild") | {"content": f"<@!{BOT}> /new"}
    assert taken(raw).inbound.text == "/new"


def test_an_account_answering_always_takes_every_server_message():
    assert taken("message_create_guild", group_activation=GroupActivation.ALWAYS).inbound.text == (
        "hello everyone"
    )


def test_a_dm_is_taken_whatever_the_activation():
    assert taken("message_create_dm", group_activation=GroupActivation.MENTION)


def test_other_peoples_mentions_read_as_their_names():
    raw = payload("message_create_guild_mention")
    raw["content"] = f"<@{BOT}> ask <@{BOB}> too"
    raw["mentions"].append({"id": BOB, "username": "bob", "discriminator": "0", "avatar": None})
    assert taken(raw).inbound.text == "ask @bob too"


def test_the_bots_own_and_other_bots_messages_are_never_answered():
    own = ignored("message_create_own")
    assert (own.reason, own.message_id) == ("our own message", "")
    other = ignored("message_create_other_bot")
    assert other.reason.startswith("a bot's message")
    assert other.message_id == "1251591455359930438"  # it named our bot: kept in the admin
    webhook = payload("message_create_guild_mention") | {"webhook_id": "1100000000000000000"}
    assert ignored(webhook).reason.startswith("a bot's message")


def test_a_join_and_a_mention_alone_are_not_words():
    assert ignored("message_create_join", group_activation="always").reason.startswith(
        "not a person's words"
    )
    alone = payload("message_create_guild_mention") | {"content": f"<@{BOT}>"}
    assert ignored(alone).reason.startswith("no words")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"id": 1251590378442002472}, "id"),
        ({"channel_id": None}, "channel_id"),
        ({"author": "alice"}, "author"),
        ({"member": {"roles": [7]}}, "member.roles.0"),
    ],
)
def test_a_malformed_message_is_refused_naming_the_field(change, field):
    raw = payload("message_create_guild_mention") | change
    with pytest.raises(InboundError) as refused:
        discord_inbound(raw, account_id="home", bot_user_id=BOT)
    assert refused.value.field == field


def test_words_no_database_can_store_are_refused_naming_the_content():
    raw = payload("message_create_guild_mention") | {"content": f"<@{BOT}> hi\x00there"}
    with pytest.raises(InboundError) as refused:
        discord_inbound(raw, account_id="home", bot_user_id=BOT)
    assert (refused.value.field, refused.value.message) == (
        "content",
        "must not contain NUL characters.",
    )


def test_a_stranger_gets_the_personas_tools_for_other_people_and_the_owner_their_own(bot, owner):
    deliver(bot, "message_create_dm")
    stranger = Conversation.objects.get()
    assert tool_set_for(stranger).kind == STRANGERS
    OwnerIdentity.objects.create(owner=owner, channel="discord", peer=ALICE)
    raw = payload("message_create_dm")
    raw.update(id="302917639565475999", author={**raw["author"], "id": ALICE, "username": "a"})
    discord_deliver(bot, discord_inbound(raw, account=bot))
    mine = Conversation.objects.exclude(pk=stranger.pk).get()
    assert tool_set_for(mine).kind == OWNERS
    server = deliver(bot, "message_create_guild_mention")
    assert server == "started"
    assert tool_set_for(chat_for(f"agent:main:group:discord:{GENERAL}")).kind == STRANGERS


# ---------------------------------------------------------------------------
# The Interactions endpoint


def signed(body: bytes, *, key: Ed25519PrivateKey = KEY, timestamp: str | None = None) -> dict:
    timestamp = timestamp or str(int(time.time()))
    signature = key.sign(timestamp.encode() + body).hex()
    return {
        f"HTTP_{SIGNATURE_HEADER.upper().replace('-', '_')}": signature,
        f"HTTP_{TIMESTAMP_HEADER.upper().replace('-', '_')}": timestamp,
    }


def interact(client, body: dict | bytes, *, url: str = URL, **headers):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    sign = headers.pop("sign", True)
    return client.post(
        url, raw, content_type="application/json", **(signed(raw) if sign else {}), **headers
    )


def test_a_signed_ping_is_answered_pong(client, bot):
    response = interact(client, payload("interaction_ping"))
    assert (response.status_code, response.json()) == (200, {"type": 1})


def test_a_bad_or_missing_signature_is_refused_before_anything_is_read(client, bot):
    body = json.dumps(payload("interaction_command_guild")).encode()
    assert interact(client, body, sign=False).status_code == 401
    wrong = signed(body)
    wrong[f"HTTP_{SIGNATURE_HEADER.upper().replace('-', '_')}"] = "00" * 64
    assert interact(client, body, sign=False, **wrong).status_code == 401
    tampered = body.replace(b"what's on today?", b"rm -rf the lot!!")
    assert interact(client, tampered, sign=False, **signed(body)).status_code == 401
    not_hex = signed(body) | {f"HTTP_{SIGNATURE_HEADER.upper().replace('-', '_')}": "zz"}
    assert interact(client, body, sign=False, **not_hex).status_code == 401
    response = interact(client, b"{not json", sign=False)
    assert (response.status_code, response.json()) == (401, {"error": ERR_BAD_SIGNATURE})
    assert not Conversation.objects.exists()
    assert not InboundRecord.objects.exists()


def test_a_signed_request_recorded_earlier_cant_be_played_again_later(client, bot):
    body = json.dumps(payload("interaction_ping")).encode()
    old = str(int(time.time()) - 301)
    assert interact(client, body, sign=False, **signed(body, timestamp=old)).status_code == 401
    recent = str(int(time.time()) - 60)
    assert interact(client, body, sign=False, **signed(body, timestamp=recent)).status_code == 200


def test_a_signature_by_a_key_the_account_no_longer_has_is_refused(client, bot):
    old = Ed25519PrivateKey.generate()
    bot.public_key = old.public_key().public_bytes_raw().hex()
    bot.save(update_fields=["public_key"])
    body = json.dumps(payload("interaction_ping")).encode()
    assert interact(client, body, sign=False, **signed(body, key=old)).status_code == 200
    ChannelAccount.objects.filter(pk=bot.pk).update(public_key=PUBLIC_KEY)  # the key rotated
    assert interact(client, body, sign=False, **signed(body, key=old)).status_code == 401


def test_an_unknown_account_reads_the_same_as_a_bad_signature(client, bot):
    response = interact(
        client, payload("interaction_ping"), url="/gateway/discord/work/interactions"
    )
    assert (response.status_code, response.json()) == (401, {"error": ERR_BAD_SIGNATURE})


def test_a_slash_command_in_a_server_is_routed_with_its_guild_and_roles(client, bot):
    response = interact(client, payload("interaction_command_guild"))
    assert (response.status_code, response.json()) == (200, {"type": 5})  # "thinking…"
    chat = chat_for(f"agent:main:group:discord:{GENERAL}")
    assert person_words(chat) == ["Ali (@alice): what's on today?"]
    origin = SessionOrigin.objects.get(conversation=chat)
    assert (origin.guild_id, origin.group_name) == (GUILD, "#general")
    token = payload("interaction_command_guild")["token"]
    assert origin.reply_to == {
        "chat_id": GENERAL,
        "interaction_token": token,
        "application_id": BOT,
    }


def test_a_slash_command_in_a_dm_and_in_a_thread_keep_their_keys(client, bot):
    assert interact(client, payload("interaction_command_dm")).json() == {"type": 5}
    assert interact(client, payload("interaction_command_thread")).json() == {"type": 5}
    dm = SessionOrigin.objects.get(conversation=chat_for(f"agent:main:dm:discord:{ALICE}"))
    assert dm.reply_to["chat_id"] == DM_CHANNEL
    assert chat_for(f"agent:main:thread:discord:{GENERAL}:{THREAD}")


def test_the_guild_roles_tier_holds_for_slash_commands_too(client, bot, personas):
    Binding.objects.create(
        agent=personas["work"], channel="discord", account_id="*", guild_id=GUILD, roles=[MOD]
    )
    interact(client, payload("interaction_command_guild"))
    assert chat_for(f"agent:work:group:discord:{GENERAL}")


def test_a_command_with_nothing_to_ask_is_answered_only_to_its_sender(client, bot):
    raw = payload("interaction_command_guild")
    raw["data"]["options"] = []
    answer = interact(client, raw).json()
    assert answer["type"] == 4 and answer["data"]["flags"] == 64
    assert not Conversation.objects.exists()


def test_a_malformed_interaction_is_answered_and_kept_in_the_admin(client, bot):
    raw = payload("interaction_command_guild")
    raw["member"]["roles"] = [1, 2]
    answer = interact(client, raw)
    assert answer.status_code == 200 and answer.json()["data"]["flags"] == 64
    record = InboundRecord.objects.get()
    assert (record.message_id, record.outcome) == (f"interaction:{raw['id']}", "refused")
    assert record.reason.startswith("member.roles.0:")


def test_the_interaction_text_of_reset_commands_is_conchs_own():
    bot = ChannelAccount(account_id="home", platform_id=BOT)
    asked = discord_interaction(payload("interaction_command_new"), account=bot)
    assert isinstance(asked, Take) and asked.inbound.text == "/new"
    raw = payload("interaction_command_new")
    raw["data"] = {
        "name": "reset",
        "type": 1,
        "options": [{"name": "text", "type": 3, "value": "hi"}],
    }
    asked = discord_interaction(raw, account=bot)
    assert isinstance(asked, Take) and asked.inbound.text == "/reset hi"
    pong = discord_interaction(payload("interaction_ping"), account=bot)
    assert isinstance(pong, Answer) and pong.body == {"type": 1}


def test_new_as_a_slash_command_starts_afresh_and_says_so_as_the_follow_up(
    transactional_db, client, bot, fake
):
    interact(client, payload("interaction_command_guild"))
    token = payload("interaction_command_new")["token"]
    fake.interactions[token] = "live"
    assert interact(client, payload("interaction_command_new")).json() == {"type": 5}
    outbox_deliver()
    [follow_up] = fake.posted("/api/v10/webhooks/")
    assert follow_up.path == f"/api/v10/webhooks/{BOT}/{token}"
    assert "start fresh" in follow_up.body["content"].lower()


def test_a_slash_commands_reply_is_its_follow_up(transactional_db, client, bot, fake, echo):
    raw = payload("interaction_command_dm")
    fake.interactions[raw["token"]] = "live"
    interact(client, raw)
    drain()
    outbox_deliver()
    [follow_up] = fake.posted("/api/v10/webhooks/")
    assert follow_up.path == f"/api/v10/webhooks/{BOT}/{raw['token']}"
    assert follow_up.body == {
        "content": "echo: remind me what we said",
        "allowed_mentions": {"parse": []},
    }
    assert "Authorization" not in follow_up.headers  # the interaction's token is the key
    assert OutboxMessage.objects.get().state == OutboxState.SENT


def test_after_the_interactions_fifteen_minutes_the_reply_goes_to_its_channel(bot, fake):
    message = outbox_enqueue(
        conversation=None,
        channel="discord",
        account_id="home",
        target={"chat_id": GENERAL, "interaction_token": "gone-token", "application_id": BOT},
        text="late words",
    )
    fake.interactions["gone-token"] = "gone"
    assert outbox_deliver().sent == [message.pk]
    [sent] = fake.posted()
    assert (sent.path, sent.body["content"]) == (
        f"/api/v10/channels/{GENERAL}/messages",
        "late words",
    )
    message.refresh_from_db()
    assert "interaction_token" not in message.target


# ---------------------------------------------------------------------------
# The outbox's sender, against the fake


def queued(text: str = "hello", **target) -> OutboxMessage:
    message = outbox_enqueue(
        conversation=None,
        channel="discord",
        account_id="home",
        target=target or {"chat_id": GENERAL},
        text=text,
    )
    assert message is not None
    return message


def test_a_reply_reaches_discord_through_the_outbox(transactional_db, bot, fake, echo):
    assert deliver(bot, "message_create_guild_mention") == "started"
    drain()
    report = outbox_deliver()
    [sent] = fake.posted()
    assert sent.path == f"/api/v10/channels/{GENERAL}/messages"
    assert sent.headers["Authorization"] == f"Bot {BOT_TOKEN}"
    assert sent.body == {
        "content": "echo: @alice: what's on today?",
        "allowed_mentions": {"parse": []},  # never pings @everyone, nor anyone
        "message_reference": {"message_id": "1251590378442002472", "fail_if_not_exists": False},
    }
    message = OutboxMessage.objects.get()
    assert report.sent == [message.pk]
    assert message.sent_ids == [sent.answer["id"]]


def test_a_long_reply_is_cut_at_line_ends_into_discord_sized_parts(bot, fake):
    lines = [f"line {n} " + "x" * 90 for n in range(60)]  # about 6,000 characters
    message = queued("\n".join(lines), chat_id=GENERAL, reply_to_message_id="1251590378442002472")
    fake.bucket_limit = 10
    outbox_deliver()
    parts = [c.body for c in fake.posted()]
    assert len(parts) == 3
    assert all(len(p["content"]) <= TEXT_LIMIT for p in parts)
    assert all(p["content"].endswith("x") for p in parts)  # cut at line ends
    assert "message_reference" in parts[0] and all("message_reference" not in p for p in parts[1:])
    assert "\n".join(p["content"] for p in parts) == "\n".join(lines)
    message.refresh_from_db()
    assert (message.state, message.parts_sent, len(message.sent_ids)) == (OutboxState.SENT, 3, 3)


def test_discord_asking_to_slow_down_is_honoured_by_its_retry_after(bot, fake):
    fake.answers = [rate_limited(3.5)]
    message = queued()
    now = timezone.now()
    report = outbox_deliver(now=now)
    message.refresh_from_db()
    assert report.retrying == [message.pk]
    assert message.state == OutboxState.PENDING
    assert message.next_attempt_at == now + dt.timedelta(seconds=3.5)
    assert "slow down" in message.last_error
    # Until then the route's bucket is known to be empty: nothing more is sent to it.
    other = queued("meanwhile")
    outbox_deliver(now=now)
    assert len(fake.calls) == 1
    other.refresh_from_db()
    assert other.state == OutboxState.PENDING and other.next_attempt_at > now


def test_an_empty_bucket_is_waited_out_not_hammered(bot, fake):
    fake.bucket_limit, fake.bucket_reset = 2, 0.4
    text = "\n".join("y" * 1500 for _ in range(5))  # five parts, on a bucket of two
    message = queued(text)
    outbox_deliver()
    message.refresh_from_db()
    assert (message.state, message.parts_sent) == (OutboxState.SENT, 5)
    assert fake.hammered == 0  # never a request on an empty bucket
    times = [c.at for c in fake.posted()]
    assert times[2] - times[1] >= 0.25  # waited for the bucket to reset


def test_a_bucket_that_resets_later_puts_the_rest_back_until_then(bot, fake):
    fake.bucket_limit, fake.bucket_reset = 1, 30.0
    message = queued("\n".join("z" * 1500 for _ in range(2)))
    now = timezone.now()
    outbox_deliver(now=now)
    message.refresh_from_db()
    assert (message.state, message.parts_sent) == (OutboxState.PENDING, 1)
    wait = (message.next_attempt_at - now).total_seconds()
    assert 25 < wait <= 30.5
    assert fake.hammered == 0 and len(fake.calls) == 1


def test_a_refused_bot_token_fails_at_once_and_is_not_tried_again(bot, fake):
    fake.token = "a-different-token"
    first, second = queued("one"), queued("two")
    report = outbox_deliver()
    assert report.failed == [first.pk, second.pk]
    first.refresh_from_db()
    assert "401: Unauthorized" in first.last_error
    assert len(fake.calls) == 1  # Discord bans an address that keeps sending a bad token
    for message in OutboxMessage.objects.all():
        assert BOT_TOKEN not in message.last_error


@pytest.mark.parametrize(
    ("where", "words"),
    [("forbidden", "Missing Access"), ("unknown", "Unknown Channel")],
)
def test_a_channel_the_bot_cant_send_to_fails_at_once(bot, fake, where, words):
    getattr(fake, where).add(GENERAL)
    message = queued()
    assert outbox_deliver().failed == [message.pk]
    message.refresh_from_db()
    assert message.state == OutboxState.FAILED and words in message.last_error


def test_too_long_for_discord_is_cut_smaller_and_sent_again_never_dropped(bot, fake):
    fake.text_limit = 900  # Discord counting stricter than we did
    fake.bucket_limit = 20
    message = queued("w" * 1800)
    outbox_deliver()
    [refused] = [c for c in fake.calls if c.status == 400]
    assert refused.answer["errors"]["content"]["_errors"][0]["code"] == "BASE_TYPE_MAX_LENGTH"
    parts = [c.body["content"] for c in fake.posted()]
    assert all(len(p) <= 900 for p in parts) and "".join(parts) == "w" * 1800
    message.refresh_from_db()
    assert message.state == OutboxState.SENT


def test_no_token_shows_in_an_error_when_discord_cant_be_reached(bot, settings):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.CONCH_DISCORD_API_BASE = f"http://127.0.0.1:{port}/api/v10"
    bot_message = queued()
    follow_up = queued(chat_id=GENERAL, interaction_token="s3cret-interaction", application_id=BOT)
    outbox_deliver()
    for message in (bot_message, follow_up):
        message.refresh_from_db()
        assert message.state == OutboxState.PENDING
        assert "could not be reached" in message.last_error
        assert (
            BOT_TOKEN not in message.last_error and "s3cret-interaction" not in message.last_error
        )


def test_a_follow_up_refused_shows_no_interaction_token(bot, fake):
    fake.interactions["s3cret-interaction"] = "live"
    fake.answers = [(500, {"message": "500: Internal Server Error", "code": 0})]
    message = queued(chat_id=GENERAL, interaction_token="s3cret-interaction", application_id=BOT)
    outbox_deliver()
    message.refresh_from_db()
    assert message.state == OutboxState.PENDING  # a 5xx is retried
    assert "s3cret-interaction" not in message.last_error


# ---------------------------------------------------------------------------
# Setting an account up: conch_discord


def setup(*args: str, stdin: str = f"{BOT_TOKEN}\n") -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    real, sys.stdin = sys.stdin, io.StringIO(stdin)
    try:
        call_command("conch_discord", *args, stdout=out, stderr=err)
    finally:
        sys.stdin = real
    return out.getvalue(), err.getvalue()


def test_conch_discord_connects_a_bot_learns_its_id_and_registers_its_commands(owner, fake):
    out, err = setup("home", "--public-key", PUBLIC_KEY.upper(), "--application-id", BOT)
    account = ChannelAccount.objects.get(channel="discord", account_id="home")
    assert (account.public_key, account.platform_id, account.bot_user_id) == (
        PUBLIC_KEY,
        BOT,
        BOT,
    )
    assert account.secret == BOT_TOKEN and account.owner == owner
    assert "/gateway/discord/home/interactions" in out and "conch discord home" in out
    [put] = [c for c in fake.calls if c.method == "PUT"]
    assert put.path == f"/api/v10/applications/{BOT}/commands"
    assert [c["name"] for c in put.body] == ["ask", "new", "reset"]
    assert "/ask, /new, /reset" in err
    assert BOT_TOKEN not in out + err


@pytest.mark.parametrize(
    ("args", "stdin", "words"),
    [
        (("--public-key", "ab" * 31, "--application-id", BOT), None, "64 hex digits"),
        (("--public-key", "zz" * 32, "--application-id", BOT), None, "64 hex digits"),
        (("--public-key", PUBLIC_KEY, "--application-id", "my-app"), None, "application's id"),
        (("--public-key", PUBLIC_KEY, "--application-id", BOT), "\n", "bot's token"),
        (("--public-key", PUBLIC_KEY, "--application-id", BOT), "two words\n", "spaces"),
    ],
)
def test_conch_discord_refuses_what_isnt_a_key_an_id_or_a_token(owner, args, stdin, words):
    with pytest.raises(CommandError, match=words):
        setup("home", *args, **({"stdin": stdin} if stdin is not None else {}))
    assert not ChannelAccount.objects.exists()


def test_conch_discord_with_discord_unreachable_still_saves_and_says_so(owner, settings):
    settings.CONCH_DISCORD_API_BASE = "http://127.0.0.1:9/api/v10"
    out, err = setup("home", "--public-key", PUBLIC_KEY, "--application-id", BOT)
    assert "learnt when `conch discord` connects" in err
    assert "couldn't be registered" in err
    assert ChannelAccount.objects.get().bot_user_id == ""
    assert BOT_TOKEN not in out + err
