"""A chat's trust timeline, as the person reads it: each rise of its taint, when, and why.

The record is :class:`~chats.models.TaintRise`, written by ``chats.taint`` as each
rise happens; this module only reads it. :func:`chat_timeline` gives a chat's rows
for a viewer, each with the way back through other chats when the care came from
one: "from ‘Release notes’, which had read https://… (fetch_page) at 09:58",
following each rise's ``source_rise`` for at most ``LIMITS.trust_path_hops`` chats.

What a row may show, and nothing else:

- the URLs and paths a chat itself used (with anything shaped like a key taken out);
- the titles of the viewer's own chats;
- Conch's own words.

Another chat's words never appear: a rise holds none, and none are read here.

Which chats the path goes through is the viewer's own page's rule: a chat of
theirs is named and linked, whatever its origin or taint, and any other chat (given
to another owner, or deleted) is "a chat that is gone", where the path stops. That
is wider than ``together.visibility.is_yours``, and on purpose: ``is_yours`` is what
one chat's *assistant* may see of another, and a chat with someone else's words is
not yours to an assistant, so no tool lists it. The timeline is shown only to the
person, never to a model, and the person already sees every chat of theirs, by the
same title, in their own chat list: naming it here tells them nothing new, and
telling them which of their chats the care came through is the point.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone

from chats.limits import LIMITS
from chats.models import TAINT_ORDER, Conversation, Taint, TaintCause, TaintRise
from chats.quoting import scrub_secrets
from chats.refusals import NO_FOLDER_OF_ITS_OWN, NOT_IN_SET

__all__ = [
    "CAREFUL",
    "GONE",
    "UNRECORDED",
    "ChatRef",
    "Hop",
    "Row",
    "Timeline",
    "Words",
    "careful_rise",
    "chat_timeline",
    "refused_for_trust",
    "rises_to_person",
    "when_words",
]

# The badge, by the chat's taint (the Taint labels, as the person reads them).
CAREFUL = {
    Taint.UNTRUSTED: f"Careful: {Taint.UNTRUSTED.label}",
    Taint.PERSON: f"Careful: has {Taint.PERSON.label}",
}
GONE = "a chat that is gone"
UNRECORDED = "careful since before Conch wrote down why"
# A rise's causes that came from another chat: each names it (``TaintRise.source``).
FROM_A_CHAT = frozenset(
    {
        TaintCause.MESSAGE,
        TaintCause.WAIT,
        TaintCause.TASK,
        TaintCause.CHAT_READ,
        TaintCause.ROUTINE,
        TaintCause.PARENT,
        TaintCause.PREVIOUS,
    }
)
# Refused steps whose reason is someone else's words in the chat (chats/refusals.py).
REFUSED_FOR_SOMEONE_ELSES_WORDS = (NOT_IN_SET, NO_FOLDER_OF_ITS_OWN)

_SOURCE_FIELDS = ("source__public_id", "source__title", "source__owner_id")
_RISE_FIELDS = (
    "id",
    "conversation_id",
    "at",
    "before",
    "after",
    "cause",
    "url",
    "path",
    "source_id",
    "source_taint",
    "source_rise_id",
    "step_id",
    "step__tool",
    "detail",
    *_SOURCE_FIELDS,
)


@dataclass(frozen=True)
class ChatRef:
    """A chat a row names: its title and link while it is the viewer's, else gone."""

    title: str = ""
    href: str = ""
    public_id: str = ""

    @property
    def gone(self) -> bool:
        return not self.href

    @property
    def text(self) -> str:
        return GONE if self.gone else f"‘{self.title}’"


@dataclass(frozen=True)
class Words:
    """A rise's why in Conch's words, around the chat it names (if it names one)."""

    before: str
    chat: ChatRef | None = None
    after: str = ""

    @property
    def text(self) -> str:
        return self.before + (self.chat.text if self.chat else "") + self.after


@dataclass(frozen=True)
class Hop:
    """One chat further back on the path: that chat, and why it was careful then."""

    chat: ChatRef
    had: Words
    when: str  # "at 09:58", in the viewer's time zone; "" when not known
    rise_id: int = 0  # the rise of ``chat`` this hop tells of


@dataclass(frozen=True)
class Row:
    """One rise of the chat's taint."""

    id: int
    at: datetime
    clock: str  # "10:02", or "3 Dec 10:02" on another day
    when: str  # "at 10:02", "on 3 Dec at 10:02"
    before: str
    after: str
    did: Words
    link: str  # the step or the message card on this chat's page ("#step-…"), or ""
    link_label: str
    path: tuple[Hop, ...] = ()
    path_goes_on: ChatRef | None = None  # cut at the bound: where to follow it further

    @property
    def before_label(self) -> str:
        return _label(self.before)

    @property
    def after_label(self) -> str:
        return _label(self.after)

    @property
    def anchor(self) -> str:
        return f"rise-{self.id}"


@dataclass(frozen=True)
class Timeline:
    taint: str
    rows: tuple[Row, ...]
    unrecorded: bool  # careful before any rise Conch wrote down says so

    @property
    def careful(self) -> str:
        return CAREFUL.get(Taint(self.taint), "") if self.taint in Taint.values else ""

    def row(self, rise_id: Any) -> Row | None:
        return next((row for row in self.rows if row.id == rise_id), None)


# ---------------------------------------------------------------------------
# Words


def _label(taint: str) -> str:
    return str(Taint(taint).label) if taint in Taint.values else taint


def when_words(at: datetime, *, zone: tzinfo, now: datetime) -> tuple[str, str]:
    """``at`` in ``zone``: the clock ("10:02", "3 Dec 10:02") and the phrase ("at 10:02")."""
    local, today = at.astimezone(zone), now.astimezone(zone).date()
    clock = f"{local:%H:%M}"
    if local.date() == today:
        return clock, f"at {clock}"
    day = f"{local.day} {local:%b}" if local.year == today.year else f"{local.day} {local:%b %Y}"
    return f"{day} {clock}", f"on {day} at {clock}"


def _cut(text: Any, limit: int) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _address(text: Any) -> str:
    """A URL or path the chat itself used, with anything shaped like a key taken out."""
    return _cut(scrub_secrets(str(text or "")), LIMITS.url_shown_chars)


def _detail(rise: TaintRise, key: str) -> str:
    detail = rise.detail if isinstance(rise.detail, dict) else {}
    return _cut(detail.get(key), LIMITS.name_chars)


def _what_was_read(rise: TaintRise) -> str:
    what = _address(rise.url) or _address(rise.path) or "a page"
    tool = getattr(rise.step, "tool", "") if rise.step_id else ""
    return f"{what} ({tool})" if tool else what


def _words(rise: TaintRise, chat: ChatRef | None, *, had: bool) -> Words:
    """Why the chat of ``rise`` was careful, in the past (``had``: one step further back)."""

    def say(did: str, had_done: str) -> str:
        return had_done if had else did

    cause = rise.cause
    if cause == TaintCause.PAGE:
        return Words(say("read ", "had read ") + _what_was_read(rise))
    if cause == TaintCause.MCP:
        url = _address(rise.url)
        return Words(
            say("used ", "had used ")
            + f"{_detail(rise, 'tool') or 'a tool'} on the MCP server ‘{_detail(rise, 'server')}’"
            + (f" ({url})" if url else "")
        )
    if cause == TaintCause.COMMAND_NETWORK:
        detail = rise.detail if isinstance(rise.detail, dict) else {}
        how = (
            "in the sandbox, with the network its persona allows"
            if detail.get("sandboxed")
            else "without the sandbox"
        )
        return Words(
            say("ran a command", "had run a command") + f" that could reach the network ({how})"
        )
    if cause == TaintCause.STRANGER:
        channel, sender = _detail(rise, "channel"), _detail(rise, "sender")
        where = ", ".join(part for part in (channel, f"from {sender}" if sender else "") if part)
        return Words(
            say("took in someone else's words", "had someone else's words")
            + (f" ({where})" if where else "")
        )
    if cause == TaintCause.IMPORT:
        claimed = _detail(rise, "claimed")
        said = (
            f", which said it had {Taint(claimed).label}"
            if claimed in (Taint.UNTRUSTED, Taint.PERSON)
            else ""
        )
        archive = _address(_detail(rise, "archive")) or "an archive"
        return Words(say("was imported from ", "had been imported from ") + archive + said)
    if cause == TaintCause.SETUP:
        return Words(say("started careful, as set up", "had started careful, as set up"))
    chat = chat or ChatRef()
    if cause == TaintCause.MESSAGE:
        return Words(say("took in a message from ", "had taken in a message from "), chat)
    if cause == TaintCause.WAIT:
        return Words(say("waited on ", "had waited on "), chat, " and read how it ended")
    if cause == TaintCause.TASK:
        return Words(say("read the result of its task ", "had read the result of its task "), chat)
    if cause == TaintCause.CHAT_READ:
        return Words(say("read the words of ", "had read the words of "), chat)
    if cause == TaintCause.ROUTINE:
        name = _detail(rise, "name")
        return Words(
            say("took in the result of ", "had taken in the result of "),
            chat,
            f", a run of the routine ‘{name}’" if name else ", a routine's run",
        )
    if cause == TaintCause.PARENT:
        return Words(say("was started by ", "had been started by "), chat, ", which was careful")
    if cause == TaintCause.PREVIOUS:
        return Words(
            say("came after ", "had come after "),
            chat,
            ", the session before it, which had someone else's words",
        )
    return Words(say("became careful", "had become careful"))


# ---------------------------------------------------------------------------
# Reading


def _rises() -> QuerySet[TaintRise]:
    return TaintRise.objects.select_related("source", "step").only(*_RISE_FIELDS)


def _chat_ref(rise: TaintRise, *, viewer_id: int) -> ChatRef | None:
    """The chat ``rise`` came from, as the viewer may see it; None for a cause with none."""
    if rise.cause not in FROM_A_CHAT:
        return None
    source = rise.source
    if source is None or source.owner_id != viewer_id:
        return ChatRef()
    href = reverse("chats:chat", args=[source.public_id])
    if rise.source_rise_id:
        href += f"#rise-{rise.source_rise_id}"
    return ChatRef(title=source.title, href=href, public_id=source.public_id)


def _link(rise: TaintRise) -> tuple[str, str]:
    """Where on this chat's page the rise came in: its step, or the message's card."""
    if rise.step_id:
        return f"#step-{rise.step_id}", "the step"
    message = _detail(rise, "message")
    if rise.cause == TaintCause.MESSAGE and message:
        return f"#message-{message}", "the message"
    return "", ""


def _follows(rise: TaintRise, *, viewer_id: int) -> bool:
    """Whether the path goes on from ``rise`` to its source's own rise."""
    return (
        rise.cause in FROM_A_CHAT
        and rise.source is not None
        and rise.source.owner_id == viewer_id
        and rise.source_rise_id is not None
    )


def chat_timeline(
    conversation: Conversation,
    *,
    viewer_id: int,
    zone: tzinfo | None = None,
    now: datetime | None = None,
) -> Timeline:
    """The chat's rises, oldest first, each with its path, for ``viewer_id`` to read.

    Queries: one for the chat's rises, then one for each chat further back on the
    longest path, at most ``LIMITS.trust_path_hops``: the paths of every row are read
    together, a step back at a time, however many rows there are.
    """
    zone = zone or timezone.get_default_timezone()
    now = now or timezone.now()
    if conversation.owner_id != viewer_id:
        return Timeline(taint=Taint.NONE, rows=(), unrecorded=False)
    newest = _rises().filter(conversation_id=conversation.pk).order_by("-at", "-id")
    rises = list(newest[: LIMITS.trust_rows])[::-1]
    # Each row's path, a rise at a time: the rise it is at now, and the hops so far.
    paths: dict[int, list[TaintRise]] = {rise.pk: [] for rise in rises}
    at = {rise.pk: rise for rise in rises if _follows(rise, viewer_id=viewer_id)}
    for _ in range(LIMITS.trust_path_hops):
        if not at:
            break
        wanted = {rise.source_rise_id for rise in at.values() if rise.source_rise_id}
        found = {rise.pk: rise for rise in _rises().filter(pk__in=wanted)}
        going = {}
        for row_id, rise in at.items():
            back = found.get(rise.source_rise_id or 0)
            # A rise of the very chat the path names, or the path stops.
            if back is None or back.conversation_id != rise.source_id:
                continue
            paths[row_id].append(back)
            if _follows(back, viewer_id=viewer_id):
                going[row_id] = back
        at = going
    rows = []
    for rise in rises:
        clock, when = when_words(rise.at, zone=zone, now=now)
        link, link_label = _link(rise)
        hops = []
        came_from = _chat_ref(rise, viewer_id=viewer_id)
        for back in paths[rise.pk]:
            assert came_from is not None  # a path only follows a rise that names its chat
            hops.append(
                Hop(
                    chat=came_from,
                    had=_words(back, _chat_ref(back, viewer_id=viewer_id), had=True),
                    when=when_words(back.at, zone=zone, now=now)[1],
                    rise_id=back.pk,
                )
            )
            came_from = _chat_ref(back, viewer_id=viewer_id)
        last = paths[rise.pk][-1] if paths[rise.pk] else None
        rows.append(
            Row(
                id=rise.pk,
                at=rise.at,
                clock=clock,
                when=when,
                before=rise.before,
                after=rise.after,
                did=_words(rise, _chat_ref(rise, viewer_id=viewer_id), had=False),
                link=link,
                link_label=link_label,
                path=tuple(hops),
                path_goes_on=came_from if rise.pk in at and last is not None else None,
            )
        )
    return Timeline(
        taint=conversation.taint,
        rows=tuple(rows),
        unrecorded=_unrecorded(conversation.taint, rises[-1].after if rises else Taint.NONE),
    )


def _unrecorded(taint: str, latest: str) -> bool:
    return TAINT_ORDER.get(Taint(taint), 0) > TAINT_ORDER.get(Taint(latest), 0)


def careful_rise(conversation: Conversation) -> int | None:
    """The rise that made the chat as careful as it is now, or None: not careful, or
    careful since before Conch wrote down why. One query (none for a chat not careful)."""
    if conversation.taint == Taint.NONE:
        return None
    latest = (
        TaintRise.objects.filter(conversation_id=conversation.pk)
        .order_by("-at", "-id")
        .values_list("pk", "after")
        .first()
    )
    if latest is None or _unrecorded(conversation.taint, latest[1]):
        return None
    return latest[0]


def rises_to_person(conversation_ids: set[int]) -> dict[int, tuple[int, datetime]]:
    """Each chat's rise that brought someone else's words into it: its id and when. One query."""
    if not conversation_ids:
        return {}
    found: dict[int, tuple[int, datetime]] = {}
    rows = (
        TaintRise.objects.filter(conversation_id__in=conversation_ids, after=Taint.PERSON)
        .order_by("at", "id")
        .values_list("conversation_id", "pk", "at")
    )
    for chat_id, pk, at in rows:
        found.setdefault(chat_id, (pk, at))
    return found


def refused_for_trust(conversation: Conversation, steps: list[Any]) -> dict[int, int]:
    """The steps refused because someone else's words are in the chat, each with the rise
    that brought them: ``{step id: rise id}``. One query, and none when no step was."""
    refused = [
        step
        for step in steps
        if step.error and any(r.match(step.error) for r in REFUSED_FOR_SOMEONE_ELSES_WORDS)
    ]
    if not refused:
        return {}
    rise = rises_to_person({conversation.pk}).get(conversation.pk)
    if rise is None:
        return {}
    rise_id, at = rise
    return {step.pk: rise_id for step in refused if step.started_at >= at}
