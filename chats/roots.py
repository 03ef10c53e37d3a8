"""Which folders each account's chats may work in.

Conch may have more accounts than its owner (the admin makes them). None of them may
point a chat at the owner's files: every account works only beneath the folders the owner
set for it in the admin (:class:`chats.models.FolderRoot`). An account with none set works
beneath its own folder in Conch's home, ``CONCH_HOME/workspaces/account-<id>``, made when
first needed; the install's owner, a superuser, with none set works anywhere, as ever.

Checked where a chat is made (``conversation_create``) and again at every step that uses
the chat's folder (``chats.runtime.stepping``), so a root taken away later holds too.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

from chats.models import FolderRoot

ERR_OUTSIDE_ROOTS = (
    "{folder} is outside the folders this account's chats may work in ({roots}). "
    "The owner sets them in the admin (Folder roots)."
)


def own_folder(account) -> Path:
    """The account's own folder, beneath Conch's home: where its chats work by default."""
    return Path(settings.CONCH_HOME) / "workspaces" / f"account-{account.pk}"


def roots_for(account) -> list[Path] | None:
    """The real paths the account's chats may work beneath; None for anywhere."""
    set_ = list(FolderRoot.objects.filter(account_id=account.pk).values_list("path", flat=True))
    if set_:
        return [Path(os.path.realpath(path)) for path in set_]
    if account.is_superuser:
        return None
    return [Path(os.path.realpath(own_folder(account)))]


# Given for the roots when the caller read them already; else they are read here.
UNREAD: list[Path] = []


def default_folder(account, roots: list[Path] | None = UNREAD) -> Path | None:
    """Where a chat of this account works when none is chosen; None: the persona's own."""
    if roots is UNREAD:
        roots = roots_for(account)
    if roots is None:
        return None
    first = roots[0]
    if first == Path(os.path.realpath(own_folder(account))):
        first.mkdir(parents=True, exist_ok=True, mode=0o700)
    return first


def folder_refusal(account, folder: str | os.PathLike, roots: list[Path] | None = UNREAD) -> str:
    """Why this account's chat may not work in ``folder``, or ""."""
    if roots is UNREAD:
        roots = roots_for(account)
    if roots is None:
        return ""
    real = Path(os.path.realpath(folder))
    if any(real == root or root in real.parents for root in roots):
        return ""
    return ERR_OUTSIDE_ROOTS.format(folder=folder, roots=", ".join(str(r) for r in roots))
