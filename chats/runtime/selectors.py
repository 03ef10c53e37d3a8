"""Reads: what the chat list, the tools and the watchers see. Query counts stay flat."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import NamedTuple

from django.db.models import Q, QuerySet

from chats.models import (
    Conversation,
    Entry,
    EntryKind,
    EntryRole,
    QueuedInput,
    StandingOk,
    Status,
    Step,
    Task,
    Turn,
    TurnState,
)
from chats.runtime.standing import scope_of


@dataclass(frozen=True)
class RunningReply:
    number: int
    started_at: datetime
    folder: str
    place: str
    family: str
    step_started_at: datetime | None
    files_changed: tuple[str, ...]
    state: str
    started_by: str
    chain_id: str
    browser_open: bool = False


@dataclass(frozen=True)
class ChatSnapshot:
    """``ConversationManager.chats(...)``: a chat, and its running reply if it has one."""

    pk: int
    id: str
    title: str
    status: str
    origin: str
    origin_channel: str
    taint: str
    folder: str
    place: str
    archived: bool
    parent_id: int | None
    parent_title: str | None
    last_interaction_at: datetime
    reply: RunningReply | None = field(default=None)
    held: int = 0  # things held for the person here (a message held for you); see chats.hooks
    pinned: bool = False

    @property
    def working(self) -> bool:
        return self.status == Status.WORKING

    @property
    def needs_you(self) -> bool:
        """What the tab's title counts: the chat waits for the person, or holds something for them."""
        return self.status == Status.NEEDS_YOU or self.held > 0


_CHAT_FIELDS = (
    "pk",
    "public_id",
    "title",
    "status",
    "origin",
    "origin_channel",
    "taint",
    "folder",
    "place",
    "archived",
    "parent_id",
    "parent__title",
    "last_interaction_at",
    "pinned",
)


def _reply_from(turn: dict) -> RunningReply:
    return RunningReply(
        number=turn["number"],
        started_at=turn["started_at"],
        folder=turn["folder"],
        place=turn["place"],
        family=turn["step_family"],
        step_started_at=turn["step_started_at"],
        files_changed=tuple(turn["files_changed"] or ()),
        state=turn["state"],
        started_by=turn["started_by"],
        chain_id=turn["chain_id"],
        browser_open=turn["browser_open"],
    )


_TURN_FIELDS = (
    "conversation_id",
    "number",
    "started_at",
    "folder",
    "place",
    "step_family",
    "step_started_at",
    "files_changed",
    "state",
    "started_by",
    "chain_id",
    "browser_open",
)


def _open_turns() -> dict[int, RunningReply]:
    """Every open turn, by chat. It scans the partial index of open turns, not the chats."""
    rows = Turn.objects.filter(ended_at__isnull=True).order_by().values(*_TURN_FIELDS)
    return {row["conversation_id"]: _reply_from(row) for row in rows}


def chats_snapshot(
    *, owner_id: int, working: bool = False, chats: QuerySet | None = None, with_turns: bool = True
) -> list[ChatSnapshot]:
    """Every chat of this owner (or only those with a reply open): 2 queries, whatever the number of chats.

    ``working=True`` reads only chats with a reply open, in one query led by
    the open turns, so it's cheap enough for every step.
    """
    if working:
        # Led by the open turns' partial index; the owner is checked in Python,
        # since filtering on it in SQL makes the planner walk every chat instead.
        chat_fields = [f"conversation__{f}" for f in _CHAT_FIELDS if f != "pk"]
        rows = (
            Turn.objects.filter(ended_at__isnull=True)
            .order_by()
            .values(*_TURN_FIELDS, *chat_fields, "conversation__owner_id")
        )
        return [
            _snapshot(
                row["conversation_id"],
                {f: row[f"conversation__{f}"] for f in _CHAT_FIELDS if f != "pk"},
                _reply_from(row),
            )
            for row in rows
            if row["conversation__owner_id"] == owner_id
        ]
    base = chats if chats is not None else Conversation.objects.filter(owner_id=owner_id)
    chat_rows = list(base.values(*_CHAT_FIELDS))
    if not with_turns:
        return [_snapshot(row["pk"], row, None) for row in chat_rows]
    replies = _open_turns()
    return [_snapshot(row["pk"], row, replies.get(row["pk"])) for row in chat_rows]


def _snapshot(pk: int, chat: dict, reply: RunningReply | None) -> ChatSnapshot:
    return ChatSnapshot(
        pk=pk,
        id=chat["public_id"],
        title=chat["title"],
        status=chat["status"],
        origin=chat["origin"],
        origin_channel=chat["origin_channel"],
        taint=chat["taint"],
        folder=chat["folder"],
        place=chat["place"],
        archived=chat["archived"],
        parent_id=chat["parent_id"],
        parent_title=chat["parent__title"],
        last_interaction_at=chat["last_interaction_at"],
        reply=reply,
        pinned=chat["pinned"],
    )


def open_turn(conversation: Conversation) -> Turn | None:
    return conversation.turns.filter(ended_at__isnull=True).first()


# ---------------------------------------------------------------------------
# The browser workspace


def chat_list_rows(*, owner_id: int) -> list[ChatSnapshot]:
    """The sidebar: this owner's chats, newest first. Archived ones only while working.

    Two queries whatever the number of chats.
    """
    visible = (
        Conversation.objects.filter(owner_id=owner_id)
        .filter(Q(archived=False) | Q(status=Status.WORKING))
        .order_by("-pinned", "-last_interaction_at", "-pk")
    )
    return chats_snapshot(owner_id=owner_id, chats=visible)


def chat_archived_rows(*, owner_id: int) -> list[ChatSnapshot]:
    """The chats the sidebar leaves out: this owner's archived ones, newest first. Two queries."""
    archived = Conversation.objects.filter(owner_id=owner_id, archived=True).order_by(
        "-last_interaction_at", "-pk"
    )
    return chats_snapshot(owner_id=owner_id, chats=archived)


def row_is_listed(row: ChatSnapshot) -> bool:
    return not row.archived or row.working


def row_sort_key(row: ChatSnapshot) -> str:
    """Where the row goes in the sidebar's order, as text that sorts the same way (greatest
    first): what needs you, then what is pinned, then the latest. A page places a pushed
    row by it, without the rest of the list, and finds its group by it (:func:`chat_groups`)."""
    return (
        f"{int(row.needs_you)}.{int(row.pinned)}.{_micros(row.last_interaction_at)}.{row.pk:012d}"
    )


def _micros(moment: datetime) -> str:
    return f"{(moment - _EPOCH) // timedelta(microseconds=1):017d}"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ChatGroup:
    """One heading of the sidebar and its rows. A group is a run of the sort key: it holds
    every row whose key is at least ``starts`` and below the group before it, so a page
    puts a pushed row under the first heading whose ``starts`` its key reaches."""

    name: str
    label: str
    starts: str
    rows: tuple[ChatSnapshot, ...] = ()


# The days the list is grouped by, before today: "Yesterday" is one day back, and
# "Previous 7 days" reaches back to the start of the seventh day before today.
YESTERDAY_DAYS = 1
WEEK_DAYS = 7


def _day_start(day: date, zone: tzinfo) -> datetime:
    """The first moment of ``day`` in ``zone``, as a wall clock there reads midnight."""
    return datetime.combine(day, time(0), tzinfo=zone)


def next_day_starts(*, now: datetime, zone: tzinfo) -> datetime:
    """When "Today" becomes "Yesterday" in ``zone``: the next local midnight after ``now``."""
    return _day_start(now.astimezone(zone).date() + timedelta(days=1), zone)


def chat_groups(rows: list[ChatSnapshot], *, now: datetime, zone: tzinfo) -> list[ChatGroup]:
    """The sidebar's headings, each with its rows in the list's order: Needs you, Pinned,
    then Today, Yesterday, Previous 7 days and Older by the chat's last activity, in the
    person's own days (``zone``). Every heading is there, empty or not, so a page can
    put a pushed row under one that had none."""
    today = now.astimezone(zone).date()

    def since(days: int) -> str:
        return f"0.0.{_micros(_day_start(today - timedelta(days=days), zone))}"

    floors = [
        ("needs-you", "Needs you", "1"),
        ("pinned", "Pinned", "0.1"),
        ("today", "Today", since(0)),
        ("yesterday", "Yesterday", since(YESTERDAY_DAYS)),
        ("week", "Previous 7 days", since(WEEK_DAYS)),
        ("older", "Older", ""),
    ]
    placed: dict[str, list[ChatSnapshot]] = {name: [] for name, _, _ in floors}
    for row in sorted(rows, key=row_sort_key, reverse=True):
        key = row_sort_key(row)
        name = next(name for name, _, starts in floors if key >= starts)
        placed[name].append(row)
    return [ChatGroup(name, label, starts, tuple(placed[name])) for name, label, starts in floors]


@dataclass(frozen=True)
class ReplyBlock:
    """One reply and what it did, in order; or a transcript line outside any reply."""

    turn: Turn | None
    prompt: Entry | None
    items: tuple[Entry | Step, ...]

    @property
    def ended_badly(self) -> bool:
        return self.turn is not None and self.turn.state in (
            TurnState.STOPPED,
            TurnState.FAILED,
            TurnState.INTERRUPTED,
        )


TRANSCRIPT_REPLIES = 50


def chat_transcript(
    *, conversation: Conversation, replies: int = TRANSCRIPT_REPLIES
) -> list[ReplyBlock]:
    """The chat's last ``replies`` replies, each with its steps grouped under it. Three queries."""
    turns = list(conversation.turns.order_by("-number")[:replies])
    turns.reverse()
    entries_qs = Entry.objects.filter(conversation=conversation).order_by("seq")
    if len(turns) == replies:
        entries_qs = entries_qs.filter(created_at__gte=turns[0].started_at)
    entries = list(entries_qs)
    steps_by_turn: dict[int, list[Step]] = {}
    for step in Step.objects.filter(turn__in=[t.pk for t in turns]).order_by("turn_id", "number"):
        steps_by_turn.setdefault(step.turn_id, []).append(step)

    shown = {t.pk for t in turns}
    by_turn: dict[int, list[Entry]] = {}
    loose: list[Entry] = []
    for entry in entries:
        if entry.turn_id in shown:
            by_turn.setdefault(entry.turn_id, []).append(entry)
        elif entry.turn_id is None:
            loose.append(entry)

    timeline: list[tuple[object, int, ReplyBlock]] = []
    for turn in turns:
        lines = by_turn.get(turn.pk, [])
        prompt = None
        if lines and lines[0].kind == EntryKind.MESSAGE and lines[0].role != EntryRole.ASSISTANT:
            prompt, lines = lines[0], lines[1:]
        items: list[tuple[object, int, Entry | Step]] = [(e.created_at, e.seq, e) for e in lines]
        items.extend((s.started_at, 0, s) for s in steps_by_turn.get(turn.pk, []))
        items.sort(key=lambda item: (item[0], item[1]))
        block = ReplyBlock(turn, prompt, tuple(item for _, _, item in items))
        timeline.append((turn.started_at, prompt.seq if prompt else 0, block))
    for entry in loose:
        timeline.append((entry.created_at, entry.seq, ReplyBlock(None, None, (entry,))))
    timeline.sort(key=lambda item: (item[0], item[1]))
    return [block for _, _, block in timeline]


def chat_pending_turn(*, conversation: Conversation) -> Turn | None:
    """The open reply waiting for the person's Approve or Deny, if any."""
    return (
        conversation.turns.filter(
            ended_at__isnull=True, state=TurnState.NEEDS_YOU, pending_action__isnull=False
        )
        .order_by("-number")
        .first()
    )


@dataclass(frozen=True)
class Allowed:
    """One standing OK as the chat page lists it, with its Take back."""

    id: int
    what: str  # the tool, or the command's start, in the person's words


def chat_allowed(*, conversation: Conversation) -> list[Allowed]:
    """The chat's standing OKs, oldest first. One query."""
    return [
        Allowed(ok.pk, scope_of(ok).for_person())
        for ok in StandingOk.objects.filter(conversation=conversation)
    ]


def chat_queued(*, conversation: Conversation) -> list[QueuedInput]:
    """The person's messages waiting for the running reply to end, oldest first. One query."""
    return list(
        conversation.queued_inputs.filter(taken_at__isnull=True).order_by("created_at", "pk")
    )


def chat_tasks(*, conversation: Conversation) -> list[Task]:
    return list(conversation.tasks.select_related("chat").order_by("created_at", "pk"))


class WorkingPlace(NamedTuple):
    """The least a step-boundary read needs about another chat's open reply."""

    pk: int
    id: str
    title: str
    origin: str
    taint: str
    owner_id: int
    folder: str
    place: str
    family: str
    files_changed: list[str]
    state: str


_PLACE_FIELDS = (
    "conversation_id",
    "conversation__public_id",
    "conversation__title",
    "conversation__origin",
    "conversation__taint",
    "conversation__owner_id",
    "folder",
    "place",
    "step_family",
    "files_changed",
    "state",
)


def working_places(*, owner_id: int) -> list[WorkingPlace]:
    """Every open reply of this owner's chats, where it works and what it changed: one query.

    It walks the partial index of open turns and joins each to its chat, so
    its cost follows the number of open replies, never the number of chats.
    The owner is checked here rather than in SQL, which would lead the
    planner to walk the owner's chats instead.
    """
    rows = Turn.objects.filter(ended_at__isnull=True).order_by().values_list(*_PLACE_FIELDS)
    return [WorkingPlace(*row) for row in rows if row[5] == owner_id]
