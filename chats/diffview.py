"""A file's change as the page shows it: numbered lines, coloured by Pygments, in two layouts.

``chats/tools/diffs.py`` makes the records (a unified diff, or a new file's words); this
reads one for the page. Each line has its number in the file before and after, its kind,
and its words cut into Pygments tokens: ``(class, text)`` pairs that the template writes
as ``<span>``s under autoescape. Nothing here is HTML, and nothing is marked safe.

The lines come in two layouts, and the page's CSS shows the one that fits
(``static/diff.css``): unified, one column, for a narrow screen; and split, the file
before beside the file after, a deleted line beside the line that replaced it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from pygments.lexer import Lexer
from pygments.lexers import get_lexer_for_filename
from pygments.token import STANDARD_TYPES, _TokenType
from pygments.util import ClassNotFound

from chats.markdown import CODE_CSS_SCOPE, code_css

__all__ = ["DIFF_CODE_SCOPE", "DiffView", "diff_code_css", "diff_view"]

# Where the diff's code colours apply: Pygments' classes, as code.css has them for replies.
DIFF_CODE_SCOPE = ".diff-view .src"
ADD, DEL, SAME, NEW = "add", "del", "same", "new"
SIGNS = {ADD: "+", DEL: "-", SAME: " ", NEW: ""}
HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)")

Part = tuple[str, str]  # (Pygments' class, or "", the words)


@dataclass(frozen=True)
class Line:
    """One line of the change: its kind, its numbers before and after, its coloured words."""

    kind: str
    old: int | None
    new: int | None
    parts: tuple[Part, ...]

    @property
    def sign(self) -> str:
        return SIGNS[self.kind]


@dataclass(frozen=True)
class Hunk:
    """A run of changed lines with their context, under its ``@@`` line."""

    head: str
    lines: tuple[Line, ...]

    @cached_property
    def pairs(self) -> tuple[tuple[Line | None, Line | None], ...]:
        """The split layout's rows: (before, after), a deleted line beside the added line
        that took its place, a line of context on both sides, None where a side has none."""
        rows: list[tuple[Line | None, Line | None]] = []
        dels: list[Line] = []
        adds: list[Line] = []

        def flush() -> None:
            for i in range(max(len(dels), len(adds))):
                rows.append(
                    (dels[i] if i < len(dels) else None, adds[i] if i < len(adds) else None)
                )
            dels.clear()
            adds.clear()

        for line in self.lines:
            if line.kind == DEL:
                if adds:
                    flush()
                dels.append(line)
            elif line.kind == ADD:
                adds.append(line)
            else:
                flush()
                rows.append((line, line))
        flush()
        return tuple(rows)


@dataclass(frozen=True)
class DiffView:
    """A change ready for the page. ``created``: a new file's words, numbered, no diff."""

    hunks: tuple[Hunk, ...]
    created: bool = False


def _css_class(ttype: _TokenType) -> str:
    while ttype not in STANDARD_TYPES:
        ttype = ttype.parent
    return STANDARD_TYPES[ttype]


def _coloured(lexer: Lexer | None, texts: list[str]) -> list[tuple[Part, ...]]:
    """Each text's parts, the texts lexed together as the consecutive lines they are."""
    if lexer is None or not texts:
        return [((("", text),) if text else ()) for text in texts]
    lines: list[list[Part]] = [[]]
    for ttype, value in lexer.get_tokens("\n".join(texts) + "\n"):
        css = _css_class(ttype)
        for n, piece in enumerate(value.split("\n")):
            if n:
                lines.append([])
            if not piece:
                continue
            line = lines[-1]
            if line and line[-1][0] == css:
                line[-1] = (css, line[-1][1] + piece)
            else:
                line.append((css, piece))
    return [tuple(parts) for parts in lines[: len(texts)]] + [()] * (len(texts) - len(lines))


def _lexer_for(path: str) -> Lexer | None:
    try:
        return get_lexer_for_filename(path, stripnl=False, stripall=False, ensurenl=False)
    except ClassNotFound:
        return None


def _hunk(head: str, raw: list[tuple[str, int | None, int | None, str]], lexer) -> Hunk:
    """A hunk from its lines (kind, old number, new number, words): each side lexed whole."""
    before = [i for i, (kind, *_rest) in enumerate(raw) if kind != ADD]
    after = [i for i, (kind, *_rest) in enumerate(raw) if kind != DEL]
    parts: dict[tuple[str, int], tuple[Part, ...]] = {}
    for side, indices in (("old", before), ("new", after)):
        for i, coloured in zip(
            indices, _coloured(lexer, [raw[i][3] for i in indices]), strict=True
        ):
            parts[(side, i)] = coloured
    lines = tuple(
        Line(kind, old, new, parts[("old" if kind == DEL else "new", i)])
        for i, (kind, old, new, _text) in enumerate(raw)
    )
    return Hunk(head, lines)


def diff_view(change: dict) -> DiffView:
    """The view of one change record (chats/tools/diffs.py's ``change_record``)."""
    text = str(change.get("text") or "")
    lexer = _lexer_for(str(change.get("path") or ""))
    if change.get("created"):
        texts = text.splitlines()
        lines = tuple(
            Line(NEW, None, n, parts) for n, parts in enumerate(_coloured(lexer, texts), start=1)
        )
        return DiffView((Hunk("", lines),), created=True)
    hunks: list[Hunk] = []
    head = ""
    raw: list[tuple[str, int | None, int | None, str]] = []
    old = new = left_old = left_new = 0
    started = False
    for line in text.splitlines():
        found = HUNK.match(line) if left_old <= 0 and left_new <= 0 else None
        if found:
            if started:
                hunks.append(_hunk(head, raw, lexer))
            head, raw, started = line, [], True
            old, new = int(found.group(1)), int(found.group(3))
            left_old = int(found.group(2)) if found.group(2) is not None else 1
            left_new = int(found.group(4)) if found.group(4) is not None else 1
            continue
        if not started or line.startswith("\\"):  # the file's names; "\ No newline at end"
            continue
        sign, words = line[:1], line[1:]
        if sign == "-":
            raw.append((DEL, old, None, words))
            old, left_old = old + 1, left_old - 1
        elif sign == "+":
            raw.append((ADD, None, new, words))
            new, left_new = new + 1, left_new - 1
        else:
            raw.append((SAME, old, new, words))
            old, new, left_old, left_new = old + 1, new + 1, left_old - 1, left_new - 1
    if started:
        hunks.append(_hunk(head, raw, lexer))
    return DiffView(tuple(hunks))


def diff_code_css() -> str:
    """The diff's code colours, light and dark: code.css's, for the diff (static/diff.css ends with it)."""
    return code_css().replace(CODE_CSS_SCOPE, DIFF_CODE_SCOPE)
