"""Cards in a chat's transcript: entries of kind ``card`` that another app explains.

``chats`` never imports ``together``, yet the page shows its cards as they are
*now*, which only ``together`` can say. So an app adds, for each card kind
(``Entry.data["card"]``), a loader (``chats.hooks.card_loader_add``). Each loader
gets every card of its kind in the transcript at once, so thirty cards cost the
queries of one; it returns, per entry, an object whose ``kind`` names the card's
partial in ``workspace.html``. A card no loader explains shows as its line of text.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from chats import hooks
from chats.models import Entry, EntryKind

if TYPE_CHECKING:
    from chats.models import Conversation
    from chats.runtime.selectors import ReplyBlock


def card_kind(entry: Entry) -> str:
    data = entry.data if isinstance(entry.data, dict) else {}
    kind = data.get("card")
    return kind if isinstance(kind, str) else ""


def _card_entries(blocks: Iterable[ReplyBlock]) -> list[Entry]:
    return [
        item
        for block in blocks
        for item in block.items
        if isinstance(item, Entry) and item.kind == EntryKind.CARD
    ]


def cards_load(*, conversation: Conversation, blocks: Iterable[ReplyBlock]) -> None:
    """Set ``entry.card`` on every card in the transcript: one loader call per kind shown."""
    by_kind: dict[str, list[Entry]] = {}
    for entry in _card_entries(blocks):
        entry.card = None
        by_kind.setdefault(card_kind(entry), []).append(entry)
    for kind, entries in by_kind.items():
        loader = hooks.card_loaders.get(kind)
        if loader is None:
            continue
        shown = loader(conversation, entries)
        for entry in entries:
            entry.card = shown.get(entry.pk)
