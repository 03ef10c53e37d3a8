"""Where ``together`` (and later features) plug into the runtime without ``chats`` importing them.

Each hook is a small registry filled when an app is ready:

- ``note_providers``: asked at a turn's start and at each step after, for notes
  about the world (ADR 0094 resource feedback). They must be cheap.
- ``system_sections``: static text for every chat's system text, so it never
  changes while other chats come and go (ADR 0085).
- ``turn_start_hooks``: run as a turn is taken up, before its first step, and
  may raise the chat's taint (messages from tainted chats are taken in here).
- ``turn_end_hooks``: run after a turn ends, once its ending is committed.
- ``before_delete_hooks``: run inside the transaction that deletes chats,
  holding their row locks, with every chat of the batch at once (a deleted
  chat tells the chats that wrote to it; maintenance prunes thousands).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chats.models import Conversation, Turn


@dataclass(frozen=True)
class Note:
    text: str
    source: str = "conch"


NoteProvider = Callable[["Turn", bool], list[Note]]
TurnHook = Callable[["Turn"], None]
ChatsHook = Callable[[list["Conversation"]], None]

note_providers: list[NoteProvider] = []
system_sections: list[tuple[int, str]] = []
turn_start_hooks: list[TurnHook] = []
turn_end_hooks: list[TurnHook] = []
before_delete_hooks: list[ChatsHook] = []


def add_note_provider(provider: NoteProvider) -> None:
    if provider not in note_providers:
        note_providers.append(provider)


def add_system_section(text: str, *, order: int = 100) -> None:
    if all(existing != text for _, existing in system_sections):
        system_sections.append((order, text))
        system_sections.sort(key=lambda item: item[0])


def add_turn_start_hook(hook: TurnHook) -> None:
    if hook not in turn_start_hooks:
        turn_start_hooks.append(hook)


def add_turn_end_hook(hook: TurnHook) -> None:
    if hook not in turn_end_hooks:
        turn_end_hooks.append(hook)


def add_before_delete_hook(hook: ChatsHook) -> None:
    if hook not in before_delete_hooks:
        before_delete_hooks.append(hook)
