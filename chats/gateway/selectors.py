"""Reads for the gateway: its settings, sessions by key, who the owner is on a channel,
and a persona's own auth profiles."""

from __future__ import annotations

import functools
from typing import Any

from django.db import connection
from django.db.models import Q, QuerySet

from chats.gateway.models import ChatType, GatewayConfig, OwnerIdentity, SessionOrigin
from chats.models import Agent, AuthProfile, Conversation, Turn
from conch.rows import model_from_row

ERR_NOT_THIS_PERSONAS = "That auth profile isn't this persona's."


def gateway_config() -> GatewayConfig:
    config, _ = GatewayConfig.objects.get_or_create(pk=1)
    return config


def session_active(*, agent_id: int, session_key: str, owner=None) -> Conversation | None:
    """The live generation of a session. Always looked up with its agent (and its owner,
    when given), so a message can only ever land in that persona's, that person's chat."""
    chats = Conversation.objects.filter(agent_id=agent_id, session_key=session_key, archived=False)
    if owner is not None:
        chats = chats.filter(owner=owner)
    return chats.select_related("agent").first()


def session_for_inbound(*, agent_id: int, session_key: str, owner, inbound) -> Conversation | None:
    """The live generation of a session, its row locked, as a message to it reads it: the
    chat (what taking a message in and sending it read, no more), its origin, the stored
    routing version (so a binding changed in another process is seen, with no query of its
    own), whether a reply of the chat's runs (``reply_running``: the message then waits for
    it) and, for a DM, whether the sender is the owner (``from_owner``). None when the
    session has no live generation. Call inside ``atomic()``: the lock is held until it ends.

    Locked here, not later, so the message lands in the chat it read (a reset that archived
    it meanwhile makes it not found, on PostgreSQL too) and the chat's lock is taken before
    its origin's row, in the order every other writer takes them.

    One statement written out (on PostgreSQL, two: the lock, then the read): the ORM took
    ~20 times longer to build and compile this query (an annotation, an Exists, a join,
    deferred fields) than the database to run it, and its row made a chat as the ORM
    would (:func:`conch.rows.model_from_row`). tests/gateway/test_session_lookup.py
    holds it to the rules the ORM wrote.
    """
    dm = inbound.chat_type == ChatType.DM
    params: list[Any] = []
    if dm:
        params += [owner.pk, inbound.channel, inbound.account_id, inbound.peer]
    key = [agent_id, session_key, owner.pk]
    if connection.features.has_select_for_update:
        # PostgreSQL: the lock first, the read after it. A statement that waited for the
        # lock reads as the database was when it began (READ COMMITTED): a message that
        # waited for another's commit would not see the reply that one started, and would
        # start a second (a 500 on one_open_turn_per_chat, the message lost). On SQLite the
        # transaction's first read comes after its write lock: one statement does both.
        with connection.cursor() as cursor:
            cursor.execute(_session_lock_sql(vendor=connection.vendor), key)
            locked = cursor.fetchone()
        if locked is None:
            return None
        key = [locked[0]]
    with connection.cursor() as cursor:
        cursor.execute(_session_sql(vendor=connection.vendor, dm=dm), params + key)
        row = cursor.fetchone()
    if row is None:
        return None
    found = model_from_row(Conversation, INBOUND_READS, row, using=connection.alias)
    stored, reply_running, *rest = row[len(INBOUND_READS) :]
    found.routing_version_stored = stored  # type: ignore[attr-defined]
    found.reply_running = bool(reply_running)  # type: ignore[attr-defined]
    found.from_owner = bool(rest.pop(0)) if dm else None  # type: ignore[attr-defined]
    if rest[0] is not None:  # the session's origin, its JSON decoded as the ORM reads it
        found.gateway = model_from_row(SessionOrigin, ORIGIN_READS, rest, using=connection.alias)
    return found


# The chat's fields a message to a live session reads (any other loads if asked, and the
# query count tests would see it).
INBOUND_READS = (
    "id",
    "public_id",
    "owner_id",
    "agent_id",
    "status",
    "taint",
    "mode",
    "session_key",
    "last_interaction_at",
    "untitled",
    "origin",
    "folder",
    "place",
)


# The session origin's fields it reads, last in the row (after the chat's, and what is
# no field: the stored routing version, whether a reply runs, a DM's from_owner).
ORIGIN_READS = ("conversation_id", "channel", "account_id", "reply_to", "rule")


@functools.cache
def _session_sql(*, vendor: str, dm: bool) -> str:
    """The statement :func:`session_for_inbound` runs, made once per database and shape."""
    qn = connection.ops.quote_name
    chat = qn(Conversation._meta.db_table)
    origin = qn(SessionOrigin._meta.db_table)
    config = qn(GatewayConfig._meta.db_table)
    owners = qn(OwnerIdentity._meta.db_table)
    columns = [f"{chat}.{qn(name)}" for name in INBOUND_READS]
    columns.append(f"(SELECT {qn('routing_version')} FROM {config} WHERE {qn('id')} = 1)")
    columns[-1] += f" AS {qn('routing_version_stored')}"
    # As message_send_locked asks it: an open reply (at most one, by one_open_turn_per_chat).
    turns = qn(Turn._meta.db_table)
    columns.append(
        f"EXISTS(SELECT 1 FROM {turns} WHERE {turns}.{qn('conversation_id')} = {chat}.{qn('id')}"
        f" AND {turns}.{qn('ended_at')} IS NULL) AS {qn('reply_running')}"
    )
    if dm:
        # As _owner_peers asks it: the owner's identity on this channel (any case, as
        # iexact), for this account or for any.
        columns.append(
            f"EXISTS(SELECT 1 FROM {owners} WHERE {owners}.{qn('owner_id')} = %s"
            f" AND UPPER({owners}.{qn('channel')}) = UPPER(%s)"
            f" AND ({owners}.{qn('account_id')} = '' OR {owners}.{qn('account_id')} = %s)"
            f" AND {owners}.{qn('peer')} = %s) AS {qn('from_owner')}"
        )
    columns += [f"{origin}.{qn(name)}" for name in ORIGIN_READS]
    where = (
        f"{chat}.{qn('id')} = %s"  # locked by _session_lock_sql already, found by its id
        if connection.features.has_select_for_update
        else _session_live(chat)
    )
    return (
        f"SELECT {', '.join(columns)} FROM {chat}"
        f" LEFT OUTER JOIN {origin} ON {origin}.{qn('conversation_id')} = {chat}.{qn('id')}"
        f" WHERE {where} LIMIT 1"
    )


def _session_live(chat: str) -> str:
    """Where a session's live generation is: its agent, its key, not archived, its owner."""
    qn = connection.ops.quote_name
    return (
        f"{chat}.{qn('agent_id')} = %s AND {chat}.{qn('session_key')} = %s"
        f" AND NOT {chat}.{qn('archived')} AND {chat}.{qn('owner_id')} = %s"
    )


@functools.cache
def _session_lock_sql(*, vendor: str) -> str:
    """The statement that finds the session's live generation and locks its row. of: the
    chat's row only; no_key, as Conversation.objects.lock() takes it."""
    qn = connection.ops.quote_name
    chat = qn(Conversation._meta.db_table)
    return (
        f"SELECT {chat}.{qn('id')} FROM {chat} WHERE {_session_live(chat)} LIMIT 1 "
        + connection.ops.for_update_sql(of=(chat,), no_key=True)
    )


def session_key_taken(*, session_key: str, owner) -> bool:
    """Whether another person's live chat holds this key (keys are unique among live chats)."""
    return (
        Conversation.objects.filter(session_key=session_key, archived=False)
        .exclude(owner=owner)
        .exists()
    )


def session_latest_archived(*, agent_id: int, session_key: str, owner) -> Conversation | None:
    return (
        Conversation.objects.filter(
            agent_id=agent_id, session_key=session_key, archived=True, owner=owner
        )
        .order_by("-session_started_at", "-pk")
        .first()
    )


def someone_elses(*, owner, inbound, from_owner: bool | None = None) -> bool:
    """Whether a message brings someone else's words: a group or thread, or a DM not from
    the owner (``from_owner``, when already read with the session: see
    :func:`session_for_inbound`)."""
    if inbound.chat_type in (ChatType.GROUP, ChatType.THREAD):
        return True
    if inbound.chat_type != ChatType.DM:
        return False
    if from_owner is None:
        from_owner = is_owner_peer(
            owner=owner, channel=inbound.channel, account_id=inbound.account_id, peer=inbound.peer
        )
    return not from_owner


def is_owner_peer(*, owner, channel: str, account_id: str, peer: str) -> bool:
    """Whether ``peer`` on ``channel`` is the owner themself (configured in OwnerIdentity)."""
    return _owner_peers(owner=owner, channel=channel, account_id=account_id, peer=peer).exists()


def _owner_peers(*, owner, channel: str, account_id: str, peer: str) -> QuerySet[OwnerIdentity]:
    return OwnerIdentity.objects.filter(
        Q(account_id="") | Q(account_id=account_id),
        owner=owner,
        channel__iexact=channel,
        peer=peer,
    )


def auth_profiles_for(*, agent: Agent) -> QuerySet[AuthProfile]:
    """One persona's auth profiles: never another's."""
    return AuthProfile.objects.filter(agent=agent).order_by("name")


def auth_profile_for(*, conversation: Conversation, name: str) -> AuthProfile:
    """The named auth profile of the persona this chat belongs to.

    Raises ``AuthProfile.DoesNotExist`` for a name only another persona has,
    so one persona's credentials never reach another's chat, tools or prompt.
    """
    try:
        return AuthProfile.objects.get(agent_id=conversation.agent_id, name=name)
    except AuthProfile.DoesNotExist:
        raise AuthProfile.DoesNotExist(ERR_NOT_THIS_PERSONAS) from None
