"""``list_chats``: what your other chats are doing now (ADR 0134).

Busy chats come first, then the ones that need you and the ones active in the
last three days, twelve at most. Archived chats are left out unless they're
working. Every busy chat of yours is counted, even past the list's end.
Only the title (the person's words), Conch's words for the step and file
names cross from one chat to another; nothing a chat read or wrote does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.db.models import Count
from django.utils import timezone

from chats.limits import LIMITS
from chats.models import TASK_GOING_STATES, Conversation, Origin, Status, Taint, Task
from chats.quoting import plain, plain_path
from chats.runtime.selectors import ChatSnapshot, chats_snapshot
from chats.tools.registry import THINKING
from together.places import for_person, same_place, shown_path
from together.visibility import NOT_YOURS_ORIGINS, is_yours, yours_q

# together's words, which it adds to chats' registries when ready (together.apps).
LOOKING_AT_CHATS = "looking at your other chats"  # the family of list_chats, read_chat…
CHATS_LISTED = "chats.listed"  # the event of a look at the other chats (its card)
RECENT = timedelta(days=3)
WHICH = ("all", "working")


@dataclass(frozen=True)
class OtherChat:
    """One row of ``list_chats`` (protocol ``OtherChat``)."""

    id: str
    title: str
    state: str
    doing: str | None
    doing_seconds: int | None
    reply_started_at: datetime | None
    last_active_at: datetime
    same_folder: bool
    folder: str
    files_changed: tuple[str, ...]
    browser_open: bool
    tasks_going: int
    came_from: str
    untrusted: bool

    @property
    def changing(self) -> str:
        """``Changing auth.ts +2``: the row's line for a busy chat in the same folder."""
        if self.state != Status.WORKING or not self.same_folder or not self.files_changed:
            return ""
        name = self.files_changed[-1].rsplit("/", 1)[-1]
        more = len(self.files_changed) - 1
        return f"Changing {name}" + (f" +{more}" if more else "")

    def as_dict(self) -> dict:
        data = asdict(self)
        for key in ("reply_started_at", "last_active_at"):
            data[key] = data[key].isoformat() if data[key] else None
        data["files_changed"] = list(self.files_changed)
        data["changing"] = self.changing
        return data


@dataclass(frozen=True)
class ChatsLook:
    rows: tuple[OtherChat, ...]
    working: int
    needs_you: int

    @property
    def headline(self) -> str:
        parts = ["Checked on your other chats"]
        if self.working:
            parts.append(f"{self.working} working")
        if self.needs_you:
            parts.append(f"{self.needs_you} needs you")
        if len(parts) == 1:
            parts.append("nothing going on")
        return " · ".join(parts)


def came_from(chat: ChatSnapshot, *, listing_pk: int) -> str:
    if chat.origin == Origin.TASK:
        if chat.parent_id == listing_pk:
            return "a task from this chat"
        return f"a task from “{plain(chat.parent_title)}”" if chat.parent_title else "a task"
    if chat.origin == Origin.ROUTINE:
        return "a routine"
    if chat.origin == Origin.CHAT_APP:
        return plain(chat.origin_channel or "a chat app")
    return "you"


def list_chats(
    *, conversation: Conversation, which: str = "all", now: datetime | None = None
) -> ChatsLook:
    """The rows ``list_chats`` shows this chat. At most 5 queries, whatever the number of chats."""
    if which not in WHICH:
        raise ValueError(f"which must be one of {', '.join(WHICH)}")
    now = now or timezone.now()
    owner_id = conversation.owner_id
    busy = [
        s
        for s in chats_snapshot(owner_id=owner_id, working=True)
        if s.pk != conversation.pk
        and s.status == Status.WORKING
        and s.origin not in NOT_YOURS_ORIGINS
        and s.taint != Taint.PERSON
    ]
    busy.sort(key=lambda s: s.reply.started_at if s.reply else s.last_interaction_at, reverse=True)
    yours_idle = Conversation.objects.filter(yours_q(owner_id), archived=False).exclude(
        pk=conversation.pk
    )
    needing = chats_snapshot(
        owner_id=owner_id,
        chats=yours_idle.filter(status=Status.NEEDS_YOU).order_by("-last_interaction_at")[
            : LIMITS.list_chats_rows + 1
        ],
        with_turns=False,
    )
    needs_you = (
        len(needing)
        if len(needing) <= LIMITS.list_chats_rows
        else yours_idle.filter(status=Status.NEEDS_YOU).count()
    )
    others: list[ChatSnapshot] = []
    room = LIMITS.list_chats_rows - len(busy)
    if which == "all" and room > 0:
        others = needing[:room]
        if len(others) < room:
            recent = (
                yours_idle.exclude(status__in=[Status.WORKING, Status.NEEDS_YOU])
                .filter(last_interaction_at__gte=now - RECENT)
                .order_by("-last_interaction_at")[: room - len(others)]
            )
            others += chats_snapshot(owner_id=owner_id, chats=recent, with_turns=False)
    shown = (busy[: LIMITS.list_chats_rows] + others)[: LIMITS.list_chats_rows]
    ids = [s.pk for s in shown]
    going = (
        dict(
            Task.objects.filter(parent_id__in=ids, state__in=list(TASK_GOING_STATES))
            .values_list("parent_id")
            .annotate(n=Count("pk"))
        )
        if ids
        else {}
    )
    rows = tuple(_row(s, conversation, now, going.get(s.pk, 0)) for s in shown)
    return ChatsLook(rows=rows, working=len(busy), needs_you=needs_you)


def _row(chat: ChatSnapshot, me: Conversation, now: datetime, tasks_going: int) -> OtherChat:
    reply = chat.reply
    working = reply if chat.status == Status.WORKING else None
    folder = reply.folder if reply else chat.folder
    place = reply.place if reply else chat.place
    same = same_place(me.place, me.folder, place, folder)
    doing = doing_seconds = None
    if working:
        doing = working.family or THINKING
        since = working.step_started_at or working.started_at
        doing_seconds = max(0, int((now - since).total_seconds()))
    files = tuple(
        plain_path(shown_path(p, me.folder if same else folder))
        for p in (working.files_changed if working else ())
    )
    return OtherChat(
        id=chat.id,
        title=plain(chat.title),
        state=chat.status,
        doing=doing,
        doing_seconds=doing_seconds,
        reply_started_at=working.started_at if working else None,
        last_active_at=chat.last_interaction_at,
        same_folder=same,
        folder="" if same else plain_path(for_person(folder)),
        files_changed=files,
        browser_open=bool(working and working.browser_open),
        tasks_going=tasks_going,
        came_from=came_from(chat, listing_pk=me.pk),
        untrusted=chat.taint == Taint.UNTRUSTED,
    )


def _span(seconds: float) -> str:
    """A duration as an assistant needs it: coarse, so the same look reads the same."""
    if seconds < 60:
        return "under a minute"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    return f"{int(seconds // 3600)} h"


def describe(look: ChatsLook, *, now: datetime | None = None) -> str:
    """The tool's answer, in plain lines the assistant reads."""
    now = now or timezone.now()
    if not look.rows:
        return look.headline + ". No other chats to show."
    lines = [look.headline + "."]
    for row in look.rows:
        bits = [f"{row.id} “{row.title}”: {row.state.replace('_', ' ')}"]
        if row.doing:
            bits.append(f"{row.doing} for {_span(row.doing_seconds or 0)}")
        if row.reply_started_at:
            bits.append(
                f"its reply began {_span((now - row.reply_started_at).total_seconds())} ago"
            )
        bits.append("same folder" if row.same_folder else f"in {row.folder}")
        if row.files_changed:
            bits.append(
                "changed "
                + ", ".join(row.files_changed[:8])
                + (" …" if len(row.files_changed) > 8 else "")
            )
        if row.browser_open:
            bits.append("has a web page open")
        if row.tasks_going:
            bits.append(f"{row.tasks_going} task{'s' if row.tasks_going != 1 else ''} going")
        bits.append(f"from {row.came_from}")
        if row.untrusted:
            bits.append("untrusted: it read something from outside")
        lines.append("- " + "; ".join(bits))
    if look.working > sum(1 for r in look.rows if r.state == Status.WORKING):
        lines.append(f"({look.working} of your chats are working in all.)")
    return "\n".join(lines)


__all__ = ["OtherChat", "ChatsLook", "list_chats", "describe", "is_yours"]
