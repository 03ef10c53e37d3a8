"""Whose each persona is, and so which chats may answer with it.

A persona holds a model (its engine and address, its keys) and its tools run as the
owner of the machine. A second account the admin made used to answer with the owner's
default persona, the owner's model and keys. Now every persona belongs to an owner:

- a persona with an ``owner`` set is that account's alone;
- a persona with none is the install's own: its owner's (a superuser) and staff's, who
  change personas and models anyway (``/connect/`` and the admin are theirs).

So an account the admin made has no persona until the owner gives it one (the admin:
Personas, Owner); its new-chat form lists only its own, and a chat can't be made with
another's. Checked where a chat is made (``conversation_create``) and again at every
step before the model is asked (``chats.runtime.stepping``), so a persona taken away
later stops answering in that account's chats.
"""

from __future__ import annotations

from django.db.models import Q, QuerySet

from chats.models import Agent

ERR_NOT_YOUR_PERSONA = (
    "The persona {name!r} isn't this account's to use. The owner gives personas to "
    "accounts in the admin (Personas, Owner)."
)
ERR_NO_PERSONA = (
    "No persona is this account's yet, so no chat can answer here. The owner gives one in "
    "the admin (Personas, Owner)."
)


def runs_the_install(account) -> bool:
    """The install's owner (a superuser) and staff: theirs are the personas with no owner."""
    return bool(account.is_superuser or account.is_staff)


def may_use(account, agent: Agent) -> bool:
    """Whether ``account``'s chats may answer with ``agent``."""
    if agent.owner_id is not None:
        return agent.owner_id == account.pk
    return runs_the_install(account)


def personas_for(account) -> QuerySet[Agent]:
    """The personas ``account``'s chats may answer with."""
    if runs_the_install(account):
        return Agent.objects.filter(Q(owner__isnull=True) | Q(owner=account))
    return Agent.objects.filter(owner=account)


def persona_refusal(account, agent: Agent) -> str:
    """Why ``account``'s chat may not answer with ``agent``, or ""."""
    return "" if may_use(account, agent) else ERR_NOT_YOUR_PERSONA.format(name=agent.name)


def persona_for(account) -> Agent | None:
    """The persona a new chat of ``account``'s answers with when none is chosen: the
    install's default, if it is theirs, else their first; None if they have none."""
    usable = personas_for(account)
    return usable.filter(is_default=True).first() or usable.order_by("slug").first()
