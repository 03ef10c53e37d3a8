"""Factories for the records tests make. Persona fixtures live in conftest.py."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from chats.models import Agent, Conversation, Origin, Step, Task, Turn


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"person{n}")
    is_staff = True
    is_superuser = True


class AgentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Agent
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"agent{n}")
    name = factory.LazyAttribute(lambda a: a.slug.title())
    workspace = factory.LazyFunction(lambda: "/tmp")
    is_default = False


class ConversationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Conversation

    owner = factory.SubFactory(UserFactory)
    agent = factory.SubFactory(AgentFactory)
    title = factory.Sequence(lambda n: f"Chat {n}")
    folder = factory.LazyAttribute(lambda c: c.agent.workspace)
    origin = Origin.OWN


class TurnFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Turn

    conversation = factory.SubFactory(ConversationFactory)
    number = factory.Sequence(lambda n: n + 1)
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
    number = factory.Sequence(lambda n: n + 1)
    tool = "read_file"
    family = "reading files"
    effect = "read"


def agent_admin_form(agent, **fields) -> dict:
    """The admin's agent change form, as posted, with ``fields`` changed (None leaves a field out)."""
    data = {
        "slug": agent.slug,
        "name": agent.name,
        "workspace": agent.workspace,
        "allowed_tools": "[]",
        "system_text": "",
        "engine": agent.engine,
        "engine_config": "{}",
        "created_at_0": "2025-01-01",
        "created_at_1": "00:00:00",
        "auth_profiles-TOTAL_FORMS": "0",
        "auth_profiles-INITIAL_FORMS": "0",
        "bindings-TOTAL_FORMS": "0",
        "bindings-INITIAL_FORMS": "0",
    }
    if agent.is_default:
        data["is_default"] = "on"
    data.update(fields)
    return {k: v for k, v in data.items() if v is not None}
