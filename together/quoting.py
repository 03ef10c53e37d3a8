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

from chats.secrets import REDACTED, scrub_secrets

__all__ = ["REDACTED", "clean", "fence", "plain", "plain_path", "quote", "scrub_secrets"]

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
# Secrets: the shapes live in chats.secrets, so the runtime scrubs with the same rules.


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
