"""How fast the gateway takes messages in: per sender, per bot account, per install.

Before this, 300 DMs from 300 Telegram ids in 20 s made 300 chats and 300 model
requests. Now a message from anyone but the owner is refused when, in the last
``CONCH_INBOUND_WINDOW_SECONDS``, the gateway already took ``CONCH_INBOUND_PER_SENDER``
from its sender, ``CONCH_INBOUND_PER_ACCOUNT`` on its bot account, or
``CONCH_INBOUND_PER_INSTALL`` in all. Such a message:

- is kept in the admin as refused (Inbound records), with which bound it met;
- tells its sender once, in words, to wait (once a window; and at most
  ``per_account`` such notes a window on one account, so a flood of new ids is
  not answered with a flood of notes);
- is answered 200 on Telegram's door (any other answer makes Telegram resend it)
  and 429 with ``Retry-After`` on the generic door;
- shows the owner a notice in the sidebar (:func:`inbound_limited_lately`).

Nothing the owner sends (an :class:`~chats.gateway.models.OwnerIdentity`) and no
routine is ever limited.

The limiter is a few lines on the database that is already there, not a library:
every message taken already writes its receipt (``InboundRecord``, with when), so
counting receipts in the window is the rate. That count is the same in every server
process, on SQLite and on PostgreSQL, survives a restart, and is what the admin
shows. A limiter library (``limits``, ``django-ratelimit``) keeps its counts in a
cache, which several processes share only through Redis, and the embedded default
runs none. One count query per message, on the ``received_at`` index; the checks
for the owner, a repeat and the note run only past a bound. Two messages arriving at
the same moment may both pass at the bound: it is a rate, not an exact quota.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from chats.gateway.inbound import Inbound
from chats.gateway.models import ChatType, InboundRecord
from chats.gateway.outbox import outbox_enqueue
from chats.gateway.selectors import is_owner_peer
from chats.hooks import OwnerNotice
from chats.limits import duration_words
from chats.runtime.chats import ConchError

__all__ = [
    "TAKEN",
    "InboundLimited",
    "InboundRates",
    "inbound_limited_lately",
    "inbound_limit",
    "inbound_rates",
]

# A receipt's outcomes for a message the gateway took (the rest are refused or ignored).
TAKEN = ("started", "queued", "reset", "reset_pending")
SENDER, ACCOUNT, INSTALL = "sender", "account", "install"
SCOPE_WORDS = {
    SENDER: "from one sender",
    ACCOUNT: "on one bot account",
    INSTALL: "in all",
}
TOLD_SENDER = (
    "You're sending messages faster than I can take them in. Please wait {window}, then "
    "send again: what you send until then is not read."
)
TOLD_BUSY = (
    "I'm getting more messages than I can take in right now. Please wait {window}, then "
    "send yours again: what you send until then is not read."
)
REASON = "Too many messages: {count} {scope} in the last {window} (the bound is {bound})."


@dataclass(frozen=True)
class InboundRates:
    per_sender: int
    per_account: int
    per_install: int
    window: dt.timedelta

    def bound(self, scope: str) -> int:
        return {SENDER: self.per_sender, ACCOUNT: self.per_account, INSTALL: self.per_install}[
            scope
        ]


def inbound_rates() -> InboundRates:
    return InboundRates(
        per_sender=settings.CONCH_INBOUND_PER_SENDER,
        per_account=settings.CONCH_INBOUND_PER_ACCOUNT,
        per_install=settings.CONCH_INBOUND_PER_INSTALL,
        window=dt.timedelta(seconds=settings.CONCH_INBOUND_WINDOW_SECONDS),
    )


class InboundLimited(ConchError):
    """A message refused for coming too fast; ``str()`` is what its sender reads."""

    def __init__(self, words: str, *, reason: str, retry_after: int, told: bool) -> None:
        super().__init__(words)
        self.reason = reason
        self.retry_after = retry_after
        self.told = told  # its sender was told to wait, by this refusal


def _account(inbound: Inbound) -> Q:
    return Q(channel=inbound.channel, account_id=inbound.account_id)


def _sender(inbound: Inbound) -> Q:
    return _account(inbound) & Q(sender=inbound.peer)


def _over(inbound: Inbound, rates: InboundRates, since: dt.datetime) -> tuple[str, int] | None:
    """The first bound this message would pass, and the count that meets it; None if none."""
    counts = InboundRecord.objects.filter(received_at__gte=since, outcome__in=TAKEN).aggregate(
        install=Count("pk"),
        account=Count("pk", filter=_account(inbound)),
        sender=Count("pk", filter=_sender(inbound)),
    )
    for scope in (SENDER, ACCOUNT, INSTALL):
        if counts[scope] >= rates.bound(scope):
            return scope, counts[scope]
    return None


def inbound_limit(
    *, owner, inbound: Inbound, reply_to: dict, now: dt.datetime
) -> InboundLimited | None:
    """Whether this message is past a bound: the refusal to keep and raise (its sender told
    once already), or None. A routine's message, the owner's and a repeat of one taken
    already are never refused."""
    if inbound.chat_type == ChatType.CRON:
        return None
    rates = inbound_rates()
    since = now - rates.window
    over = _over(inbound, rates, since)
    if over is None:
        return None
    if is_owner_peer(
        owner=owner, channel=inbound.channel, account_id=inbound.account_id, peer=inbound.peer
    ) or (
        InboundRecord.objects.filter(
            channel=inbound.channel,
            account_id=inbound.account_id,
            message_id=inbound.message_id,
            limited=False,
        ).exists()
    ):
        # The owner's, or a repeat of one taken (or refused for another reason): it goes
        # on, and is seen as the duplicate it is. One refused for coming too fast is not.
        return None
    scope, count = over
    window = duration_words(rates.window)
    reason = REASON.format(
        count=count, scope=SCOPE_WORDS[scope], window=window, bound=rates.bound(scope)
    )
    words = (TOLD_SENDER if scope == SENDER else TOLD_BUSY).format(window=window)
    told = _tell_once(inbound, reply_to=reply_to, words=words, rates=rates, since=since)
    return InboundLimited(
        words, reason=reason, retry_after=int(rates.window.total_seconds()), told=told
    )


def _tell_once(
    inbound: Inbound, *, reply_to: dict, words: str, rates: InboundRates, since: dt.datetime
) -> bool:
    """Tell the sender to wait, if they weren't told in this window and the account hasn't
    sent ``per_account`` such notes in it; whether a note was queued."""
    told = InboundRecord.objects.filter(received_at__gte=since, told=True).aggregate(
        sender=Count("pk", filter=_sender(inbound)),
        account=Count("pk", filter=_account(inbound)),
    )
    if told["sender"] or told["account"] >= rates.per_account:
        return False
    sent = outbox_enqueue(
        conversation=None,
        channel=inbound.channel,
        account_id=inbound.account_id,
        target=reply_to,
        text=words,
    )
    return sent is not None


def _limited(since: dt.datetime) -> QuerySet[InboundRecord]:
    return InboundRecord.objects.filter(received_at__gte=since, limited=True)


NOTICE_WINDOW = dt.timedelta(hours=1)
NOTICE = (
    "Chat apps: {count} {messages} from {senders} {people} turned away in the last {window} "
    "for coming too fast."
)


def inbound_limited_lately(*, now: dt.datetime | None = None) -> OwnerNotice | None:
    """The owner's notice: how many messages were refused for coming too fast in the last
    hour, and from how many senders, with a link to them in the admin; None if none."""
    counts = _limited((now or timezone.now()) - NOTICE_WINDOW).aggregate(
        count=Count("pk"), senders=Count("sender", distinct=True)
    )
    if not counts["count"]:
        return None
    text = NOTICE.format(
        count=counts["count"],
        messages="message was" if counts["count"] == 1 else "messages were",
        senders=counts["senders"],
        people="sender" if counts["senders"] == 1 else "senders",
        window=duration_words(NOTICE_WINDOW),
    )
    link = reverse("admin:gateway_inboundrecord_changelist") + "?limited__exact=1"
    return OwnerNotice(text=text, link=link, link_text="See them in the admin.")
