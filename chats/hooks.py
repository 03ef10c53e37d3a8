"""Every extension point of the chat runtime, in one list.

Apps plug in from their ``ready()`` through this module, so ``chats`` never
imports them (``together`` registers its words, tools, notes and hooks here;
the gateway its turn-end hook and sweeps). The registries the runtime reads are
kept here; those kept beside what they register are named here too.

Kept here:

- :func:`add_note_provider`: notes about the world, asked at a turn's start and at
  each step after (ADR 0094 resource feedback); they must be cheap. With ``waiting``,
  whether it has anything now, asked first and outside any transaction: a step whose
  providers all say no takes nothing in, and neither locks its chat nor writes.
- :func:`add_system_section`: static text for every chat's system text, so it never
  changes while other chats come and go (ADR 0085).
- :func:`add_turn_end_hook`: run after a reply ends, once its ending is committed.
- :func:`add_before_delete_hook`: run inside the transaction that deletes chats,
  holding their row locks, with every chat of the batch at once.
- :func:`card_loader_add`: explains a kind of card in a chat's transcript (``chats.cards``).
- :func:`register_sweep`: a periodic job for every runner (``chats.runtime.runner``).
- :func:`add_in_use_check`: which of some chats hold something live of an app's (a wait),
  so maintenance never prunes them (``chats.gateway.maintenance``).
- :func:`add_held_counter`: how many things an app holds for the person in each of some
  chats (a message held for you): the chat list's "1 held", counted as needing you.
- :func:`add_owner_notice`: something the install's owner (and staff) should know, shown
  at the foot of the sidebar with a link (the gateway: messages refused for coming too fast).

Kept beside what they register, and named here:

- :func:`register_tool` and :func:`family_add`: a tool, and the family words the chat
  list shows while it runs (``chats.tools.registry``).
- :func:`register_engine`: an engine by name (``chats.engines``).
- :func:`register_summarizer`: a model engine's recaps (``chats.summarize``).
- :func:`subscribe` and :func:`event_type_add`: every event this process publishes,
  and an app's own event types (``chats.events``).
- The gateway's outbox senders, one per chat app: ``chats.gateway.outbox.register_sender``
  (the gateway stands above this module, so it is only named).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chats.engines import register_engine
from chats.events import event_type_add, subscribe
from chats.summarize import register_summarizer
from chats.tools.registry import family_add
from chats.tools.registry import register as register_tool

if TYPE_CHECKING:
    from chats.models import Conversation, Entry, Turn

__all__ = [
    "add_before_delete_hook",
    "add_note_provider",
    "add_system_section",
    "add_turn_end_hook",
    "card_loader_add",
    "event_type_add",
    "family_add",
    "register_engine",
    "register_summarizer",
    "register_sweep",
    "add_in_use_check",
    "add_held_counter",
    "add_owner_notice",
    "owner_notices",
    "register_tool",
    "subscribe",
]


@dataclass(frozen=True)
class Note:
    text: str
    source: str = "conch"


NoteProvider = Callable[["Turn", bool], list[Note]]
NotesWaiting = Callable[["Turn", bool], bool]
TurnHook = Callable[["Turn"], None]
ChatsHook = Callable[[list["Conversation"]], None]
CardLoader = Callable[["Conversation", list["Entry"]], Mapping[int, Any]]


@dataclass
class Sweep:
    name: str
    every: float
    run: Callable[[], object]
    last: float = 0.0


# Each provider, in the order added, with its own look for whether it has anything now,
# without writing (None: it can't say, and is always asked, under the chat's lock).
note_providers: dict[NoteProvider, NotesWaiting | None] = {}
system_sections: list[tuple[int, str]] = []
turn_end_hooks: list[TurnHook] = []
before_delete_hooks: list[ChatsHook] = []
card_loaders: dict[str, CardLoader] = {}
sweeps: list[Sweep] = []
# Of these chats' pks, the ones in use by an app (a live wait): never idle, never pruned.
InUseCheck = Callable[[list[int]], set[int]]
in_use_checks: list[InUseCheck] = []
# Of these chats' pks, how many things each holds for the person: {pk: count}, zeros left out.
HeldCounter = Callable[[list[int]], Mapping[int, int]]
held_counters: list[HeldCounter] = []


@dataclass(frozen=True)
class OwnerNotice:
    text: str
    link: str = ""  # where to see more (the admin)
    link_text: str = ""


# What the owner should know now: a notice, or None; asked once per page, so cheap.
OwnerNoticeProvider = Callable[[], "OwnerNotice | None"]
owner_notice_providers: list[OwnerNoticeProvider] = []


def add_note_provider(provider: NoteProvider, *, waiting: NotesWaiting | None = None) -> None:
    if provider not in note_providers or waiting is not None:
        note_providers[provider] = waiting


def add_system_section(text: str, *, order: int = 100) -> None:
    if all(existing != text for _, existing in system_sections):
        system_sections.append((order, text))
        system_sections.sort(key=lambda item: item[0])


def add_turn_end_hook(hook: TurnHook) -> None:
    if hook not in turn_end_hooks:
        turn_end_hooks.append(hook)


def add_before_delete_hook(hook: ChatsHook) -> None:
    if hook not in before_delete_hooks:
        before_delete_hooks.append(hook)


def card_loader_add(kind: str, loader: CardLoader) -> None:
    """Explain cards whose ``data["card"]`` is ``kind``. ``loader(conversation, entries)`` returns
    ``{entry.pk: card}`` in a number of queries that doesn't grow with the number of entries."""
    card_loaders[kind] = loader


def add_in_use_check(check: InUseCheck) -> None:
    """``check(pks)`` returns the chats among ``pks`` an app holds something live for, in
    a number of queries that doesn't grow with ``pks``."""
    if check not in in_use_checks:
        in_use_checks.append(check)


def add_held_counter(counter: HeldCounter) -> None:
    """``counter(pks)`` returns ``{pk: n}`` for the chats among ``pks`` with ``n`` things held
    for the person, in a number of queries that doesn't grow with ``pks``."""
    if counter not in held_counters:
        held_counters.append(counter)


def held_for_you(pks: list[int]) -> dict[int, int]:
    """What every app holds for the person in each of these chats, added up."""
    totals: dict[int, int] = {}
    for counter in held_counters:
        for pk, count in counter(pks).items():
            totals[pk] = totals.get(pk, 0) + count
    return totals


def add_owner_notice(provider: OwnerNoticeProvider) -> None:
    """``provider()`` returns what the owner should know now, or None, in a query or two."""
    if provider not in owner_notice_providers:
        owner_notice_providers.append(provider)


def owner_notices() -> list[OwnerNotice]:
    return [notice for provider in owner_notice_providers if (notice := provider()) is not None]


def register_sweep(name: str, every: float, run: Callable[[], object]) -> None:
    """A periodic job for every runner (waits' 30-second look, maintenance, schedules)."""
    if all(s.name != name for s in sweeps):
        sweeps.append(Sweep(name, every, run))
