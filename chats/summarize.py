"""The one way Conch summarizes a stretch of transcript (compaction's recap, seed ch. 4).

:func:`summarizer_for` gives a persona's model summarizer when one is
registered for its engine (a model engine registers itself with
:func:`register_summarizer`), otherwise the deterministic extractive
fallback. Both read lines as an iterable and keep only a bounded amount of
it, so summarizing a very long overflow never holds it all in memory.
"""

from __future__ import annotations

import logging
import re
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from chats.limits import LIMITS
from chats.models import EntryKind, EntryRole

if TYPE_CHECKING:
    from chats.models import Agent

log = logging.getLogger(__name__)

HEAD_LINES = 8
TAIL_LINES = 12

ROLE_WORDS: dict[str, str] = {
    EntryRole.PERSON: "Person",
    EntryRole.ASSISTANT: "Assistant",
    EntryRole.TOOL: "Tool",
    EntryRole.CONCH: "Conch",
}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class SummaryLine:
    role: str
    kind: str
    text: str


class Summarizer(Protocol):
    name: str

    def summarize(
        self, lines: Iterable[SummaryLine], *, limit: int = LIMITS.summary_chars
    ) -> str: ...


def _first_sentence(text: str) -> str:
    text = _SPACE.sub(" ", text).strip()
    first = _SENTENCE_END.split(text, maxsplit=1)[0]
    if len(first) > LIMITS.summary_line_chars:
        first = first[: LIMITS.summary_line_chars - 1].rstrip() + "…"
    return first


class ExtractiveSummarizer:
    """The fallback: the first sentence of the opening and closing lines, and what came between.

    Deterministic: the same lines always give the same recap.
    """

    name = "extractive"

    def summarize(self, lines: Iterable[SummaryLine], *, limit: int = LIMITS.summary_chars) -> str:
        head: list[str] = []
        tail: deque[str] = deque(maxlen=TAIL_LINES)
        roles: Counter[str] = Counter()
        total = 0
        earlier_recaps: list[str] = []
        for line in lines:
            if line.kind == EntryKind.RECAP:
                # An earlier recap is already a summary: keep its words, once.
                earlier_recaps.append(_first_sentence(line.text.split("\n", 2)[-1]))
                continue
            total += 1
            roles[line.role] += 1
            said = _first_sentence(line.text)
            if not said:
                continue
            item = f"- {ROLE_WORDS.get(line.role, line.role.title())}: {said}"
            if len(head) < HEAD_LINES:
                head.append(item)
            else:
                tail.append(item)
        counts = ", ".join(
            f"{n} from {ROLE_WORDS.get(role, role).lower()}" for role, n in sorted(roles.items())
        )
        parts = [f"Recap of {total} earlier entries ({counts or 'none'})."]
        if earlier_recaps:
            parts.append("Before that: " + " ".join(earlier_recaps[:2]))
        parts.extend(head)
        skipped = total - len(head) - len(tail)
        if skipped > 0:
            parts.append(f"- … {skipped} more entries …")
        parts.extend(tail)
        summary = "\n".join(parts)
        if len(summary) > limit:
            summary = summary[: limit - 1].rstrip() + "…"
        return summary


_extractive = ExtractiveSummarizer()
_model_summarizers: dict[str, Callable[[Agent], Summarizer]] = {}


def register_summarizer(engine_name: str, factory: Callable[[Agent], Summarizer]) -> None:
    """A model engine offers a summarizer for the personas that use it."""
    _model_summarizers[engine_name] = factory


def summarizer_for(agent: Agent | None) -> Summarizer:
    if agent is not None and agent.engine in _model_summarizers:
        try:
            return _model_summarizers[agent.engine](agent)
        except Exception:
            log.exception(
                "the %s summarizer could not be made; using the extractive one", agent.engine
            )
    return _extractive


def summarize(
    read: Callable[[], Iterable[SummaryLine]],
    *,
    agent: Agent | None = None,
    limit: int = LIMITS.summary_chars,
) -> tuple[str, str]:
    """The recap's text and the summarizer's name.

    ``read`` gives the lines afresh each time it is called, so a model that fails
    mid-way falls back to the extractive summary without anything held in memory.
    """
    summarizer = summarizer_for(agent)
    if summarizer is not _extractive:
        try:
            return summarizer.summarize(read(), limit=limit), summarizer.name
        except Exception:
            log.exception("the %s summarizer failed; using the extractive one", summarizer.name)
    return _extractive.summarize(read(), limit=limit), _extractive.name
