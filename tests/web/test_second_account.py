"""Every view and action, tried by a second account on the owner's things.

The URL list is read from Django's resolver, so a view added later without a line in
``EXPECTED`` fails here until someone says what a second account gets from it. Each is
asked with GET and POST, with the owner's ids in the URL (their chat, routine, queued
message, message card, binding); after all of it nothing of the owner's has changed, and
no answer carried the owner's chat title, routine name, model address or model name.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from chats.gateway.models import Binding, ChannelAccount, Routine
from chats.models import Agent, Conversation, QueuedInput, StandingOk
from chats.runtime.turns import message_send
from tests.factories import AgentFactory, ChatFactory, ChatMessageFactory, RoutineFactory
from together.models import ChatMessage

pytestmark = pytest.mark.django_db

SECRET_TITLE = "Owner's private plan"
SECRET_ROUTINE = "Owner's morning routine"
MODEL_URL = "http://127.0.0.1:9/owners-v1"
MODEL_NAME = "owners-private-model"

NOT_FOUND, FORBIDDEN, NEEDS_A_TOKEN = {404}, {403}, {401}
# What a second (non-staff) account gets from each view, by URL name, for (GET, POST).
# "own": it works on the account's own things only (checked below by what it shows and
# what changes); 405 where the view takes only the other method.
OWN = {200, 204, 302, 400, 405}
EXPECTED: dict[str, tuple[set[int], set[int]]] = {
    # The owner's chat, in every view that names it: as if it weren't there.
    "chat": (NOT_FOUND, {405}),
    "chat-regions": (NOT_FOUND, {405}),
    "chat-send": ({405}, NOT_FOUND),
    "chat-stop": ({405}, NOT_FOUND),
    "chat-queued-cancel": ({405}, NOT_FOUND),
    "chat-retry": ({405}, NOT_FOUND),
    "chat-edit": ({405}, NOT_FOUND),
    "chat-approve": ({405}, NOT_FOUND),
    "chat-deny": ({405}, NOT_FOUND),
    "chat-allowed-take-back": ({405}, NOT_FOUND),
    "chat-mode": ({405}, NOT_FOUND),
    "chat-rename": ({405}, NOT_FOUND),
    "chat-archive": ({405}, NOT_FOUND),
    "chat-pin": ({405}, NOT_FOUND),
    "chat-delete": ({405}, NOT_FOUND),
    "chat-inbound": ({405}, NOT_FOUND),
    "message-press": ({405}, NOT_FOUND),
    # The owner's routine.
    "routine": (NOT_FOUND, {405}),
    "routine-regions": (NOT_FOUND, {405}),
    "routine-pause": ({405}, NOT_FOUND),
    "routine-resume": ({405}, NOT_FOUND),
    "routine-run-now": ({405}, NOT_FOUND),
    # The install's models and routing: the owner's and staff's.
    "connect": (FORBIDDEN, {405}),
    "connect-post": ({405}, FORBIDDEN),
    "playground": (FORBIDDEN, {405}),
    "playground-scope": ({405}, FORBIDDEN),
    "playground-binding-add": ({405}, FORBIDDEN),
    "playground-binding-remove": ({405}, FORBIDDEN),
    "playground-fire": ({405}, FORBIDDEN),
    "playground-clear": ({405}, FORBIDDEN),
    # Its own: the list, a new chat (with the owner's persona: refused), search, routines.
    "home": (OWN, {405}),
    "chat-list": (OWN, {405}),
    "chat-create": ({405}, {400}),
    "archived": (OWN, {405}),
    "search": (OWN, {405}),
    "routines": (OWN, {405}),
    "routine-new": ({405}, {400}),
    # The gateway's doors take a bearer token or a bot's secret, never a session.
    "inbound": ({405}, NEEDS_A_TOKEN),
    "telegram": ({405}, NEEDS_A_TOKEN),
    "slack": ({405}, NEEDS_A_TOKEN),
    "whatsapp": ({403}, NEEDS_A_TOKEN),  # its GET is Meta's handshake: a verify token
    "discord": ({405}, NEEDS_A_TOKEN),
    # Signing in and out is everyone's own.
    "signin": (OWN, OWN | {403}),
    "signin-token": (OWN, OWN),
    "signout": (OWN, OWN),
}


def routes():
    """(name, route) of every view but the admin's, from Django's own resolver."""

    def walk(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                yield pattern.name, prefix + str(pattern.pattern)

    return [(n, r) for n, r in walk(get_resolver().url_patterns) if not r.startswith("admin/")]


@pytest.fixture
def owners_things(owner, agent):
    agent.engine = "openai"
    agent.engine_config = {"base_url": MODEL_URL, "model": MODEL_NAME}
    agent.save()
    chat = ChatFactory(owner=owner, title=SECRET_TITLE)
    message_send(conversation=chat, text="first")
    message_send(conversation=chat, text="waits its turn")
    other = ChatFactory(owner=owner, title="Another of the owner's")
    card = ChatMessageFactory(sender=other, receiver=chat)
    routine = RoutineFactory(owner=owner, name=SECRET_ROUTINE)
    binding = Binding.objects.create(agent=agent, channel="telegram")
    allowed = StandingOk.objects.create(conversation=chat, tool="write_file")
    ChannelAccount.objects.create(owner=owner, channel="telegram", account_id="ownersbot")
    return {
        "public_id": chat.public_id,
        "routine_public_id": routine.public_id,
        "queued_id": QueuedInput.objects.get(conversation=chat).pk,
        "message_id": card.message_id,
        "binding_id": binding.pk,
        "ok_id": allowed.pk,
        "account": "ownersbot",
        "token": "not-a-token",
    }


def snapshot():
    """Everything of the owner's a second account might change."""
    return {
        "chats": sorted(
            Conversation.objects.values_list(
                "public_id",
                "title",
                "archived",
                "pinned",
                "mode",
                "inbound",
                "status",
                "agent_id",
            )
        ),
        "turns": sorted(Conversation.objects.values_list("public_id", "turns__state")),
        "entries": sorted(Conversation.objects.values_list("public_id", "entries__text")),
        "queued": sorted(QueuedInput.objects.values_list("pk", "text")),
        "cards": sorted(ChatMessage.objects.values_list("pk", "state")),
        "agents": sorted(Agent.objects.values_list("pk", "engine", "engine_config", "owner_id")),
        "routines": sorted(Routine.objects.values_list("pk", "name", "paused", "agent_id")),
        "bindings": sorted(Binding.objects.values_list("pk", "agent_id", "channel")),
        "allowed": sorted(StandingOk.objects.values_list("pk", "conversation_id", "tool")),
    }


def url_for(name: str, route: str, ids: dict) -> str:
    url = "/" + route
    if name.startswith("routine") and "<str:public_id>" in url:
        url = url.replace("<str:public_id>", ids["routine_public_id"])
    for key, value in ids.items():
        for kind in ("str", "int"):
            url = url.replace(f"<{kind}:{key}>", str(value))
    assert "<" not in url, url
    return url


def test_a_second_account_is_refused_every_view_and_action_on_the_owners_things(
    owners_things, second_owner, workspace
):
    AgentFactory(slug="theirs", name="Theirs", owner=second_owner, workspace=str(workspace))
    client = Client()
    client.force_login(second_owner)
    found = routes()
    assert {name for name, _ in found} == set(EXPECTED), "say what a second account gets"
    before = snapshot()
    # Everything a form of the owner's could post: the owner's persona, their chat, text.
    owners_agent = Agent.objects.get(is_default=True).pk
    data = {
        "text": "hi",
        "title": "x",
        "mode": "auto",
        "agent": owners_agent,
        "folder": "",
        "action": "save",
        "base_url": "http://127.0.0.1:1/v1",
        "model": "theirs",
        "inbound": "accept",
        "archived": "1",
        "name": "Mine",
        "schedule": "0 8 * * *",
        "time_zone": "UTC",
        "deliver": "run",
        "missed": "skip",
        "dm_scope": "main",
    }

    answers = {}
    for name, route in found:
        url = url_for(name, route, owners_things)
        got = client.get(url), client.post(url, data)
        if name == "signout":
            client.force_login(second_owner)  # signed out by that: back in, for the rest
        answers[name] = tuple(r.status_code for r in got)
        for response in got:
            body = response.content.decode(errors="replace")
            for secret in (SECRET_TITLE, SECRET_ROUTINE, MODEL_URL, MODEL_NAME):
                assert secret not in body, (name, response.status_code, secret)

    wrong = {
        name: (answers[name], EXPECTED[name])
        for name in EXPECTED
        if not (answers[name][0] in EXPECTED[name][0] and answers[name][1] in EXPECTED[name][1])
    }
    assert not wrong
    after = snapshot()
    # The second account's own new rows (its chat, its routine) aside, nothing changed.
    assert after == before
