"""The gateway's writes: tokens, taking an inbound message in, and starting sessions afresh.

An inbound message is routed (:func:`~chats.gateway.routing.resolve_route`),
then lands in its session's live chat, made in the agent's workspace if there
is none, and is sent with ``message_send``: it starts a reply, or queues
behind the running one. A reset archives the live generation (it stays
readable and searchable) and the next one links to it and says why it
started fresh. A working chat is never reset mid-reply: the reset waits for
the reply to end (the turn-end hook), and messages queued meanwhile go to the
new generation.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import logging
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from chats.gateway.floods import inbound_limit
from chats.gateway.inbound import Ignore, Inbound
from chats.gateway.lifecycle import Policies, due_before, local_zone, manual_reset, reset_reason
from chats.gateway.models import (
    ChannelAccount,
    ChatType,
    GatewayConfig,
    GatewayToken,
    InboundRecord,
    SessionOrigin,
)
from chats.gateway.outbox import outbox_enqueue, outbox_enqueue_reply, reply_target
from chats.gateway.routing import Route, RouteIndex, route_index, route_index_catch_up
from chats.gateway.selectors import (
    session_active,
    session_for_inbound,
    session_key_taken,
    session_latest_archived,
    someone_elses,
)
from chats.limits import LIMITS
from chats.models import (
    Agent,
    Conversation,
    EntryKind,
    EntryRole,
    Mode,
    Origin,
    QueuedInput,
    Taint,
    Turn,
    TurnState,
)
from chats.quoting import fence, not_as_conch
from chats.runtime.chats import (
    ConchError,
    conversation_archive,
    conversation_create,
    conversation_rename,
    entry_append,
    someone_elses_words_came,
)
from chats.runtime.turns import message_send, message_send_locked, queued_inputs_take
from chats.taint import Cause
from conch.rows import model_from_row, model_insert, model_update

log = logging.getLogger(__name__)

TOKEN_PREFIX = "conch_gw_"
ACK_FRESH = "Started fresh. The earlier conversation is kept."
ACK_FRESH_LATER = "I'll start fresh once the current reply ends."
ERR_NO_PREVIOUS_REASON = "the earlier chat was archived"
ERR_KEY_TAKEN = (
    "The session {key} is another person's chat on this Conch. Bind this account to an agent "
    "of its own, or key DMs per account (dmScope per-account-channel-peer)."
)


class SessionTaken(ConchError):
    """The message's session is another person's live chat: refused, never joined."""


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


# ---------------------------------------------------------------------------
# Tokens


def gateway_token_rotate(*, owner) -> str:
    """Make the install's gateway token, retiring any other. The token is returned once."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        GatewayToken.objects.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        GatewayToken.objects.create(owner=owner, digest=_digest(token))
    return token


def gateway_token_owner(token: str):
    """Whose gateway this token opens, or None. Looked up by digest: nothing to time.

    Every message at the door asks this first, so it is one statement written out, its
    row made a user as the ORM would (:mod:`conch.rows`): the ORM's join took longer to
    build than the database to run it. A revoked token opens nothing, from the moment it
    is revoked: nothing is remembered between messages.
    """
    if not token or not token.startswith(TOKEN_PREFIX):
        return None
    users = GatewayToken._meta.get_field("owner").related_model
    with connection.cursor() as cursor:
        cursor.execute(_token_owner_sql(vendor=connection.vendor), [_digest(token)])
        row = cursor.fetchone()
        if row is None:
            return None
        columns = [column[0] for column in cursor.description]
    return model_from_row(users, columns, row, using=connection.alias)


@functools.cache
def _token_owner_sql(*, vendor: str) -> str:
    qn = connection.ops.quote_name
    users = qn(GatewayToken._meta.get_field("owner").related_model._meta.db_table)
    tokens = qn(GatewayToken._meta.db_table)
    return (
        f"SELECT {users}.* FROM {tokens} INNER JOIN {users}"
        f" ON {users}.{qn('id')} = {tokens}.{qn('owner_id')}"
        f" WHERE {tokens}.{qn('digest')} = %s AND {tokens}.{qn('revoked_at')} IS NULL"
    )


def channel_account_secret_rotate(*, account: ChannelAccount) -> str:
    """A new webhook secret for a chat-app account (Telegram's ``secret_token``), shown once."""
    secret = secrets.token_urlsafe(32)
    ChannelAccount.objects.filter(pk=account.pk).update(webhook_secret_digest=_digest(secret))
    account.webhook_secret_digest = _digest(secret)
    return secret


def channel_account_check(*, account: ChannelAccount, secret: str) -> bool:
    if not account.webhook_secret_digest or not secret:
        return False
    return secrets.compare_digest(_digest(secret), account.webhook_secret_digest)


# ---------------------------------------------------------------------------
# Taking a message in


@dataclass(frozen=True)
class InboundResult:
    outcome: str  # started | queued | reset | reset_pending | duplicate
    chat: str | None
    session_key: str
    agent: str
    rule: str
    tier: str
    shared_dm: bool

    def as_dict(self) -> dict:
        return asdict(self)


def default_reply_to(inbound: Inbound) -> dict:
    """Where a message's reply goes when its door says nothing more: its chat, and its thread."""
    if inbound.chat_type == ChatType.DM:
        return reply_target(chat_id=inbound.peer)
    if inbound.chat_type == ChatType.GROUP:
        return reply_target(chat_id=inbound.group_id)
    if inbound.chat_type == ChatType.THREAD:
        return reply_target(chat_id=inbound.thread_parent, message_thread_id=inbound.thread_id)
    return {}


def _title(inbound: Inbound) -> str:
    channel = inbound.channel.title()
    group = " ".join(not_as_conch(inbound.group_name).split())
    if inbound.chat_type == ChatType.DM:
        title = f"{channel} · {inbound.peer}"
    elif inbound.chat_type == ChatType.GROUP:
        title = f"{channel} · {group}" if group else f"{channel} group {inbound.group_id}"
    elif inbound.chat_type == ChatType.THREAD:
        title = f"{channel} thread {inbound.thread_id} in {group or inbound.thread_parent}"
    else:
        title = f"Routine {inbound.job_id} · run {inbound.message_id}"
    return title[: LIMITS.title_chars]


def inbound_of(origin: SessionOrigin, **changed: str) -> Inbound:
    """Where a session's messages come from, as a message of it (``changed`` aside): what
    its key and its title are made from."""
    fields: dict[str, Any] = {
        "channel": origin.channel,
        "chat_type": origin.chat_type,
        "account_id": origin.account_id,
        "peer": origin.peer,
        "group_id": origin.group_id,
        "thread_id": origin.thread_id,
        "parent_peer": origin.parent_peer,
        "group_name": origin.group_name,
    }
    return Inbound(**fields | changed)


def group_retitle(*, channel: str, account_id: str, group_id: str, title: str) -> int:
    """A group was renamed on its app: its live sessions' titles follow, except where the
    person gave the chat a title of their own. Returns how many chats were renamed."""
    renamed = 0
    origins = SessionOrigin.objects.select_related("conversation").filter(
        channel=channel,
        account_id=account_id,
        group_id=group_id,
        conversation__archived=False,
    )
    for origin in origins:
        if origin.group_name == title:
            continue
        was = inbound_of(origin)
        if origin.conversation.title == _title(was):  # not renamed by the person
            now = inbound_of(origin, group_name=title)
            conversation_rename(conversation=origin.conversation, title=_title(now))
            renamed += 1
        SessionOrigin.objects.filter(pk=origin.pk).update(group_name=title)
    return renamed


def _has_open_turn(conversation: Conversation) -> bool:
    return Turn.objects.filter(conversation_id=conversation.pk, ended_at__isnull=True).exists()


def _fresh_note(previous: Conversation, why: str) -> str:
    return (
        f"This chat started fresh: {why}. The earlier conversation is kept, archived, "
        f"as chat {previous.public_id}."
    )


def session_start(
    *,
    owner,
    agent: Agent,
    session_key: str,
    title: str,
    origin_fields: dict,
    origin: str,
    taint: str,
    mode: str,
    taint_cause: Cause | None = None,
    previous: Conversation | None = None,
    started_because: str = "",
    folder: str = "",
) -> Conversation:
    """Make a session's live generation, working in ``folder`` (else the agent's
    workspace). Call inside ``atomic()``.

    Raises IntegrityError if another live generation of the key appeared meanwhile.
    """
    if not folder:
        folder = agent.workspace
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
        except OSError:
            log.warning("could not make the workspace %s for %s", folder, agent.slug)
    with transaction.atomic():
        chat = conversation_create(
            owner=owner,
            title=title,
            folder=folder,
            agent=agent,
            origin=origin,
            origin_channel=origin_fields.get("channel", "") if origin == Origin.CHAT_APP else "",
            taint=taint,
            taint_cause=taint_cause,
            mode=mode,
            session_key=session_key,
        )
        SessionOrigin.objects.create(
            conversation=chat,
            previous=previous,
            started_because=started_because if previous else "",
            **origin_fields,
        )
        if previous is not None:
            entry_append(
                conversation=chat,
                role=EntryRole.CONCH,
                kind=EntryKind.NOTE,
                text=_fresh_note(previous, started_because),
                data={"reset": started_because, "previous": previous.public_id},
            )
    return chat


def _origin_fields(inbound: Inbound, route: Route, reply_to: dict) -> dict:
    return {
        "chat_type": inbound.chat_type,
        "channel": inbound.channel,
        "account_id": inbound.account_id,
        "peer": inbound.peer,
        "group_id": inbound.group_id,
        "group_name": inbound.group_name,
        "thread_id": inbound.thread_id,
        "parent_peer": inbound.thread_parent,
        "guild_id": inbound.guild_id,
        "team_id": inbound.team_id,
        "job_id": inbound.job_id,
        "reply_to": reply_to,
        "rule": route.rule.label[:255],
        "dm_scope": route.dm_scope,
    }


def session_end(*, conversation: Conversation, reason: str) -> str:
    """Archive a session's live generation, or mark the reset pending if a reply is running.

    Returns ``archived``, ``pending`` or ``gone`` (already archived or deleted).
    """
    with transaction.atomic():
        try:
            chat = Conversation.objects.lock(conversation.pk)
        except Conversation.DoesNotExist:
            return "gone"
        if chat.archived:
            return "gone"
        if _has_open_turn(chat):
            SessionOrigin.objects.filter(pk=chat.pk).update(reset_pending=reason)
            return "pending"
        SessionOrigin.objects.filter(pk=chat.pk).update(ended_because=reason, reset_pending="")
        conversation_archive(conversation=chat)
    return "archived"


def speaker(inbound: Inbound) -> str:
    """Who speaks, as the assistant reads it: their name on one line, never as Conch, else their id."""
    name = " ".join(not_as_conch(inbound.sender_name).split())[: LIMITS.title_chars]
    return name or inbound.peer


def _message_text(inbound: Inbound, text: str) -> str:
    if inbound.chat_type in (ChatType.GROUP, ChatType.THREAD):
        text = f"{speaker(inbound)}: {text}"  # several people talk here: say who
    if inbound.in_reply_to_text:
        # What it answers, fenced as its writer's words: read as theirs, never as an order.
        who = " ".join(not_as_conch(inbound.in_reply_to_name).split()) or "someone"
        words = inbound.in_reply_to_text
        if len(words) > LIMITS.in_reply_to_chars:
            words = words[: LIMITS.in_reply_to_chars - 1] + "…"
        text = fence("replying-to", words, attrs={"who": who}) + "\n" + text
    return text


def inbound_receive(
    *,
    owner,
    inbound: Inbound,
    reply_to: dict | None = None,
    now: dt.datetime | None = None,
) -> InboundResult:
    """Route one inbound message into its session and send it there. Idempotent on
    (channel, account_id, message_id): a repeat changes nothing and says ``duplicate``.

    A message to a live session reads one row for it, locked as it is read
    (:func:`session_for_inbound`: the chat, its origin, the stored routing version and
    who the sender is); its receipt is written last, so a repeat finds the receipt taken
    and undoes everything it did.
    """
    stamp = now is not None  # a caller's clock: stamp the chat with it, not the wall clock
    now = now or timezone.now()
    index = route_index()
    route = index.resolve(inbound)
    reply_to = reply_to if reply_to is not None else default_reply_to(inbound)
    limited = inbound_limit(owner=owner, inbound=inbound, reply_to=reply_to, now=now)
    if limited is not None:  # too fast: kept as refused (its sender told once), not taken
        inbound_not_taken(
            channel=inbound.channel,
            account_id=inbound.account_id,
            message_id=inbound.message_id,
            outcome="refused",
            reason=limited.reason,
            sender=inbound.peer,
            limited=True,
            told=limited.told,
            received_at=now,
        )
        raise limited
    command = manual_reset(inbound.text) if inbound.chat_type != ChatType.CRON else None
    try:
        with transaction.atomic():
            found = _session_found(owner, inbound, route)
            stored = (
                getattr(found, "routing_version_stored", None)
                if found is not None
                else (
                    GatewayConfig.objects.filter(pk=1)
                    .values_list("routing_version", flat=True)
                    .first()
                )
            )
            if stored is None or stored > index.version:  # a binding changed since
                index = route_index_catch_up()
                fresh = index.resolve(inbound)
                if fresh != route:
                    route = fresh
                    found = _session_found(owner, inbound, route)
            outcome, chat = _take_in(
                owner, inbound, route, reply_to, command, now, found, index, stamp=stamp
            )
            _receipt(inbound, route, now, chat, outcome)
    except IntegrityError:
        first = InboundRecord.objects.filter(
            channel=inbound.channel, account_id=inbound.account_id, message_id=inbound.message_id
        ).first()
        if first is None:
            raise
        if first.limited:  # refused for coming too fast before, and sent again now: take it
            first.delete()
            return inbound_receive(owner=owner, inbound=inbound, reply_to=reply_to, now=now)
        earlier = (
            Conversation.objects.filter(pk=first.conversation_id).first()
            if first.conversation_id is not None
            else None
        )
        return InboundResult(
            outcome="duplicate", chat=earlier.public_id if earlier else None, **_described(route)
        )
    log.info(
        "inbound %s:%s:%s → %s via %s (%s)",
        inbound.channel,
        inbound.account_id,
        inbound.message_id,
        route.session_key,
        route.rule.label,
        outcome,
    )
    return InboundResult(outcome=outcome, chat=chat.public_id, **_described(route))


def _described(route: Route) -> dict[str, Any]:
    return {
        "session_key": route.session_key,
        "agent": route.agent.slug,
        "rule": route.rule.label,
        "tier": str(route.rule.tier),
        "shared_dm": route.shared_dm,
    }


def _session_found(owner, inbound: Inbound, route: Route) -> Conversation | None:
    return session_for_inbound(
        agent_id=route.agent.id, session_key=route.session_key, owner=owner, inbound=inbound
    )


def ignored_keep(*, channel: str, account_id: str, ignore: Ignore) -> None:
    """Keep a chat app's payload we don't take in the admin, as ignored, with why, when it
    was a message (one with nothing to keep, a poll or a status, is only answered)."""
    if ignore.message_id:
        inbound_not_taken(
            channel=channel,
            account_id=account_id,
            message_id=ignore.message_id,
            outcome="ignored",
            reason=ignore.reason,
        )


def inbound_not_taken(
    *,
    channel: str,
    account_id: str,
    message_id: str,
    outcome: str,
    reason: str,
    sender: str = "",
    limited: bool = False,
    told: bool = False,
    received_at: dt.datetime | None = None,
) -> None:
    """Keep an update a door chose not to take (``refused`` or ``ignored``), with why, for the
    admin. Its id is its receipt: a redelivery of it is the same row, kept once."""
    log.warning("inbound %s:%s:%s %s: %s", channel, account_id, message_id, outcome, reason)
    try:
        with transaction.atomic():
            InboundRecord.objects.create(
                channel=channel,
                account_id=account_id,
                message_id=message_id[:255],
                session_key="",
                agent_slug="",
                rule="",
                outcome=outcome,
                reason=reason[:2000],
                sender=sender[:128],
                limited=limited,
                told=told,
                received_at=received_at or timezone.now(),
            )
    except IntegrityError:
        pass  # kept already


def _receipt(
    inbound: Inbound, route: Route, now: dt.datetime, chat: Conversation, outcome: str
) -> None:
    """The message's receipt, written last inside the message's transaction. A twin
    received before (or at once, on PostgreSQL: it waits on the unique row) makes this
    raise IntegrityError, and the whole message is undone: it was a duplicate."""
    record = InboundRecord(
        channel=inbound.channel,
        account_id=inbound.account_id,
        message_id=inbound.message_id,
        conversation=chat,
        session_key=route.session_key,
        agent_slug=route.agent.slug,
        rule=route.rule.label[:255],
        outcome=outcome,
        shared_dm=route.shared_dm,
        received_at=now,
        sender=inbound.peer[:128],
    )
    model_insert(record)


def _take_in(
    owner,
    inbound: Inbound,
    route: Route,
    reply_to: dict,
    command: tuple[str, str] | None,
    now: dt.datetime,
    chat: Conversation | None,
    index: RouteIndex,
    *,
    stamp: bool,
) -> tuple[str, Conversation]:
    """Land the message in ``chat`` (its session's live generation, None if none), or in
    a new generation; ``stamp``: the caller gave ``now``, so the chat is stamped with it."""
    others = someone_elses(
        owner=owner, inbound=inbound, from_owner=getattr(chat, "from_owner", None)
    )
    fields = _origin_fields(inbound, route, reply_to)
    if chat is None and session_key_taken(session_key=route.session_key, owner=owner):
        raise SessionTaken(ERR_KEY_TAKEN.format(key=route.session_key))
    previous, why = None, ""
    pending = False

    if chat is not None:
        if command is not None:
            why = f"you sent {command[0]}"
        elif inbound.chat_type != ChatType.CRON:
            policy = index.reset_policies().for_session(
                chat_type=inbound.chat_type, channel=inbound.channel
            )
            why = reset_reason(
                policy, last_interaction_at=chat.last_interaction_at, now=now, zone=local_zone()
            )
        if why:
            ended = session_end(conversation=chat, reason=why)
            if ended == "pending":
                pending = True
            else:
                previous, chat = chat, None

    if chat is None:
        if previous is None:
            previous = session_latest_archived(
                agent_id=route.agent.id, session_key=route.session_key, owner=owner
            )
            if previous is not None:
                why = (
                    SessionOrigin.objects.filter(pk=previous.pk)
                    .values_list("ended_because", flat=True)
                    .first()
                ) or ERR_NO_PREVIOUS_REASON
        agent = Agent.objects.get(pk=route.agent.id)
        origin = Origin.ROUTINE if inbound.chat_type == ChatType.CRON else Origin.CHAT_APP
        kwargs = {
            "owner": owner,
            "agent": agent,
            "session_key": route.session_key,
            "title": _title(inbound),
            "origin_fields": fields,
            "origin": origin,
            "taint": Taint.PERSON if others else Taint.NONE,
            "taint_cause": Cause.stranger(
                channel=inbound.channel, sender=inbound.peer, message_id=inbound.message_id
            ),
            # Someone else's words never run a write without the owner's OK.
            "mode": Mode.ASK if others else Mode.AUTO,
            "previous": previous,
            "started_because": why,
        }
        try:
            chat = session_start(**kwargs)  # made in this transaction: no one else's yet
        except IntegrityError:  # the same key's first message, twice at once: join it
            joined = session_active(
                agent_id=route.agent.id, session_key=route.session_key, owner=owner
            )
            if joined is None:
                raise
            chat = Conversation.objects.lock(joined.pk)
    else:
        _origin_follow(chat, reply_to=reply_to, inbound=inbound, rule=fields["rule"])

    if others and not chat.taint_at_least(Taint.PERSON):
        # Someone else's words just joined a chat of yours (dmScope shared): from now
        # on a write waits for your OK, as in any chat with someone else's words.
        chat = someone_elses_words_came(
            conversation=chat,
            who=inbound.peer,
            channel=inbound.channel,
            message_id=inbound.message_id,
        )

    text = command[1] if command is not None else inbound.text
    if not text:
        ack = ACK_FRESH_LATER if pending else ACK_FRESH
        outbox_enqueue(
            conversation=chat,
            channel=inbound.channel,
            account_id=inbound.account_id,
            target=reply_to,
            text=ack,
        )
        Conversation.objects.filter(pk=chat.pk).update(last_interaction_at=now, updated_at=now)
        return ("reset_pending" if pending else "reset"), chat

    said_by = (
        {"name": speaker(inbound), "app": inbound.channel}
        if inbound.chat_type != ChatType.CRON
        else None
    )
    # The chat is locked: read under its lock (session_for_inbound), made here, or joined.
    sent = message_send_locked(
        conversation=chat,
        text=_message_text(inbound, text),
        said_by=said_by,
        # Read with the session's row, under its lock; a chat made or joined here asks.
        reply_running=getattr(chat, "reply_running", None),
    )
    if stamp or not isinstance(sent, Turn):  # a reply started stamped it already, with now
        model_update(Conversation, chat.pk, last_interaction_at=now, updated_at=now)
    if pending:
        return "reset_pending", chat
    return ("queued" if isinstance(sent, QueuedInput) else "started"), chat


def _origin_follow(chat: Conversation, *, reply_to: dict, inbound: Inbound, rule: str) -> None:
    """Point the session's replies where its latest message came from; no write when
    that is where they go already (the origin was read with the chat)."""
    follows = {
        "reply_to": reply_to,
        "channel": inbound.channel,
        "account_id": inbound.account_id,
        "rule": rule,
    }
    origin = getattr(chat, "gateway", None)
    if origin is not None and all(getattr(origin, k) == v for k, v in follows.items()):
        return
    SessionOrigin.objects.filter(pk=chat.pk).update(**follows)


# ---------------------------------------------------------------------------
# After a reply: its words go out, and a reset that waited for it happens


def on_turn_end(turn: Turn) -> None:
    """The turn-end hook: enqueue the reply for the chat app, then any reset that waited."""
    origin = SessionOrigin.objects.filter(pk=turn.conversation_id).first()
    if origin is None:
        return
    outbox_enqueue_reply(turn=turn, origin=origin)
    if origin.reset_pending:
        session_reset_after_reply(
            conversation_id=turn.conversation_id, stopped=turn.state == TurnState.STOPPED
        )


def session_reset_after_reply(
    *, conversation_id: int, stopped: bool = False
) -> Conversation | None:
    """Do the reset that waited for a reply. Messages queued meanwhile open the next generation.

    Returns the new generation, if one was opened.
    """
    with transaction.atomic():
        chat = Conversation.objects.lock(conversation_id)
        origin = SessionOrigin.objects.filter(pk=chat.pk).first()
        if origin is None or not origin.reset_pending or chat.archived or _has_open_turn(chat):
            return None
        why = origin.reset_pending
        texts = queued_inputs_take(conversation=chat)
        SessionOrigin.objects.filter(pk=chat.pk).update(ended_because=why, reset_pending="")
        conversation_archive(conversation=chat)
        if not texts:
            return None  # the next message opens the next generation
        fields = {name: getattr(origin, name) for name in SessionOrigin.ORIGIN_FIELDS}
        assert chat.session_key, "a chat with a session origin has a session key"
        fresh = session_start(
            owner=chat.owner,
            agent=chat.agent,
            session_key=chat.session_key,
            title=chat.title,
            origin_fields=fields,
            origin=chat.origin,
            taint=Taint.PERSON if chat.taint == Taint.PERSON else Taint.NONE,
            taint_cause=Cause.previous(chat),
            mode=chat.mode,
            previous=chat,
            started_because=why,
        )
        if stopped:  # a stopped reply keeps queued words for the next message, as ever
            for text in texts:
                QueuedInput.objects.create(conversation=fresh, text=text)
        else:
            message_send(conversation=fresh, text="\n\n".join(texts))
    return fresh


# ---------------------------------------------------------------------------
# The sweep: sessions due to start fresh, without waiting for their next message


@dataclass
class ResetSweepReport:
    looked_at: int = 0
    archived: int = 0
    pending: int = 0


def sessions_reset_sweep(*, now: dt.datetime | None = None, batch: int = 500) -> ResetSweepReport:
    """Archive every live session whose policy says it is due; a working one waits.

    The next message to a swept session opens its next generation. Works in
    batches of ``batch`` rows, so memory stays flat however many sessions there are.
    """
    now = now or timezone.now()
    zone = local_zone()
    policies = Policies.load()
    cutoffs = [c for p in policies.all() if (c := due_before(p, now=now, zone=zone))]
    report = ResetSweepReport()
    if not cutoffs:
        return report
    latest = max(cutoffs)
    last_pk = 0
    while True:
        rows = list(
            Conversation.objects.filter(
                pk__gt=last_pk,
                session_key__isnull=False,
                archived=False,
                gateway__isnull=False,
                last_interaction_at__lt=latest,
            )
            .exclude(gateway__chat_type=ChatType.CRON)
            .order_by("pk")
            .values_list("pk", "last_interaction_at", "gateway__chat_type", "gateway__channel")[
                :batch
            ]
        )
        if not rows:
            break
        last_pk = rows[-1][0]
        for pk, last, chat_type, channel in rows:
            report.looked_at += 1
            policy = policies.for_session(chat_type=chat_type, channel=channel)
            why = reset_reason(policy, last_interaction_at=last, now=now, zone=zone)
            if not why:
                continue
            ended = session_end(conversation=Conversation(pk=pk), reason=why)
            if ended == "archived":
                report.archived += 1
            elif ended == "pending":
                report.pending += 1
    # A reset that waited for a reply whose end hook never ran (a crash): do it now.
    for pk in SessionOrigin.objects.exclude(reset_pending="").values_list("pk", flat=True):
        session_reset_after_reply(conversation_id=pk)
    return report
