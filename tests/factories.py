"""Factories for the records tests make. Persona fixtures live in conftest.py.

Two ways to make a chat:

- :class:`ChatFactory` makes it as the app does, through
  ``conversation_create``: its title is checked and its
  ``conversation.updated`` event is published on commit. Use it wherever a
  chat takes part in what is tested (replies, events, the pages).
- :class:`ConversationFactory` writes the row alone, with any status; use it
  for records a test only needs to exist (maintenance, query counts).
"""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from chats.models import (
    Agent,
    Conversation,
    Entry,
    EntryRole,
    Origin,
    Status,
    Step,
    Taint,
    Task,
    Turn,
    TurnState,
)
from together.models import Chain, ChatMessage, Wait, WaitKind

OWNER = "owner"  # the username of the owner persona (tests/conftest.py's ``owner``)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"person{n}")
    is_staff = True
    is_superuser = True


class OwnerFactory(UserFactory):
    """The person who runs this Conch: one user, however often it is asked for."""

    username = OWNER


class AgentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Agent
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"agent{n}")
    name = factory.LazyAttribute(lambda a: a.slug.title())
    workspace = factory.LazyFunction(lambda: "/tmp")
    is_default = False


class ChatFactory(factory.Factory):
    """One of the owner's chats, made by ``conversation_create``.

    The agent and folder default as the service's do: the default persona
    (the ``agent`` fixture) and its workspace. ``script`` is the scripted
    persona's replies, one list of actions each; ``reply`` is a script of one.
    """

    class Meta:
        model = Conversation

    class Params:
        reply = None
        # Messages from a chat app, the owner's own (a DM from their own account).
        chat_app = factory.Trait(origin=Origin.CHAT_APP, origin_channel="Telegram")
        # A chat app's chat with someone else's words in it: a group, a stranger's DM.
        outsider = factory.Trait(
            origin=Origin.CHAT_APP, origin_channel="Telegram", taint=Taint.PERSON
        )
        # It read something from outside: a web page, a file from elsewhere.
        tainted = factory.Trait(taint=Taint.UNTRUSTED)
        routine = factory.Trait(origin=Origin.ROUTINE)
        task = factory.Trait(origin=Origin.TASK)

    owner = factory.SubFactory(OwnerFactory)
    title = factory.Sequence(lambda n: f"Chat {n}")
    script = factory.LazyAttribute(lambda c: [] if c.reply is None else [c.reply])

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        from chats.personas import may_use
        from chats.runtime.chats import conversation_create, default_agent

        owner = kwargs["owner"]
        if kwargs.get("agent") is None and not may_use(owner, default := default_agent()):
            # Another account: as the owner would in the admin, it has a persona of its own.
            kwargs["agent"] = AgentFactory(
                slug=f"{owner.username}-own",
                name=f"{owner.username.title()}'s",
                owner=owner,
                workspace=default.workspace,
            )
        if kwargs.get("taint", Taint.NONE) != Taint.NONE:
            from chats.models import TaintCause
            from chats.taint import Cause

            kwargs.setdefault("taint_cause", Cause(TaintCause.SETUP))
        return conversation_create(*args, **kwargs)

    @classmethod
    def _build(cls, model_class, *args, **kwargs):
        raise TypeError("ChatFactory makes chats through the service; use ConversationFactory")


class ConversationFactory(factory.django.DjangoModelFactory):
    """A chat's row, written directly: no event, any status."""

    class Meta:
        model = Conversation

    class Params:
        working = factory.Trait(status=Status.WORKING)
        tainted = factory.Trait(taint=Taint.UNTRUSTED)
        outsider = factory.Trait(
            origin=Origin.CHAT_APP, origin_channel="Telegram", taint=Taint.PERSON
        )
        task = factory.Trait(origin=Origin.TASK)

    owner = factory.SubFactory(UserFactory)
    agent = factory.SubFactory(AgentFactory)
    title = factory.Sequence(lambda n: f"Chat {n}")
    folder = factory.LazyAttribute(lambda c: c.agent.workspace)
    origin = Origin.OWN


class TurnFactory(factory.django.DjangoModelFactory):
    """One reply, numbered after the chat's last; running unless ``ended``."""

    class Meta:
        model = Turn

    class Params:
        ended = factory.Trait(
            state=TurnState.COMPLETED, ended_at=factory.LazyFunction(timezone.now)
        )

    conversation = factory.SubFactory(ConversationFactory)
    number = factory.LazyAttribute(lambda t: t.conversation.turns.count() + 1)
    folder = factory.LazyAttribute(lambda t: t.conversation.folder)


class TaskFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Task

    parent = factory.SubFactory(ConversationFactory)
    title = factory.Sequence(lambda n: f"Task {n}")


class StepFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Step

    turn = factory.SubFactory(TurnFactory)
    number = factory.LazyAttribute(lambda s: s.turn.steps.count() + 1)
    tool = "read_file"
    family = "reading files"
    effect = "read"


class EntryFactory(factory.django.DjangoModelFactory):
    """A transcript line, after the chat's last. Lines a test needs indexed or ordered
    with the service's own go through ``entry_append`` instead."""

    class Meta:
        model = Entry

    conversation = factory.SubFactory(ConversationFactory)
    seq = factory.LazyAttribute(lambda e: e.conversation.entries.count() + 1)
    role = EntryRole.PERSON
    text = factory.Sequence(lambda n: f"words {n}")


class ChainFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Chain

    id = factory.Sequence(lambda n: f"chain-{n}")
    owner = factory.SubFactory(OwnerFactory)


class ChatMessageFactory(factory.django.DjangoModelFactory):
    """A message card between two chats, as stored; its words as given."""

    class Meta:
        model = ChatMessage

    chain = factory.SubFactory(ChainFactory)
    sender = factory.SubFactory(ConversationFactory)
    receiver = factory.SubFactory(ConversationFactory)
    sender_title = factory.LazyAttribute(lambda m: m.sender.title)
    sender_public_id = factory.LazyAttribute(lambda m: m.sender.public_id)
    receiver_title = factory.LazyAttribute(lambda m: m.receiver.title)
    receiver_public_id = factory.LazyAttribute(lambda m: m.receiver.public_id)
    text = factory.Sequence(lambda n: f"message {n}")
    words_key = factory.Sequence(lambda n: f"words-{n}")


class WaitFactory(factory.django.DjangoModelFactory):
    """A wait for another chat to stop working."""

    class Meta:
        model = Wait

    waiter = factory.SubFactory(ConversationFactory)
    kind = WaitKind.CHAT
    target_chat = factory.SubFactory(ConversationFactory)
    target_public_id = factory.LazyAttribute(lambda w: w.target_chat.public_id)
    target_title = factory.LazyAttribute(lambda w: w.target_chat.title)


class RoutineFactory(factory.Factory):
    """The owner's routine, made by ``routine_create`` (checked, its first time worked out).

    ``now`` is the clock it is made at; the default persona runs it, in its own folder.
    """

    class Meta:
        model = dict  # made by the service, below

    owner = factory.SubFactory(OwnerFactory)
    agent = factory.LazyFunction(lambda: Agent.objects.get(is_default=True))
    name = factory.Sequence(lambda n: f"Routine {n}")
    schedule = "0 8 * * *"
    time_zone = "UTC"
    text = "Summarise the overnight alerts."
    now = None

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        from chats.gateway.routines import routine_create

        return routine_create(*args, **kwargs)

    @classmethod
    def _build(cls, model_class, *args, **kwargs):
        raise TypeError("RoutineFactory makes routines through the service")


def agent_admin_form(agent, **fields) -> dict:
    """The admin's agent change form, as posted, with ``fields`` changed (None leaves a field out)."""
    data = {
        "slug": agent.slug,
        "name": agent.name,
        "workspace": agent.workspace,
        "system_text": "",
        "engine": agent.engine,
        "engine_config": "{}",
        "created_at_0": "2025-01-01",
        "created_at_1": "00:00:00",
        "auth_profiles-TOTAL_FORMS": "0",
        "auth_profiles-INITIAL_FORMS": "0",
        "bindings-TOTAL_FORMS": "0",
        "bindings-INITIAL_FORMS": "0",
        "mcp_servers-TOTAL_FORMS": "0",
        "mcp_servers-INITIAL_FORMS": "0",
    }
    if agent.is_default:
        data["is_default"] = "on"
    data.update(fields)
    return {k: v for k, v in data.items() if v is not None}
