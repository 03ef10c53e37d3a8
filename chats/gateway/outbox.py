"""Replies on their way back to chat apps: queued, delivered per channel, retried with backoff.

A gateway chat's reply is enqueued when its turn ends (the turn-end hook),
once per turn. The runner's sweep delivers what is due in a thread of its
own, so a slow chat app never holds up claiming replies. A row is claimed
with a conditional update, so two runners never send it twice; a part of a
long message that went out is remembered, so a retry sends only the rest.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Protocol

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from chats.gateway.models import (
    ChannelAccount,
    Delivery,
    OutboxMessage,
    OutboxState,
    SentPart,
    SessionOrigin,
)
from chats.models import Conversation, EntryKind, EntryRole, Turn, TurnState

log = logging.getLogger(__name__)

CLAIM_SECONDS = 120


def max_attempts() -> int:
    return settings.CONCH_OUTBOX_MAX_ATTEMPTS


def backoff_base() -> float:
    return settings.CONCH_OUTBOX_BACKOFF_SECONDS


def backoff(attempts: int) -> dt.timedelta:
    """5 s, 10 s, 20 s… after the 1st, 2nd, 3rd failure; at most an hour."""
    return dt.timedelta(seconds=min(backoff_base() * 2 ** max(attempts - 1, 0), 3600.0))


def reply_target(
    *,
    chat_id: int | str,
    message_thread_id: int | str | None = None,
    reply_to_message_id: int | str | None = None,
) -> dict:
    """Where a reply goes on a chat app: the one shape every door writes and every sender reads.

    ``chat_id`` is the chat; ``message_thread_id`` the thread or forum topic in it;
    ``reply_to_message_id`` the message the reply answers (groups tie the two).
    """
    target: dict = {"chat_id": chat_id}
    if message_thread_id not in (None, ""):
        target["message_thread_id"] = message_thread_id
    if reply_to_message_id not in (None, ""):
        target["reply_to_message_id"] = reply_to_message_id
    return target


def split_text(text: str, limit: int) -> list[str]:
    """Cut ``text`` into parts of at most ``limit`` characters, at line ends where possible."""
    parts = []
    rest = text
    while len(rest) > limit:
        cut = rest.rfind("\n", 0, limit)
        if cut <= 0:
            cut = limit
        parts.append(rest[:cut])
        rest = rest[cut:].lstrip("\n")
    if rest:
        parts.append(rest)
    return parts or [""]


class DeliveryError(Exception):
    """A send that didn't go out. ``permanent``: retrying can't help (bad chat, bad token)."""

    def __init__(
        self, message: str, *, permanent: bool = False, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.retry_after = retry_after


class Sender(Protocol):
    channel: str

    def send(self, message: OutboxMessage, account: ChannelAccount | None) -> None:
        """Send ``message`` (from ``message.parts_sent`` on); raise DeliveryError if it fails."""


_senders: dict[str, Sender] = {}


def register_sender(sender: Sender) -> None:
    _senders[sender.channel] = sender


def sender_for(channel: str) -> Sender | None:
    return _senders.get(channel)


def sender_channels() -> list[str]:
    """The chat apps Conch can send to, by channel name."""
    return sorted(_senders)


def outbox_enqueue(
    *,
    conversation: Conversation | None,
    channel: str,
    account_id: str,
    target: dict,
    text: str,
    turn: Turn | None = None,
) -> OutboxMessage | None:
    """Queue words for a chat app. Nothing for a channel with no sender; once per turn."""
    text = (text or "").strip()
    if not text or sender_for(channel) is None or not target:
        return None
    try:
        with transaction.atomic():
            return OutboxMessage.objects.create(
                conversation=conversation,
                turn=turn,
                channel=channel,
                account_id=account_id,
                target=target,
                text=text,
            )
    except IntegrityError:  # this turn's reply is already queued
        return None


def outbox_enqueue_reply(*, turn: Turn, origin: SessionOrigin) -> OutboxMessage | None:
    """The turn's final assistant words, to where the latest message came from."""
    if turn.state not in (TurnState.COMPLETED, TurnState.NEEDS_YOU):
        return None
    last = (
        turn.entries.filter(role=EntryRole.ASSISTANT, kind=EntryKind.MESSAGE)
        .order_by("-seq")
        .first()
    )
    if last is None:
        return None
    return outbox_enqueue(
        conversation=turn.conversation,
        channel=origin.channel,
        account_id=origin.account_id,
        target=origin.reply_to,
        text=last.text,
        turn=turn,
    )


@dataclass
class DeliveryReport:
    sent: list[int] = field(default_factory=list)
    retrying: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)


def _claim(now: dt.datetime, limit: int) -> list[int]:
    due = Q(state=OutboxState.PENDING, next_attempt_at__lte=now) | Q(
        state=OutboxState.SENDING, claimed_until__lt=now
    )
    ids = list(
        OutboxMessage.objects.filter(due)
        .order_by("next_attempt_at", "pk")
        .values_list("pk", flat=True)[:limit]
    )
    claimed = []
    until = now + dt.timedelta(seconds=CLAIM_SECONDS)
    for pk in ids:
        got = OutboxMessage.objects.filter(due, pk=pk).update(
            state=OutboxState.SENDING, claimed_until=until
        )
        if got:
            claimed.append(pk)
    return claimed


def outbox_deliver(*, now: dt.datetime | None = None, limit: int = 50) -> DeliveryReport:
    """Send what is due. No transaction is held while a sender talks to its app."""
    now = now or timezone.now()
    report = DeliveryReport()
    for pk in _claim(now, limit):
        message = OutboxMessage.objects.get(pk=pk)
        sender = sender_for(message.channel)
        account = ChannelAccount.objects.filter(
            channel=message.channel, account_id=message.account_id
        ).first()
        try:
            if sender is None:
                raise DeliveryError(
                    f"No sender for the channel {message.channel!r}.", permanent=True
                )
            sender.send(message, account)
        except DeliveryError as exc:
            attempts = message.attempts + 1
            failed = exc.permanent or attempts >= max_attempts()
            wait = dt.timedelta(seconds=exc.retry_after) if exc.retry_after else backoff(attempts)
            OutboxMessage.objects.filter(pk=pk).update(
                state=OutboxState.FAILED if failed else OutboxState.PENDING,
                attempts=attempts,
                last_error=str(exc)[:2000],
                next_attempt_at=now + wait,
                claimed_until=None,
            )
            (report.failed if failed else report.retrying).append(pk)
            log.warning("outbox %s to %s: %s", pk, message.channel, exc)
        except Exception as exc:  # a sender's bug: retried like any failure, never lost
            log.exception("outbox sender for %s failed", message.channel)
            attempts = message.attempts + 1
            failed = attempts >= max_attempts()
            OutboxMessage.objects.filter(pk=pk).update(
                state=OutboxState.FAILED if failed else OutboxState.PENDING,
                attempts=attempts,
                last_error=f"{exc.__class__.__name__}: {exc}"[:2000],
                next_attempt_at=now + backoff(attempts),
                claimed_until=None,
            )
            (report.failed if failed else report.retrying).append(pk)
        else:
            OutboxMessage.objects.filter(pk=pk).update(
                state=OutboxState.SENT,
                attempts=message.attempts + 1,
                sent_at=timezone.now(),
                claimed_until=None,
                last_error="",
            )
            report.sent.append(pk)
    return report


def outbox_retry_now(*, message: OutboxMessage) -> None:
    """The admin's "retry now": a failed or waiting message goes out on the next sweep."""
    OutboxMessage.objects.filter(
        pk=message.pk, state__in=[OutboxState.FAILED, OutboxState.PENDING]
    ).update(state=OutboxState.PENDING, next_attempt_at=timezone.now(), claimed_until=None)


def outbox_part_sent(*, message: OutboxMessage, platform_message_id: str = "") -> None:
    """Remember that one more part of a long message went out, and the app's id for it."""
    message.parts_sent += 1
    fields: dict = {"parts_sent": message.parts_sent}
    if platform_message_id:
        message.sent_ids = [*message.sent_ids, platform_message_id]
        fields.update(sent_ids=message.sent_ids, delivery=Delivery.SENT)
        SentPart.objects.get_or_create(
            channel=message.channel,
            account_id=message.account_id,
            platform_message_id=platform_message_id,
            defaults={"message": message, "delivery": Delivery.SENT},
        )
    OutboxMessage.objects.filter(pk=message.pk).update(**fields)


# How far along a part is; a reply is as far along as its least advanced part.
DELIVERY_ORDER: dict[str, int] = {Delivery.SENT: 1, Delivery.DELIVERED: 2, Delivery.READ: 3}


def outbox_delivery_report(
    *, channel: str, account_id: str, platform_message_id: str, status: str, error: str = ""
) -> OutboxMessage | None:
    """The app's later word on a part it took (delivered, read, failed): kept on the
    part and on its reply. Statuses come out of order, so one never moves back (a
    "delivered" after a "read" changes nothing), and a failure is kept whatever follows.
    Returns the reply, or None for an id that isn't one of ours."""
    with transaction.atomic():
        part = (
            SentPart.objects.select_for_update()
            .filter(channel=channel, account_id=account_id, platform_message_id=platform_message_id)
            .first()
        )
        if part is None:
            return None
        if part.delivery != Delivery.FAILED and (
            status == Delivery.FAILED
            or DELIVERY_ORDER.get(status, 0) > DELIVERY_ORDER.get(part.delivery, 0)
        ):
            SentPart.objects.filter(pk=part.pk).update(delivery=status, updated_at=timezone.now())
        parts = list(SentPart.objects.filter(message_id=part.message_id))
        message = OutboxMessage.objects.select_for_update().get(pk=part.message_id)
        states = {p.delivery for p in parts}
        delivery: str
        if Delivery.FAILED in states:
            delivery = Delivery.FAILED
        else:
            delivery = min(states, key=lambda s: DELIVERY_ORDER.get(s, 0))
        fields: dict = {"delivery": delivery}
        if status == Delivery.FAILED and error and not message.delivery_error:
            fields["delivery_error"] = error[:2000]
        OutboxMessage.objects.filter(pk=message.pk).update(**fields)
        message.refresh_from_db()
    return message
