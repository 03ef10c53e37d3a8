"""The workspace page's regions, rendered in one place.

The full page, the HTMX swap after a POST, the refetch after a gap, and the
socket push all render the same named partials of ``workspace.html``. The
views and the consumer call these functions; neither builds HTML itself.

Everything here reads (through the selectors) and renders. Model text stays
plain strings, so the template's autoescape covers it; the one exception is the
assistant's words, which the ``markdown`` filter renders and nh3 cleans
(chats/markdown.py). Nothing here is marked safe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime, tzinfo
from typing import Any

from django.template.loader import render_to_string
from django.utils import timezone

from chats import cards, events, hooks, timeline
from chats.limits import LIMITS
from chats.models import Conversation, Inbound, Mode, Status, Step, Taint, Turn, TurnState
from chats.runtime import selectors
from chats.runtime.standing import standing_ok_offer, standing_oks_paused_why
from chats.runtime.turns import again_refusal
from chats.tools.registry import THINKING, ToolError, get_tool

PAGE = "workspace.html"

# The chat page's regions that a change can touch, in page order.
CHAT_REGIONS = ("chat-title", "chat-settings", "chat-controls", "transcript")
# Events that change what a chat's row or page shows.
SHOWN_EVENTS = frozenset(
    {
        events.CONVERSATION_UPDATED,
        events.STATUS,
        events.CONVERSATION_DELETED,
        events.TASK_CHANGED,
    }
)


@dataclass(frozen=True)
class Badge:
    """A chat's state as the badge says it: "working" and what it is doing, or needs you…"""

    status: str
    label: str
    doing: str = ""
    since: datetime | None = None


def badge_for(status: str, *, family: str = "", step_started_at: datetime | None = None) -> Badge:
    label = Status(status).label if status in Status.values else status
    if status != Status.WORKING:
        return Badge(status, label)
    if family:
        return Badge(status, label, family, step_started_at)
    return Badge(status, label, THINKING)


def row_badge(row: selectors.ChatSnapshot) -> Badge:
    reply = row.reply
    return badge_for(
        row.status,
        family=reply.family if reply else "",
        step_started_at=reply.step_started_at if reply else None,
    )


def chat_badge(conversation: Conversation, open_turn: Turn | None) -> Badge:
    return badge_for(
        conversation.status,
        family=open_turn.step_family if open_turn else "",
        step_started_at=open_turn.step_started_at if open_turn else None,
    )


# ---------------------------------------------------------------------------
# Contexts


def with_held(rows: list[selectors.ChatSnapshot]) -> list[selectors.ChatSnapshot]:
    """The rows, each with what is held for the person in it ("1 held"): one query per app."""
    held = hooks.held_for_you([row.pk for row in rows]) if rows else {}
    return [replace(row, held=held[row.pk]) if row.pk in held else row for row in rows]


def list_context(
    *, owner_id: int, current_chat_id: str | None = None, zone: tzinfo | None = None
) -> dict[str, Any]:
    """The sidebar, grouped by the days of ``zone`` (the person's browser's; Conch's own
    when it is not known). A pushed row carries no day: the page finds its group by the
    row's sort key and the groups' starts, which the list brings (selectors.chat_groups)."""
    zone = zone or timezone.get_default_timezone()
    now = timezone.now()
    rows = with_held(selectors.chat_list_rows(owner_id=owner_id))
    return {
        "rows": rows,
        "groups": selectors.chat_groups(rows, now=now, zone=zone),
        "list_zone": str(zone),
        # When Today turns into Yesterday: the page fetches its list again then.
        "regroup_at": int(selectors.next_day_starts(now=now, zone=zone).timestamp() * 1000),
        "current_chat_id": current_chat_id,
        # The tab's title counts these, "(2) Conch"; conch.js recounts the rows after a push.
        "needs_count": sum(1 for row in rows if row.needs_you),
    }


def transcript_context(*, conversation: Conversation) -> dict[str, Any]:
    """The transcript, with each card explained as it is now (chats/cards.py), and each
    step refused for someone else's words linked to the rise that brought them."""
    blocks = selectors.chat_transcript(conversation=conversation)
    cards.cards_load(conversation=conversation, blocks=blocks)
    steps = [item for block in blocks for item in block.items if isinstance(item, Step)]
    last = next((block for block in reversed(blocks) if block.turn is not None), None)
    again = last.turn if last and not again_refusal(last.turn, last.prompt) else None
    return {
        "chat": conversation,
        "blocks": blocks,
        # The reply the person may retry, and whose message they may edit and resend.
        "again_turn": again.number if again else None,
        "inbounds": Inbound.choices,
        "queued": selectors.chat_queued(conversation=conversation),
        "refused_for_trust": timeline.refused_for_trust(conversation, steps),
    }


@dataclass(frozen=True)
class AsksBecause:
    """Why a request asks, when the chat's taint made it: the rise's words, or none
    when the chat was careful before Conch wrote down why."""

    row: timeline.Row | None
    label: str


def asks_because(pending: Turn | None, trust: timeline.Timeline | None) -> AsksBecause | None:
    """The line a request gives its ask when the chat's taint made it (chats/runtime/standing.py's
    ``asks_because_careful``, kept with the request as it was made)."""
    careful = (pending.pending_action or {}).get("careful") if pending is not None else None
    if not isinstance(careful, dict) or trust is None:
        return None
    row = trust.row(careful.get("rise")) if careful.get("rise") else None
    return AsksBecause(row=row, label=str(Taint(trust.taint).label))


def chat_context(*, conversation: Conversation, zone: tzinfo | None = None) -> dict[str, Any]:
    """A chat's page regions. ``zone`` is the person's, for the times the trust timeline says."""
    open_turn = selectors.open_turn(conversation)
    pending = (
        open_turn
        if open_turn is not None
        and open_turn.state == TurnState.NEEDS_YOU
        and open_turn.pending_action
        else None
    )
    trust = (
        timeline.chat_timeline(conversation, viewer_id=conversation.owner_id, zone=zone)
        if conversation.taint != Taint.NONE
        else None
    )
    return {
        **transcript_context(conversation=conversation),
        "chat_badge": chat_badge(conversation, open_turn),
        "trust": trust,
        "asks_because": asks_because(pending, trust),
        "unrecorded": timeline.UNRECORDED,
        "open_turn": open_turn,
        "pending": pending,
        "asked": conversation.status == Status.NEEDS_YOU and pending is None,
        "tasks": selectors.chat_tasks(conversation=conversation),
        "modes": Mode.choices,
        **allowed_context(conversation=conversation, pending=pending),
    }


@dataclass(frozen=True)
class AlwaysOffer:
    """The request's "don't ask again": what it would cover, or why it isn't offered."""

    what: str = ""
    why_not: str = ""


def allowed_context(*, conversation: Conversation, pending: Turn | None) -> dict[str, Any]:
    """The chat's standing OKs, whether they are used now, and what the request offers."""
    offer = None
    if pending is not None and pending.pending_action:
        try:
            tool = get_tool(pending.pending_action["tool"], conversation.agent)
        except ToolError:
            pass  # a tool no longer registered: Approve says so, and nothing is offered
        else:
            scope, why = standing_ok_offer(conversation, tool, pending.pending_action["raw_args"])
            offer = AlwaysOffer(what=scope.for_person()) if scope else AlwaysOffer(why_not=why)
    return {
        "allowed": selectors.chat_allowed(conversation=conversation),
        "allowed_paused": standing_oks_paused_why(conversation),
        "always": offer,
        "deny_reason_chars": LIMITS.deny_reason_chars,
    }


def page_context(
    *, owner_id: int, conversation: Conversation | None = None, zone: tzinfo | None = None
) -> dict[str, Any]:
    """Everything the full page shows. The sequence number is read first, so any
    change after it arrives with a higher number and is never mistaken for old."""
    seq = events.current_seq(owner_id)
    context = {
        "seq": seq,
        **list_context(
            owner_id=owner_id,
            current_chat_id=conversation.public_id if conversation else None,
            zone=zone,
        ),
    }
    if conversation is not None:
        context.update(chat_context(conversation=conversation, zone=zone))
    return context


# ---------------------------------------------------------------------------
# Rendering


def render_region(name: str, context: dict[str, Any]) -> str:
    return render_to_string(f"{PAGE}#{name}", context).strip()


def render_seq(seq: int, *, kind: str = "event") -> str:
    """The marker every push starts with; conch.js reads it to notice gaps."""
    return render_region("seq", {"seq": seq, "seq_kind": kind, "oob": True})


# An answer's or a refetch's regions, marked with the number read before them: every
# event numbered up to it is in them. conch.js drops pushes no newer than what the page
# shows, and fetches again after regions older than a push it has already shown.
ANSWER = "answer"


def render_list_bundle(
    *, owner_id: int, current_chat_id: str | None = None, zone: tzinfo | None = None
) -> str:
    seq = events.current_seq(owner_id)
    context = {
        **list_context(owner_id=owner_id, current_chat_id=current_chat_id, zone=zone),
        "oob": True,
    }
    return f"{render_seq(seq, kind=ANSWER)}\n{render_region('chat-list', context)}"


def render_chat_bundle(
    *, owner_id: int, conversation: Conversation, zone: tzinfo | None = None
) -> str:
    """The list and every region of one chat's page, as out-of-band swaps, read afresh
    after the number they are marked with."""
    seq = events.current_seq(owner_id)
    conversation.refresh_from_db()
    context = {
        **list_context(owner_id=owner_id, current_chat_id=conversation.public_id, zone=zone),
        **chat_context(conversation=conversation, zone=zone),
        "oob": True,
    }
    return "\n".join(
        [
            render_seq(seq, kind=ANSWER),
            *(render_region(name, context) for name in ("chat-list", *CHAT_REGIONS)),
        ]
    )


def render_error(slot: str, message: str) -> str:
    """A refusal, into the page's error slot (``flash`` or ``composer-error``)."""
    return render_region("error", {"slot": slot, "message": message, "oob": True})


def _owned_chat(owner_id: int, public_id: str) -> Conversation | None:
    return (
        Conversation.objects.select_related("agent")
        .filter(owner_id=owner_id, public_id=public_id)
        .first()
    )


@dataclass(frozen=True)
class ChatPart:
    """One thing a chat's own page is pushed for a run of events: every region of it, or
    its transcript."""

    kind: str  # REGIONS or TRANSCRIPT

    def covers(self, earlier: ChatPart) -> bool:
        """Whether this part, sent after ``earlier``, leaves nothing of it to show: each
        is rendered from the chat as it is then, and every region holds the transcript."""
        return self.kind == REGIONS or earlier.kind == TRANSCRIPT


REGIONS, TRANSCRIPT = "regions", "transcript"


@dataclass(frozen=True)
class Words:
    """A running reply's words so far (``turn``, ``text``: carried by its ``reply.text``
    event, never stored), and the model's wait between tries, in the person's words."""

    turn: int
    text: str = ""
    wait: str = ""


def words_of(data: dict | None) -> Words | None:
    """The words a ``reply.text`` event carries, or None if they are for no reply."""
    if not data or not data.get("turn"):
        return None
    return Words(turn=data["turn"], text=str(data.get("text", "")), wait=str(data.get("wait", "")))


# The marker kind of a push of words (render_words): no number of its own.
WORDS_KIND = "words"


def render_words(*, words: Words) -> str:
    """What the tabs showing a chat are pushed for its running reply's words, the same
    bytes for each, and no database read: the marker of a push that takes no number
    (conch.js neither counts it nor minds a reply it no longer shows), then the words."""
    marker = render_region("seq", {"seq": events.UNNUMBERED, "seq_kind": WORDS_KIND, "oob": True})
    context = {"turn_number": words.turn, "text": words.text, "wait": words.wait, "oob": True}
    return f"{marker}\n{render_region('reply-text', context)}"


@dataclass
class PushRun:
    """A run of events of one owner with consecutive numbers, as the one push that
    carries them all: the numbers ``first`` to ``last``, the chats whose sidebar row
    they change (each once), and, for each chat, the parts its own page needs, in
    order, without any that a later one covers.

    The push is rendered from the chats as they are when it renders, after every event
    of the run, so it shows each event's change as a push of its own would have (and
    a run heard while the last push rendered costs one render a chat, not one an event).
    """

    first: int
    last: int
    rows: list[str] = field(default_factory=list)
    parts: dict[str, list[ChatPart]] = field(default_factory=dict)

    def add(self, event: str, seq: int, conversation_id: str | None, data: dict | None) -> None:
        """Take in the next event of the run (numbered ``last + 1``)."""
        self.last = seq
        if not conversation_id:
            return
        if event in SHOWN_EVENTS or event in events.ROW_CARD_EVENT_TYPES:
            if conversation_id not in self.rows:
                self.rows.append(conversation_id)
        part = chat_part(event)
        if part is not None:
            parts = self.parts.setdefault(conversation_id, [])
            parts[:] = [earlier for earlier in parts if not part.covers(earlier)]
            parts.append(part)

    @classmethod
    def of(cls, event: str, seq: int, conversation_id: str | None, data: dict | None) -> PushRun:
        run = cls(first=seq, last=seq)
        run.add(event, seq, conversation_id, data)
        return run


def chat_part(event: str) -> ChatPart | None:
    """What of a chat's own page an event changes, if anything."""
    if event in events.CARD_EVENT_TYPES:
        return ChatPart(TRANSCRIPT)
    if event in SHOWN_EVENTS:
        return ChatPart(REGIONS)
    return None


def render_run(*, owner_id: int, run: PushRun) -> str:
    """What every tab of the owner gets for a run, the same bytes for each: the marker
    of its numbers, then the sidebar rows the run changed."""
    marker = render_region(
        "seq",
        {"seq": run.last, "first": run.first, "seq_kind": "event", "oob": True},
    )
    if not run.rows:
        return marker
    return f"{marker}\n{render_rows_push(owner_id=owner_id, conversation_ids=run.rows)}"


# A run's marker: the number of its last event, and of its first if it carries several.
RUN_MARKER = re.compile(
    r'^(<span id="conch-seq" data-seq="\d+" data-kind="event")(?: data-first="\d+")?'
)


def run_marked_from(push: str, first: int) -> str:
    """A run's push (:func:`render_run`, and what follows it), marked as carrying every
    number from ``first``: those of runs before it that the tab was not sent, as they
    showed it nothing (chats/pushes.py)."""
    return RUN_MARKER.sub(lambda found: f'{found.group(1)} data-first="{first}"', push, count=1)


def render_run_for_chat(
    *, owner_id: int, conversation_id: str, parts: list[ChatPart], zone: tzinfo | None = None
) -> str:
    """What the tabs showing this chat in ``zone`` add to :func:`render_run`, the same
    bytes for each. Empty when the run shows nothing there, or the chat is not the owner's."""
    if not parts:
        return ""
    conversation = _owned_chat(owner_id, conversation_id)
    rendered = []
    for part in parts:
        if conversation is None:
            if part.kind == REGIONS:
                rendered.append(render_region("chat-gone", {"oob": True}))
        elif part.kind == TRANSCRIPT:
            context = {**transcript_context(conversation=conversation), "oob": True}
            rendered.append(render_region("transcript", context))
        else:
            context = {**chat_context(conversation=conversation, zone=zone), "oob": True}
            rendered.extend(render_region(name, context) for name in CHAT_REGIONS)
    return "\n".join(rendered)


def render_event(
    *,
    owner_id: int,
    event: str,
    seq: int,
    conversation_id: str | None,
    showing: str | None,
    data: dict[str, Any] | None = None,
    zone: tzinfo | None = None,
) -> str:
    """What one tab, showing the chat ``showing`` (or none) in ``zone``, is pushed for one
    event heard alone. The socket renders the two halves once for all the tabs it serves
    (chats/pushes.py); this joins them as it does. A reply's words are pushed only to the
    tabs showing their chat, alone (:func:`render_words`)."""
    if event in events.UNNUMBERED_TYPES:
        words = words_of(data) if showing is not None and showing == conversation_id else None
        return render_words(words=words) if words is not None else ""
    run = PushRun.of(event, seq, conversation_id, data)
    push = render_run(owner_id=owner_id, run=run)
    if showing is None or showing not in run.parts:
        return push
    page = render_run_for_chat(
        owner_id=owner_id, conversation_id=showing, parts=run.parts[showing], zone=zone
    )
    return f"{push}\n{page}" if page else push


def render_rows_push(*, owner_id: int, conversation_ids: list[str]) -> str:
    """These chats' sidebar rows for every page's list, which conch.js puts each in its
    place (``data-sort``) and marks if it is the tab's chat; a row no longer listed
    (deleted, archived) is taken away. A list never comes whole, whatever the number of
    chats: the rows are read together, in the same queries for one row as for many."""
    found = selectors.chats_snapshot(
        owner_id=owner_id,
        chats=Conversation.objects.filter(owner_id=owner_id, public_id__in=conversation_ids),
    )
    listed = with_held([row for row in found if selectors.row_is_listed(row)])
    by_id = {row.id: row for row in listed}
    rows = [(by_id.get(public_id), public_id) for public_id in conversation_ids]
    return render_region("row-push", {"rows": rows})
