"""The shapes of secrets, from a maintained set: gitleaks' rules, read from ``chats/data/gitleaks.toml``.

gitleaks writes its rules for Go's RE2. :func:`_python_regex` makes the few
RE2 spellings Python reads otherwise (a flag part-way through, ``\\z``); a rule
that still won't compile is counted in :data:`SKIPPED`, and a test keeps that
list short and known. Each rule is applied as gitleaks applies it: its keywords
first (a cheap look for any of them), then its regex, its secret group (or the
first group with a value), its entropy floor, and its allowlists (regexes and
stopwords; paths and commits don't apply to words).

Only :func:`chats.quoting.scrub_secrets` uses this: it is the one entry point.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

RULES_FILE = Path(__file__).resolve().parent / "data" / "gitleaks.toml"


@dataclass(frozen=True)
class Allowlist:
    regexes: tuple[re.Pattern[str], ...]
    target: str  # "secret", "match" or "line"
    stopwords: tuple[str, ...]
    needs_all: bool  # condition AND: with a path in it, never met by words

    def allows(self, secret: str, match: str, line: str) -> bool:
        if self.needs_all:
            return False
        text = {"match": match, "line": line}.get(self.target, secret)
        if any(r.search(text) for r in self.regexes):
            return True
        lowered = secret.lower()
        return any(word in lowered for word in self.stopwords)


@dataclass(frozen=True)
class Rule:
    id: str
    regex: re.Pattern[str]
    keywords: tuple[str, ...]
    secret_group: int
    entropy: float
    allowlists: tuple[Allowlist, ...]

    def spans(self, text: str, lowered: str) -> Iterator[tuple[int, int]]:
        """Where in ``text`` this rule finds a secret: the secret's own span, not the whole match."""
        if self.keywords and not any(k in lowered for k in self.keywords):
            return
        for m in self.regex.finditer(text):
            start, end = m.span()
            if m.re.groups:
                if self.secret_group:
                    if m.group(self.secret_group) is None:
                        continue
                    start, end = m.span(self.secret_group)
                else:
                    for i in range(1, m.re.groups + 1):
                        if m.group(i):
                            start, end = m.span(i)
                            break
            secret = text[start:end]
            if not secret:
                continue
            if self.entropy and shannon_entropy(secret) <= self.entropy:
                continue
            line = _line_around(text, m.start(), m.end())
            if any(a.allows(secret, m.group(0), line) for a in (*self.allowlists, *_GLOBAL())):
                continue
            yield start, end


def shannon_entropy(text: str) -> float:
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _line_around(text: str, start: int, end: int) -> str:
    left = text.rfind("\n", 0, start) + 1
    right = text.find("\n", end)
    return text[left : right if right >= 0 else len(text)]


# ---------------------------------------------------------------------------
# RE2 as Python reads it

_SCOPED_FLAG = re.compile(r"\(\?([imsU]+)\)")
_POSIX_CLASS = re.compile(r"\[:(\w+):\]")
_POSIX = {"alnum": "A-Za-z0-9", "alpha": "A-Za-z", "digit": "0-9", "xdigit": "0-9A-Fa-f"}


def _python_regex(pattern: str) -> str:
    """RE2's spellings that Python reads otherwise.

    A flag set part-way (``p8e-(?i)[a-z0-9]{32}``) lasts, in RE2, to the end of
    its group: here it becomes a scoped group ``(?i:...)`` closed where that group
    closes. ``\\z`` is Python's ``\\Z``; ``[:alnum:]`` is spelt out; a ``[`` inside a class is escaped.
    """
    out: list[str] = []
    levels: list[list[str]] = [[]]  # for each open group: the scoped flags opened in it
    i, in_class = 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            pair = pattern[i : i + 2]
            out.append("\\Z" if pair == "\\z" else pair)
            i += 2
            continue
        if in_class:
            posix = _POSIX_CLASS.match(pattern, i)
            if posix:
                out.append(_POSIX[posix.group(1)])
                i = posix.end()
                continue
            if ch == "]" and out[-1] not in ("[", "[^"):
                in_class = False
            out.append("\\[" if ch == "[" else ch)
            i += 1
            continue
        if ch == "[":
            in_class = True
            if pattern.startswith("[^", i):
                out.append("[^")
                i += 2
            else:
                out.append("[")
                i += 1
            if i < len(pattern) and pattern[i] == "]":  # a leading ] is a literal
                out.append("\\]")
                i += 1
            continue
        flag = _SCOPED_FLAG.match(pattern, i)
        if flag and i > 0:
            out.append(f"(?{flag.group(1)}:")
            levels[-1].append(flag.group(1))
            i = flag.end()
            continue
        if ch == "(":
            out.append(ch)
            levels.append([])
        elif ch == ")" and len(levels) > 1:
            out.append(")" * len(levels.pop()) + ch)
        elif ch == "|":
            # RE2 keeps the flag for the next branch: close it around this one, open it again.
            flags = levels[-1]
            out.append(")" * len(flags) + "|" + "".join(f"(?{f}:" for f in flags))
        else:
            out.append(ch)
        i += 1
    out.append(")" * len(levels[0]))
    return "".join(out)


def _allowlist(raw: dict) -> Allowlist:
    return Allowlist(
        regexes=tuple(re.compile(_python_regex(r)) for r in raw.get("regexes", [])),
        target=raw.get("regexTarget", "secret"),
        stopwords=tuple(w.lower() for w in raw.get("stopwords", [])),
        needs_all=raw.get("condition", "OR").upper() == "AND" and bool(raw.get("paths")),
    )


SKIPPED: list[str] = []  # ids of rules Python's re can't read, or that judge only paths


@cache
def _config() -> dict:
    return tomllib.loads(RULES_FILE.read_text(encoding="utf-8"))


@cache
def _GLOBAL() -> tuple[Allowlist, ...]:
    raw = dict(_config().get("allowlist", {}))
    raw.pop("paths", None)
    return (_allowlist(raw),)


@cache
def rules() -> tuple[Rule, ...]:
    """gitleaks' rules, compiled once."""
    loaded = []
    for raw in _config()["rules"]:
        if "regex" not in raw:
            SKIPPED.append(raw["id"])
            continue
        try:
            regex = re.compile(_python_regex(raw["regex"]))
            allowlists = tuple(_allowlist(a) for a in raw.get("allowlists", []))
        except re.error:
            SKIPPED.append(raw["id"])
            continue
        loaded.append(
            Rule(
                id=raw["id"],
                regex=regex,
                keywords=tuple(k.lower() for k in raw.get("keywords", [])),
                secret_group=int(raw.get("secretGroup", 0)),
                entropy=float(raw.get("entropy", 0.0)),
                allowlists=allowlists,
            )
        )
    return tuple(loaded)


def secret_spans(text: str) -> list[tuple[int, int]]:
    """Every span of ``text`` that a gitleaks rule calls a secret, merged where they overlap."""
    lowered = text.lower()
    spans = sorted(span for rule in rules() for span in rule.spans(text, lowered))
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged
