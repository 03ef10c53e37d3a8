"""Chats: making, renaming, moving between modes and archiving them, and their transcripts.

Services are keyword-only and named ``<entity>_<action>``; each keeps its
transaction short, and publishes its events inside it (they are sent after it
commits). A chat's row lock (``Conversation.objects.lock``) orders what is
written about it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max

from chats import events, personas, roots
from chats.limits import LIMITS
from chats.models import (
    Agent,
    Conversation,
    Entry,
    EntryKind,
    Mode,
    Origin,
    Taint,
    Turn,
)
from chats.quoting import scrub_secrets
from chats.runtime.standing import standing_oks_clear_locked
from chats.taint import Cause, taint_raise, taint_rise_record

ERR_TITLE_TOO_LONG = "A chat's title is at most {chars} characters."
ERR_TITLE_LENGTH = "A chat's title must be 1 to {chars} characters."
UNTITLED = "New chat"


class ConchError(Exception):
    """A refusal a person or a tool can read; views turn it into a 400."""


def default_agent() -> Agent:
    agent = Agent.objects.filter(is_default=True).first()
    if agent is None:
        workspace = Path(settings.CONCH_WORKSPACE)
        workspace.mkdir(parents=True, exist_ok=True)
        agent, _ = Agent.objects.get_or_create(
            slug="main", defaults={"name": "Conch", "workspace": str(workspace), "is_default": True}
        )
    return agent


def persona_for_new_chat(owner) -> Agent | None:
    """The persona a new chat of ``owner``'s answers with when none is chosen: the install's
    default (made on first use) if it is theirs, else their own first; None if they have none."""
    agent = default_agent()
    return agent if personas.may_use(owner, agent) else personas.persona_for(owner)


def entry_append(
    *,
    conversation: Conversation,
    role: str,
    text: str,
    kind: str = EntryKind.MESSAGE,
    turn: Turn | None = None,
    data: dict[str, Any] | None = None,
) -> Entry:
    """Append one transcript line. Call inside ``atomic()``; the chat's row lock orders them."""
    last = Entry.objects.filter(conversation=conversation).aggregate(m=Max("seq"))["m"] or 0
    return Entry.objects.create(
        conversation=conversation,
        turn=turn,
        seq=last + 1,
        role=role,
        kind=kind,
        text=text,
        data=data or {},
    )


def conversation_create(
    *,
    owner,
    title: str,
    folder: str | None = None,
    agent: Agent | None = None,
    origin: str = Origin.OWN,
    origin_channel: str = "",
    mode: str = Mode.AUTO,
    inbound: str = "",
    script: list | None = None,
    parent: Conversation | None = None,
    taint: str = Taint.NONE,
    taint_cause: Cause | None = None,
    place: str = "local",
    session_key: str | None = None,
    public_id: str | None = None,
) -> Conversation:
    title = (title or "").strip()
    # Left untitled, it is "New chat" until the person's first message names it.
    untitled = not title
    title = title or UNTITLED
    if len(title) > LIMITS.title_chars:
        raise ConchError(ERR_TITLE_TOO_LONG.format(chars=LIMITS.title_chars))
    if agent is None:
        agent = persona_for_new_chat(owner)
        if agent is None:
            raise ConchError(personas.ERR_NO_PERSONA)
    refused = personas.persona_refusal(owner, agent)
    if refused:
        raise ConchError(refused)
    allowed = roots.roots_for(owner)
    folder = str(folder or roots.default_folder(owner, allowed) or agent.workspace)
    refused = roots.folder_refusal(owner, folder, allowed)
    if refused:
        raise ConchError(refused)
    with transaction.atomic():
        conversation = Conversation.objects.create(
            owner=owner,
            agent=agent,
            title=title,
            untitled=untitled,
            folder=str(folder),
            origin=origin,
            origin_channel=origin_channel,
            mode=mode,
            inbound=inbound,
            script=script or [],
            parent=parent,
            taint=taint,
            place=place,
            session_key=session_key,
            **({"public_id": public_id} if public_id else {}),
        )
        if taint != Taint.NONE:
            # Made careful: its timeline says why from the start, in this transaction.
            if taint_cause is None:
                raise ValueError("A chat made careful needs the cause (chats.taint.Cause).")
            taint_rise_record(
                conversation=conversation, before=Taint.NONE, after=taint, cause=taint_cause
            )
        events.publish_chat(conversation)  # a row no page has yet
    return conversation


def title_from_message(text: str) -> str:
    """A title made of a message's first line: spaces folded, secrets out, cut to fit."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    title = scrub_secrets(" ".join(first.split()))
    if len(title) > LIMITS.title_chars:
        title = title[: LIMITS.title_chars - 1].rstrip() + "…"
    return title or UNTITLED


def conversation_title_from_first_message(*, conversation: Conversation, text: str) -> None:
    """An untitled chat takes its title from the person's first message.

    Precondition: inside ``atomic()`` holding the chat's row lock (``message_send``).
    """
    if not conversation.untitled:
        return
    conversation.title = title_from_message(text)
    conversation.untitled = False
    conversation.save(update_fields=["title", "untitled", "updated_at"])
    events.publish_chat(conversation)


def conversation_rename(*, conversation: Conversation, title: str) -> Conversation:
    title = (title or "").strip()
    if not title or len(title) > LIMITS.title_chars:
        raise ConchError(ERR_TITLE_LENGTH.format(chars=LIMITS.title_chars))
    with transaction.atomic():
        conversation = Conversation.objects.lock(conversation.pk)
        conversation.title = title
        conversation.untitled = False
        conversation.save(update_fields=["title", "untitled", "updated_at"])
        events.publish_chat(conversation)
    return conversation


def conversation_set_mode(*, conversation: Conversation, mode: str) -> Conversation:
    if mode not in Mode.values:
        raise ConchError(f"The mode must be one of: {', '.join(Mode.values)}.")
    with transaction.atomic():
        conversation = Conversation.objects.lock(conversation.pk)
        if conversation.mode != mode:
            # The person's "don't ask again" was for the chat as it was: a new mode starts afresh.
            standing_oks_clear_locked(conversation=conversation)
        conversation.mode = mode
        conversation.save(update_fields=["mode", "updated_at"])
        events.publish_chat(conversation)
    return conversation


def someone_elses_words_came(
    *, conversation: Conversation, who: str, channel: str = "", message_id: str = ""
) -> Conversation:
    """Someone else's words came into this chat (a chat app's group, a shared DM): it is
    no longer only the person's (taint ``person``), and from now on a write waits for the
    person's OK, as in any chat with someone else's words: an Auto chat moves to Ask."""
    raised = taint_raise(
        conversation=conversation,
        taint=Taint.PERSON,
        cause=Cause.stranger(channel=channel, sender=who, message_id=message_id),
    )
    if raised and conversation.mode == Mode.AUTO:
        conversation = conversation_set_mode(conversation=conversation, mode=Mode.ASK)
    return conversation


def conversation_pin(*, conversation: Conversation, pinned: bool = True) -> Conversation:
    """Pin the chat to the top of the list, or let it go back to its day. A pinned chat
    also stays through the gateway's pruning (chats.gateway.maintenance)."""
    with transaction.atomic():
        conversation = Conversation.objects.lock(conversation.pk)
        conversation.pinned = pinned
        conversation.save(update_fields=["pinned", "updated_at"])
        events.publish_chat(conversation)  # its row moves, in every tab
    return conversation


def conversation_archive(*, conversation: Conversation, archived: bool = True) -> Conversation:
    with transaction.atomic():
        conversation = Conversation.objects.lock(conversation.pk)
        conversation.archived = archived
        conversation.save(update_fields=["archived", "updated_at"])
        events.publish_chat(conversation)  # it leaves the list, or comes back
    return conversation
