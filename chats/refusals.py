"""A refused step in two voices: the words the model reads, and the words the person sees.

The model's words name the rule so it can change course ("The tool 'write_file'
isn't offered to this chat."); the person reads what happened to their chat
("Not run: this chat doesn't have write_file."). A refused step stores the
model's words (``Step.error``, which the model reads back); the page finds the
refusal they came from with :func:`for_person`, so older steps read well too.
"""

from __future__ import annotations

import ast
import re
import string
from dataclasses import dataclass
from functools import cached_property

__all__ = [
    "IN_PLAN_MODE_NOW",
    "NOT_IN_SET",
    "NOT_OFFERED",
    "NOT_OFFERED_NOW",
    "NO_FOLDER_OF_ITS_OWN",
    "REFUSALS",
    "SAID_NO",
    "SAID_NO_BECAUSE",
    "for_person",
]


@dataclass(frozen=True)
class Refusal:
    """``model`` and ``person`` are ``str.format`` templates over the same names."""

    model: str
    person: str

    def for_model(self, **values: object) -> str:
        return self.model.format(**values)

    @cached_property
    def _pattern(self) -> tuple[re.Pattern[str], frozenset[str]]:
        parts, seen, quoted = [], set(), set()
        for literal, name, _spec, conversion in string.Formatter().parse(self.model):
            parts.append(re.escape(literal))
            if name is None:
                continue
            if name in seen:
                parts.append(f"(?P={name})")
                continue
            seen.add(name)
            if conversion == "r":  # a repr: a quoted Python string
                quoted.add(name)
                parts.append(f"(?P<{name}>'(?:[^'\\\\]|\\\\.)*'|\"(?:[^\"\\\\]|\\\\.)*\")")
            else:
                parts.append(f"(?P<{name}>.+?)")
        return re.compile("".join(parts) + r"\Z", re.DOTALL), frozenset(quoted)

    def match(self, text: str) -> dict[str, str] | None:
        """The values the model's words were made from, or None if they weren't made here."""
        pattern, quoted = self._pattern
        found = pattern.match(text)
        if found is None:
            return None
        values = found.groupdict()
        for name in quoted:
            try:
                values[name] = str(ast.literal_eval(values[name]))
            except (ValueError, SyntaxError):
                return None
        return values


SAID_NO = Refusal("The person said no to this.", "Not run: you said no.")
# A Deny with the person's reason, which the model reads as the step's result.
SAID_NO_BECAUSE = Refusal("The person denied this: {reason}", "Not run: you said no.")
NOT_OFFERED = Refusal(
    "The tool {tool!r} isn't offered to this chat.",
    "Not run: {tool} isn't one of this chat's tools.",
)
NOT_IN_SET = Refusal(
    "The tool {tool!r} isn't offered to this chat: someone else's words are in it, and "
    "the persona {persona!r} doesn't give {tool!r} to chats with other people.",
    "Not run: someone else's words are in this chat, and {persona} doesn't give {tool} "
    "to chats with other people.",
)
NO_FOLDER_OF_ITS_OWN = Refusal(
    "The tool {tool!r} can't run here: chats with other people work only in the persona's "
    "own folder, and {persona!r} works in your default workspace ({folder}). Give the persona "
    "a folder of its own in the admin first.",
    "Not run: chats with other people work only in the persona's own folder, and {persona} "
    "has none yet. Give it one in the admin to let {tool} run here.",
)
IN_PLAN_MODE_NOW = Refusal(
    "The person approved {tool!r}, but it wasn't run: this chat is in Plan mode now, "
    "where tools that change things aren't offered.",
    "Not run: you approved {tool}, but this chat is in Plan mode now.",
)
NOT_OFFERED_NOW = Refusal(
    "The person approved {tool!r}, but it wasn't run: it isn't offered to this chat any more.",
    "Not run: you approved {tool}, but it isn't one of this chat's tools any more.",
)
REFUSALS = (
    SAID_NO,
    SAID_NO_BECAUSE,
    NOT_IN_SET,
    NO_FOLDER_OF_ITS_OWN,
    IN_PLAN_MODE_NOW,
    NOT_OFFERED_NOW,
    NOT_OFFERED,
)


def for_person(text: str) -> str:
    """A step's error as the person reads it: a refusal's person words, else the error as it is."""
    text = str(text or "")
    for refusal in REFUSALS:
        values = refusal.match(text)
        if values is not None:
            return refusal.person.format(**values)
    return text
