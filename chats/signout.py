"""A session that ends takes its sockets with it.

Each workspace socket joins its browser session's group (:func:`session_group`).
When the session ends, ``session.ended`` goes to that group through the channel
layer (so from any process, with Redis) and the consumer closes:

- signing out, Conch's own or the admin's: ``user_logged_out``, whatever the
  session engine;
- a database session deleted any other way (flushed, its key cycled at a new
  sign-in, swept): ``post_delete`` on ``Session``. A sign-out deletes its row too,
  so it sends twice; a second close is a no-op.

Expiry sends nothing: the consumer asks :func:`session_state` when its session
expires, and now and then in case it was deleted where no signal sees it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from importlib import import_module
from typing import cast

from django.conf import settings
from django.contrib import auth
from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.db import transaction
from django.http import HttpRequest
from django.utils.crypto import salted_hmac

from chats import events

SESSION_ENDED = "session.ended"
_GROUP_SALT = "conch.signout.session_group"


def session_group(session_key: str) -> str:
    """The group of one session's sockets. Named by a keyed hash: the key is the
    cookie, and group names are stored in the channel layer (Redis) in the clear."""
    return "session." + salted_hmac(_GROUP_SALT, session_key, algorithm="sha256").hexdigest()


def session_end(*, session_key: str | None) -> None:
    """Close every socket of this session, once the surrounding transaction commits."""
    if not session_key:
        return
    group = session_group(session_key)
    transaction.on_commit(lambda: events.group_notify(group, {"type": SESSION_ENDED}))


@dataclass(frozen=True)
class SessionState:
    # None when the session engine keeps no expiry date Conch can read.
    expires_at: datetime | None


@dataclass
class _SessionOnly:
    """What ``django.contrib.auth.get_user`` reads of a request."""

    session: object


def session_state(*, session_key: str, user_id: int) -> SessionState | None:
    """The session, if it still signs ``user_id`` in; None once it doesn't: signed
    out, deleted, expired, or no longer valid for that user (a changed password)."""
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    if auth.get_user(cast(HttpRequest, _SessionOnly(store))).pk != user_id:
        return None
    if not isinstance(store, DatabaseSessionStore):
        return SessionState(expires_at=None)
    expires_at = (
        store.get_model_class()
        .objects.filter(session_key=session_key)
        .values_list("expire_date", flat=True)
        .first()
    )
    return None if expires_at is None else SessionState(expires_at=expires_at)


def _on_signed_out(sender, request, user, **kwargs) -> None:
    session = getattr(request, "session", None)
    session_end(session_key=getattr(session, "session_key", None))


def _on_session_deleted(sender, instance, **kwargs) -> None:
    session_end(session_key=instance.session_key)


def connect_signout() -> None:
    """Wire the signals; ChatsConfig.ready calls this once."""
    from django.contrib.auth.signals import user_logged_out
    from django.contrib.sessions.models import Session
    from django.db.models.signals import post_delete

    user_logged_out.connect(_on_signed_out, dispatch_uid="conch.signout.signed_out")
    post_delete.connect(_on_session_deleted, sender=Session, dispatch_uid="conch.signout.deleted")
