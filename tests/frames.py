"""An independent reading of Conch's voice, for tests: where does a text open Conch's frame?

Folded as a reader would see it (NFKC, case-folded, combining marks and format
characters dropped, and each letter as the Latin one it looks like, by
confusable_homoglyphs' public ``is_confusable``): an opening bracket other than "("
(written "[", or any opening punctuation), then spaces, then "conch". It shares no
code with ``chats.quoting``, so a test that counts with it checks that module, not itself.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache

from confusable_homoglyphs.confusables import is_confusable

_SKIP = {
    "Mn",
    "Me",
    "Cf",
    "Cc",
    "Cn",
    "Co",
    "Cs",
}  # marks, format, control, unassigned: nothing a reader reads


@cache
def _latin(ch: str) -> str:
    if ch.isascii():
        return ch
    found = is_confusable(ch, preferred_aliases=["latin"]) or []
    for hit in found:
        for glyph in hit["homoglyphs"]:
            if glyph["c"].isascii() and glyph["c"].isalpha():
                return glyph["c"]
    return ch


def conch_voices(text: str) -> int:
    """How many times ``text`` opens Conch's frame."""
    folded = "".join(
        _latin(ch)
        for ch in unicodedata.normalize("NFKC", text)
        if unicodedata.category(ch) not in _SKIP
    ).casefold()
    count = 0
    for m in re.finditer(r"conch", folded):
        before = folded[: m.start()].rstrip()
        if before and (
            before[-1] == "[" or (unicodedata.category(before[-1]) == "Ps" and before[-1] != "(")
        ):
            count += 1
    return count


def frame_closers(text: str) -> int:
    """Closing brackets other than ")" (Conch's own words use it), folded as a reader would."""
    return sum(
        1
        for ch in unicodedata.normalize("NFKC", text)
        if ch == "]" or (unicodedata.category(ch) == "Pe" and ch != ")")
    )
