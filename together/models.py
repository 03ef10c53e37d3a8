"""What ADR 0134 keeps: waits, message cards and chains.

Stronger than the ADR's in-memory choice, messages and chains are stored, so a
restart loses none; the chain limits are enforced by conditional updates on
these rows, so they hold however many processes send at once.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from chats.limits import LIMITS
from chats.models import Conversation, Taint, Task, new_public_id


def new_message_id() -> str:
    return new_public_id("m")


class Chain(models.Model):
    """The bounded run of replies that messages and waits lead to. The person's message starts a new one."""

    id = models.CharField(primary_key=True, max_length=40)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    messages = models.PositiveIntegerField(default=0)
    replies_started = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"chain {self.id}: {self.messages} messages, {self.replies_started} replies started"


class ChainPair(models.Model):
    """Messages from one chat to another within a chain."""

    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="pairs")
    sender_pk = models.BigIntegerField()
    receiver_pk = models.BigIntegerField()
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["chain", "sender_pk", "receiver_pk"], name="one_count_per_pair"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.sender_pk}→{self.receiver_pk} in {self.chain_id}: {self.count}"


class MessageState(models.TextChoices):
    WAITING = "waiting", "waiting"
    READ = "read", "read"
    HELD = "held", "held for you"
    REFUSED = "refused", "turned away"
    DISMISSED = "dismissed", "dismissed"
    NOT_DELIVERED = "not_delivered", "not delivered"


UNREAD_STATES = (MessageState.WAITING, MessageState.HELD)


class ChatMessage(models.Model):
    """One message between two chats: the card both sides see (``ChatMessageNote``)."""

    message_id = models.CharField(
        max_length=32, unique=True, default=new_message_id, editable=False
    )
    chain = models.ForeignKey(Chain, on_delete=models.PROTECT, related_name="chat_messages")
    sender = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="messages_sent"
    )
    receiver = models.ForeignKey(
        Conversation,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="messages_received",
    )
    # Kept so a card still reads right once a chat is renamed or deleted.
    sender_title = models.CharField(max_length=LIMITS.title_chars)
    sender_public_id = models.CharField(max_length=32)
    receiver_title = models.CharField(max_length=LIMITS.title_chars)
    receiver_public_id = models.CharField(max_length=32)
    text = models.TextField(help_text="The words, with secrets taken out as they were sent.")
    words_key = models.CharField(
        max_length=64, db_index=True, help_text="For the same words to the same chat."
    )
    start_reply = models.BooleanField(default=False)
    sender_taint = models.CharField(max_length=16, default=Taint.NONE)
    state = models.CharField(
        max_length=16, choices=MessageState.choices, default=MessageState.WAITING
    )
    reason = models.TextField(
        blank=True, help_text="Why it wasn't delivered, turned away or dismissed."
    )
    created_at = models.DateTimeField(default=timezone.now)
    passed_on_at = models.DateTimeField(
        null=True, blank=True, help_text="When the person pressed Pass it on."
    )
    read_at = models.DateTimeField(null=True, blank=True)
    read_in_turn = models.ForeignKey(
        "chats.Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["receiver", "state"], name="message_receiver_state"),
        ]

    def __str__(self) -> str:
        return f"{self.message_id}: {self.sender_title} → {self.receiver_title} ({self.state})"

    @property
    def is_unread(self) -> bool:
        return self.state in UNREAD_STATES


class WaitKind(models.TextChoices):
    CHAT = "chat", "another chat"
    TASK = "task", "a task"


class WaitState(models.TextChoices):
    WAITING = "waiting", "waiting"
    WOKEN = "woken", "woken"
    CANCELLED = "cancelled", "cancelled"


class Wait(models.Model):
    """``wait_for`` a chat or a task: a stored WaitSpec, so it survives a restart."""

    waiter = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="waits")
    kind = models.CharField(max_length=8, choices=WaitKind.choices)
    target_chat = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="waited_on_by"
    )
    target_task = models.ForeignKey(
        Task, null=True, blank=True, on_delete=models.SET_NULL, related_name="waits"
    )
    target_public_id = models.CharField(
        max_length=32, help_text="The chat or task waited for, by id."
    )
    target_title = models.CharField(max_length=LIMITS.title_chars)
    chain_id = models.CharField(max_length=40, blank=True)
    waiter_taint_at_start = models.CharField(max_length=16, default=Taint.NONE)
    state = models.CharField(max_length=16, choices=WaitState.choices, default=WaitState.WAITING)
    outcome = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    woken_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["state", "kind"], name="wait_state_kind"),
            # Every status and task event asks whether someone waits for its chat or task
            # (waits.waited_for): by this index, not a scan of the waits.
            models.Index(fields=["target_public_id", "state"], name="wait_target"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["waiter", "kind", "target_public_id"],
                condition=Q(state=WaitState.WAITING),
                name="one_wait_per_target",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.waiter} waits for {self.kind} {self.target_public_id} ({self.state})"
