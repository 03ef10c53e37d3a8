"""Anything shaped like a key or a password, taken out of words Conch keeps or passes on.

``together.quoting`` uses this before words cross from one chat to another;
the runtime uses it before a step's arguments are stored.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chats.models import Agent

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


# Environment variables whose values are the server's secrets, wherever they show up:
# named for a secret at their end (OPENAI_API_KEY, GITHUB_TOKEN), or Conch's stores.
_SECRET_ENV = re.compile(
    r"(?i)(?:^|_)(?:secret|secret_?key|token|password|passwd|api_?key|private_?key|access_?key|credentials?)$"
    r"|^(?:database_url|redis_url)$"
)
# Shorter values are too likely to be ordinary words ("false", "1234") to take out.
_SHORTEST_ENV_SECRET = 8


def known_secrets(
    agent: Agent | None = None, environ: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """Secret values Conch holds: Django's key, secret-named variables, the persona's auth profiles.

    For :func:`scrub_secrets`'s ``known``: a command's output that prints one of
    them exactly is caught even when it has no key's shape.
    """
    from django.conf import settings

    environ = os.environ if environ is None else environ
    values = [settings.SECRET_KEY]
    values += [
        value
        for name, value in environ.items()
        if _SECRET_ENV.search(name) and len(value) >= _SHORTEST_ENV_SECRET
    ]
    if agent is not None and agent.pk is not None:
        values += list(agent.auth_profiles.exclude(secret="").values_list("secret", flat=True))
    return tuple(v for v in values if v)
