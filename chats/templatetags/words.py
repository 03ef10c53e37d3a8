"""Filters for whose words the page shows, and in whose voice.

- The assistant's words render as Markdown (chats/markdown.py: parsed with raw
  HTML off, then cleaned by nh3). That is the only HTML from a model the page
  takes as HTML; the person's own words, and everything else, stay plain text
  under Django's autoescape.
- Who spoke: "You", or the sender and the chat app a message came through.
- What Conch wrote for the model (its framed notes, quoting.conch_note; a refusal's words)
  is told apart from what it says to the person.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString, mark_safe

from chats import refusals
from chats.markdown import render_markdown_kept, render_markdown_live
from chats.models import EntryKind, EntryRole
from chats.quoting import is_conch_note

register = template.Library()

YOU = "You"


@register.filter
def markdown(text: str) -> SafeString:
    """The assistant's words as safe HTML. Only for the assistant's words."""
    return mark_safe(render_markdown_kept(text))  # noqa: S308 - nh3 has cleaned it (chats/markdown.py)


@register.filter
def live_markdown(text: str) -> SafeString:
    """:func:`markdown` for a running reply's words so far, pushed again as each chunk
    comes: the same HTML, its finished parts rendered once (render_markdown_live)."""
    return mark_safe(render_markdown_live(text))  # noqa: S308 - nh3 has cleaned each part


def said_by_label(data: Any) -> str:
    """``alice · Telegram`` from an entry's ``said_by``; empty if it has none."""
    said_by = data.get("said_by") if isinstance(data, dict) else None
    if not isinstance(said_by, dict):
        return ""
    name = " ".join(str(said_by.get("name") or "").split())
    app = str(said_by.get("app") or "").strip()
    app = app.title() if app.islower() else app
    return " · ".join(part for part in (name or "someone", app) if part)


@register.filter
def who_spoke(block) -> str:
    """Who wrote a reply's prompt: "You", the sender on a chat app, or what started it."""
    prompt = block.prompt
    if prompt is None:
        return ""
    if prompt.role == EntryRole.PERSON:
        return said_by_label(prompt.data) or YOU
    return block.turn.get_started_by_display().capitalize()


@register.filter
def reply_markdown(block) -> str:
    """A reply's words as the model wrote them (Markdown), for its Copy button."""
    return "\n\n".join(
        item.text
        for item in block.items
        if getattr(item, "role", None) == EntryRole.ASSISTANT
        and getattr(item, "kind", None) == EntryKind.MESSAGE
        and item.text
    )


@register.filter
def again_how(prompt) -> str:
    """ "edited" or "retried", for a prompt the person sent again (chats.runtime.turns.reply_again)."""
    how = ((prompt.data or {}).get("again") or {}).get("how") if prompt else None
    return {"edit": "edited", "retry": "retried"}.get(how or "", "")


@register.filter
def for_the_model(item) -> bool:
    """Whether a transcript line is Conch's framed note to the model (quoting.is_conch_note)."""
    return (
        getattr(item, "role", None) == EntryRole.CONCH
        and getattr(item, "kind", None) == EntryKind.NOTE
        and is_conch_note(getattr(item, "text", ""))
    )


@register.filter
def refusal_for_person(error: str) -> str:
    """A step's error in the person's words, when it is one of Conch's refusals to the model."""
    return refusals.for_person(error)


@register.filter
def rise_of(refused: dict[int, int] | None, step_pk: int) -> int | None:
    """The rise a refused step links to (chats/timeline.py's ``refused_for_trust``), if any."""
    return (refused or {}).get(step_pk)


@register.filter
def tells_the_stop(block) -> bool:
    """Whether a reply's own lines already say it was stopped (the stop note, or its card)."""
    for item in block.items:
        data = getattr(item, "data", None)
        if isinstance(data, dict) and (
            data.get("stopped_by") or data.get("card") == "chat.stopped"
        ):
            return True
    return False
