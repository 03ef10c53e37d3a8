"""The one place where words from one chat are made safe to put in front of another.

Two shapes:

- :func:`plain` for a title or a file name inside Conch's own line: brackets,
  quotes and angle brackets are taken out, with control, zero-width and bidi
  characters, so nothing can close Conch's line or open one that looks like it.
- :func:`fence` for longer words (a last reply, a message): secrets are taken
  out *before* the text is cut, then angle brackets and ``[Conch`` are written
  otherwise, so nothing inside can close the fence or speak as Conch.
"""

from __future__ import annotations

import re
import unicodedata

TITLE_LIMIT = 120
NAME_LIMIT = 200

# Brackets, quotes (straight and typographic) and angle brackets of every kind.
_LINE_BREAKERS = set(
    "[](){}<>\"'`«»‹›“”„‟‘’‚‛〈〉《》「」『』【】〔〕〖〗〘〙〚〛＜＞［］｛｝（）＂＇"
)


def _invisible(ch: str) -> bool:
    """Control, format (zero-width, bidi overrides and isolates), and other invisible characters."""
    category = unicodedata.category(ch)
    return category in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")


def plain(text: str, *, limit: int = TITLE_LIMIT) -> str:
    """Plain words for inside Conch's line: no brackets, quotes, angle brackets or invisibles."""
    text = unicodedata.normalize("NFKC", str(text or ""))
    kept = []
    for ch in text:
        if ch in _LINE_BREAKERS or _invisible(ch):
            kept.append(" ")
        else:
            kept.append(ch)
    cleaned = re.sub(r"\s+", " ", "".join(kept)).strip()
    # NFKC can turn a lookalike into a real bracket; run the filter once more.
    cleaned = "".join(ch for ch in cleaned if ch not in _LINE_BREAKERS)
    if len(cleaned) > limit:
        cleaned = cleaned[: limit - 1].rstrip() + "…"
    return cleaned or "untitled"


def plain_path(path: str) -> str:
    return plain(path, limit=NAME_LIMIT)


# ---------------------------------------------------------------------------
# Secrets

_KEY_SHAPES = [
    re.compile(r"\b(?:sk|pk|rk)-(?:live-|test-|proj-|ant-)?[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"),
    re.compile(r"\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"),
    re.compile(r"\b[0-9]{6,}:[A-Za-z0-9_\-]{30,}\b"),  # chat-app bot tokens
    re.compile(r"(?i)\b(?:bearer)\s+[A-Za-z0-9._\-]{16,}"),
]
_ASSIGNED = re.compile(
    r"(?i)\b(password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|client[_-]?secret)"
    r"(\s*[:=]\s*|\s+is\s+)"
    r"(\"[^\"]*\"|'[^']*'|\S+)"
)
REDACTED = "[redacted]"


def scrub_secrets(text: str, *, known: tuple[str, ...] = ()) -> str:
    """Take out known secret values and anything shaped like a key or a password."""
    text = str(text or "")
    for value in sorted((k for k in known if k and len(k) >= 4), key=len, reverse=True):
        text = text.replace(value, REDACTED)
    for shape in _KEY_SHAPES:
        text = shape.sub(REDACTED, text)
    return _ASSIGNED.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


def known_secrets() -> tuple[str, ...]:
    """The values Conch holds as passwords: every auth profile's secret."""
    from chats.models import AuthProfile

    return tuple(v for v in AuthProfile.objects.exclude(secret="").values_list("secret", flat=True))


def clean(text: str) -> str:
    """A message or reply as it leaves its chat: known secrets and key shapes taken out."""
    return scrub_secrets(text, known=known_secrets())


# ---------------------------------------------------------------------------
# Fences

_CONCH_VOICE = re.compile(r"\[\s*conch", re.IGNORECASE)


def quote(text: str) -> str:
    """Write angle brackets and ``[Conch`` otherwise, so the words can't close a fence or speak as Conch."""
    text = "".join(" " if _invisible(ch) and ch not in "\n\t" else ch for ch in str(text or ""))
    text = text.replace("<", "‹").replace(">", "›").replace("＜", "‹").replace("＞", "›")
    return _CONCH_VOICE.sub(lambda m: "(" + m.group(0)[1:], text)


def last_chars(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return "…" + text[-(limit - 1) :]


def fence(
    tag: str, text: str, *, limit: int | None = None, attrs: dict[str, str] | None = None
) -> str:
    """``<tag>…</tag>`` around cleaned, quoted words. Secrets go before the cut."""
    words = clean(text)
    if limit is not None:
        words = last_chars(words, limit)
    attributes = "".join(f' {k}="{plain(v, limit=NAME_LIMIT)}"' for k, v in (attrs or {}).items())
    return f"<{tag}{attributes}>\n{quote(words)}\n</{tag}>"
