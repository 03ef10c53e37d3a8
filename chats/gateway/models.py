"""The gateway's records (app label ``gateway``): bindings, its settings, tokens, channel
accounts, who you are on each channel, identity links, reset policies, each session's
origin, inbound receipts, the outbox, and routines with their runs.

A gateway *session* is a :class:`~chats.models.Conversation` with a
``session_key``; :class:`SessionOrigin` holds where it came from.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from chats.gateway.ids import ANY_ACCOUNT, ANY_PEER, CHANNEL, CRON, DIRECT, GROUP, peer_id
from chats.gateway.ids import normalize_account_id as _normalize_account_id
from chats.gateway.ladder import (
    CHANNEL_PATTERN,
    ERR_CHANNEL,
    ERR_KIND,
    ERR_KIND_NEEDED,
    ERR_KIND_WITHOUT_PEER,
    ERR_ROLES_NEED_GUILD,
    ERR_TIE,
    ERR_WILDCARD_PARENT,
    Tier,
    binding_conflicts,
    compile_binding,
)
from chats.gateway.schedule import (
    ERR_SCHEDULE_EMPTY,
    ERR_ZONE_EMPTY,
    ScheduleError,
    next_time,
    schedule_check,
)
from chats.models import Agent, Conversation, Mode, Turn, TurnState, new_public_id
from chats.secretbox import EncryptedTextField, secret_masked

ERR_ROLES_LIST = "Roles are a list of role ids."

__all__ = [
    "Binding",
    "ChannelAccount",
    "ChatType",
    "DmScope",
    "EditedMessages",
    "GatewayConfig",
    "GatewayToken",
    "IdentityLink",
    "InboundRecord",
    "MaintenanceMode",
    "OutboxMessage",
    "OutboxState",
    "OwnerIdentity",
    "PeerKind",
    "ResetMode",
    "ResetPolicy",
    "Routine",
    "RoutineDelivery",
    "RoutineMissed",
    "RoutineRun",
    "RunState",
    "RunTrigger",
    "Session",
    "SessionOrigin",
]


class PeerKind(models.TextChoices):
    """What a binding's peer is (OpenClaw's peer kinds, and Conch's cron jobs).

    ``group`` and ``channel`` match each other; ``direct`` never meets them, so a
    group binding never catches a DM from a user with the same id.
    """

    DIRECT = DIRECT, "direct: a person's DM"
    GROUP = GROUP, "group"
    CHANNEL = CHANNEL, "channel (or a thread in one)"
    CRON = CRON, "cron: a scheduled job"


class Binding(models.Model):
    """A rule mapping an inbound origin to an agent. Every field it sets must match."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="bindings")
    channel = models.CharField(max_length=32)
    account_id = models.CharField(
        max_length=128,
        blank=True,
        help_text='Empty: the channel\'s default account. "*" for any account.',
    )
    peer = models.CharField(max_length=128, blank=True, help_text='"*" for any peer of its kind.')
    peer_kind = models.CharField(
        max_length=8,
        choices=PeerKind.choices,
        blank=True,
        help_text="Needed with a peer. Empty on a peer saved before kinds: any kind, as then.",
    )
    parent_peer = models.CharField(max_length=128, blank=True)
    guild_id = models.CharField(max_length=128, blank=True)
    roles = models.JSONField(default=list, blank=True)
    team_id = models.CharField(max_length=128, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    routing_version = models.PositiveBigIntegerField(
        default=0,
        editable=False,
        help_text="The routing version this binding was last saved at: a process whose index "
        "is older reads only the bindings saved since.",
    )

    class Meta:
        indexes = [
            # A process behind reads the bindings changed since its index's version.
            models.Index(fields=["routing_version"], name="binding_by_routing_version"),
            # The routing index reads one channel's bindings at a time, in pk order.
            models.Index(fields=["channel"], name="binding_by_channel"),
            # A cold channel's message looks up its keys tier by tier: each lookup is a
            # prefix of this (chats.gateway.routing._tier_arms).
            models.Index(
                fields=["channel", "peer", "parent_peer", "guild_id", "team_id", "account_id"],
                name="binding_by_tier_keys",
            ),
        ]

    def __str__(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_fields().items()]
        return f"{' '.join(parts)} → {self.agent.slug}"

    def match_fields(self) -> dict[str, object]:
        fields: dict[str, object] = {"channel": self.channel}
        for name in ("account_id", "peer", "peer_kind", "parent_peer", "guild_id", "team_id"):
            value = getattr(self, name)
            if value:
                fields[name] = value
        if self.roles:
            fields["roles"] = sorted(self.roles)
        return fields

    def clean(self) -> None:
        """Refuse a binding that is malformed or would tie with a saved one: a tier never chooses.

        The gateway's ``ready()`` runs this before every save, not only in forms.
        """
        channel = (self.channel or "").strip().lower()
        if not CHANNEL_PATTERN.match(channel):
            raise ValidationError({"channel": ERR_CHANNEL})
        self.channel = channel
        account = (self.account_id or "").strip()
        if account and account != ANY_ACCOUNT:
            account = _normalize_account_id(account)
        self.account_id = account
        # A person's id lower-cased, a group's or thread's kept as given (ids.peer_id).
        self.peer = peer_id(self.peer_kind, self.peer)
        self.parent_peer = (self.parent_peer or "").strip()
        if self.peer_kind and self.peer_kind not in PeerKind.values:
            raise ValidationError({"peer_kind": ERR_KIND})
        if self.peer and not self.peer_kind and (self._state.adding or self._peer_changed()):
            raise ValidationError({"peer_kind": ERR_KIND_NEEDED})
        if self.peer_kind and not self.peer:
            raise ValidationError({"peer_kind": ERR_KIND_WITHOUT_PEER})
        if self.peer == ANY_PEER and (self.parent_peer or "").strip():
            raise ValidationError({"parent_peer": ERR_WILDCARD_PARENT})
        roles = self.roles or []
        if not isinstance(roles, list) or not all(isinstance(r, str | int) for r in roles):
            raise ValidationError({"roles": ERR_ROLES_LIST})
        if roles and not (self.guild_id or "").strip():
            raise ValidationError({"roles": ERR_ROLES_NEED_GUILD})
        if self.agent_id is None:
            return  # the form reports the missing agent itself
        candidate = self._compiled(roles=roles)
        keys = {key for _, key, _ in candidate.slots() if key}
        near = Q(peer="", parent_peer="", guild_id="", team_id="")  # account and channel rules
        if candidate.tier == Tier.WILDCARD_PEER:
            near |= Q(peer=ANY_PEER)
        if keys:
            near |= (
                Q(peer__in=keys)
                | Q(parent_peer__in=keys)
                | Q(guild_id__in=keys)
                | Q(team_id__in=keys)
            )
        others = Binding.objects.filter(near, channel=channel).select_related("agent")
        if self.pk:
            others = others.exclude(pk=self.pk)
        clashes = binding_conflicts(candidate, [other._compiled() for other in others])
        if clashes:
            other, tier = clashes[0]
            raise ValidationError(
                ERR_TIE.format(this=candidate.label, other=other.label, tier=tier), code="tie"
            )

    def _peer_changed(self) -> bool:
        """Whether a saved row's peer is being changed (a row from before kinds may keep its own)."""
        saved = Binding.objects.filter(pk=self.pk).values_list("peer", flat=True).first()
        return saved != self.peer

    def _compiled(self, *, roles: list | None = None):
        return compile_binding(
            id=self.pk,
            agent_id=self.agent_id,
            agent_slug=self.agent.slug,
            channel=self.channel,
            account_id=self.account_id,
            peer=self.peer,
            peer_kind=self.peer_kind,
            parent_peer=self.parent_peer,
            guild_id=self.guild_id,
            roles=self.roles if roles is None else roles,
            team_id=self.team_id,
        )


class DmScope(models.TextChoices):
    """How direct messages are keyed (seed ch. 2). Groups never look at it."""

    SHARED = "shared", "shared: every DM in one session (leaks between people)"
    PER_PEER = "per-peer", "per-peer: one session per person"
    PER_CHANNEL_PEER = "per-channel-peer", "per-channel-peer: one per person per app"
    PER_ACCOUNT_CHANNEL_PEER = (
        "per-account-channel-peer",
        "per-account-channel-peer: one per person per app per bot account",
    )


class ChatType(models.TextChoices):
    DM = "dm", "direct message"
    GROUP = "group", "group"
    THREAD = "thread", "thread"
    CRON = "cron", "cron run"


class MaintenanceMode(models.TextChoices):
    ENFORCE = "enforce", "enforce: prune and compact"
    WARN = "warn", "warn: only report what it would do"


class BindingDeletion(models.Model):
    """A binding deleted at a routing version: a process whose index is older drops just it.

    Kept for :data:`~chats.gateway.routing.DELETIONS_KEPT` versions; an index older than
    the oldest kept is loaded afresh.
    """

    binding_id = models.BigIntegerField()
    routing_version = models.PositiveBigIntegerField(db_index=True)

    def __str__(self) -> str:
        return f"binding {self.binding_id} deleted at routing version {self.routing_version}"


class GatewayConfig(models.Model):
    """The gateway's settings: one row (pk 1). Changing it rebuilds the routing index."""

    dm_scope = models.CharField(
        max_length=32, choices=DmScope.choices, default=DmScope.PER_CHANNEL_PEER
    )
    maintenance_mode = models.CharField(
        max_length=8, choices=MaintenanceMode.choices, default=MaintenanceMode.ENFORCE
    )
    prune_after_days = models.PositiveIntegerField(
        default=30,
        validators=[MinValueValidator(1)],
        help_text="Sessions whose last interaction is older are deleted (never a working or pinned chat).",
    )
    max_entries = models.PositiveIntegerField(
        default=500,
        validators=[MinValueValidator(2)],
        help_text="A session's transcript is compacted to at most this many entries.",
    )
    routing_version = models.PositiveBigIntegerField(
        default=0,
        editable=False,
        help_text="Bumped whenever bindings, agents, links, reset policies or these settings change.",
    )
    routing_reset_version = models.PositiveBigIntegerField(
        default=0,
        editable=False,
        help_text="The last version whose change was not a binding's (an agent, a link, a reset "
        "policy, these settings): an index older than this one is loaded afresh.",
    )

    class Meta:
        verbose_name = "gateway settings"
        verbose_name_plural = "gateway settings"

    def __str__(self) -> str:
        return f"gateway settings (dmScope {self.dm_scope})"


class GatewayToken(models.Model):
    """The per-install token scripts and bridges send as ``Authorization: Bearer``.

    Only its digest is kept: the token is shown once, when it is made.
    """

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="gateway_tokens",
        help_text="Whose chats the gateway's sessions are.",
    )
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        state = "revoked" if self.revoked_at else "live"
        return f"gateway token for {self.owner} ({state})"


class EditedMessages(models.TextChoices):
    """What a chat app's edit of an earlier message does (Telegram's ``edited_message``)."""

    IGNORE = "ignore", "ignore: the first words were answered"
    NEW = "new", "take it as a new message"


class GroupActivation(models.TextChoices):
    """When a bot in a shared channel answers (OpenClaw's group activation)."""

    MENTION = "mention", "when mentioned, or in a thread it is in"
    ALWAYS = "always", "every message"


class Delivery(models.TextChoices):
    """What a chat app last said about a reply it took (WhatsApp's status callbacks)."""

    SENT = "sent", "sent"
    DELIVERED = "delivered", "delivered"
    READ = "read", "read"
    FAILED = "failed", "failed"


class ChatMigration(models.Model):
    """A chat that moved to a new id on its app (a Telegram group that became a supergroup):
    a message still sent under the old id is routed to the new one."""

    channel = models.CharField(max_length=32)
    account_id = models.CharField(max_length=128)
    old_id = models.CharField(max_length=128)
    new_id = models.CharField(max_length=128)
    moved_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "account_id", "old_id"], name="chat_migration_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.channel}:{self.account_id}: {self.old_id} → {self.new_id}"


class ChannelAccount(models.Model):
    """One bot account on a chat app, e.g. a Telegram bot, and whose chats it feeds."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="channel_accounts"
    )
    channel = models.CharField(max_length=32)
    account_id = models.CharField(max_length=128)
    # Sealed at rest with the secrets key (chats.secretbox): the database alone reveals none.
    secret = EncryptedTextField(blank=True, help_text="The bot's token for sending replies.")
    webhook_secret_digest = models.CharField(max_length=64, blank=True, editable=False)
    bot_username = models.CharField(
        max_length=64,
        blank=True,
        help_text="The bot's own @name, learnt from Telegram's getMe when the account is set up: "
        "a command naming another bot (/new@otherbot) is not ours.",
    )
    edited_messages = models.CharField(
        max_length=8,
        choices=EditedMessages.choices,
        default=EditedMessages.IGNORE,
        help_text="What an edit of a message already answered does.",
    )
    linked_channel_posts = models.BooleanField(
        default=False,
        help_text="Whether a post a linked channel forwards into a group starts a reply.",
    )
    # Sealed like ``secret``: an HMAC key must be readable to check a signature with.
    signing_secret = EncryptedTextField(
        blank=True,
        help_text="Slack's signing secret, or the WhatsApp app's secret: every request "
        "the app sends is checked against it.",
    )
    public_key = models.CharField(
        max_length=64,
        blank=True,
        help_text="Discord: the application's public key (hex), which signs interactions.",
    )
    bot_user_id = models.CharField(
        max_length=64,
        blank=True,
        help_text="The bot's own user id (Slack's U…, Discord's), learnt when the account "
        "is set up: its own messages are never answered, and a mention of it is one.",
    )
    platform_id = models.CharField(
        max_length=64,
        blank=True,
        help_text="WhatsApp: the phone number id replies are sent from. "
        "Discord: the application id.",
    )
    group_activation = models.CharField(
        max_length=8,
        choices=GroupActivation.choices,
        default=GroupActivation.MENTION,
        help_text="Slack channels and Discord servers: when the bot answers there.",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["channel", "account_id"], name="channel_account_unique")
        ]

    def __str__(self) -> str:
        return f"{self.channel}:{self.account_id}"

    @property
    def masked(self) -> str:
        return secret_masked(self.secret)


class OwnerIdentity(models.Model):
    """Who the owner is on a channel: their DMs are their own chats from a chat app."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="channel_identities"
    )
    channel = models.CharField(max_length=32)
    account_id = models.CharField(max_length=128, blank=True, help_text="Empty for any account.")
    peer = models.CharField(max_length=128, help_text="Your id on that channel.")

    class Meta:
        verbose_name_plural = "owner identities"
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "channel", "account_id", "peer"], name="owner_identity_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.owner} is {self.channel}:{self.peer}"


ERR_LINK_TAKEN = (
    "{peer} is linked already, to {name}: ids are compared in any case, so this would be "
    "the same person twice."
)


class IdentityLink(models.Model):
    """One person's peer on one channel, linked to a name shared by their other peers.

    Linked DMs share one session across channels; unlinked peers never merge.
    """

    name = models.SlugField(max_length=64, help_text="The person's one name across channels.")
    channel = models.CharField(max_length=32)
    peer = models.CharField(max_length=128)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["channel", "peer"], name="identity_link_per_peer")
        ]

    def __str__(self) -> str:
        return f"{self.channel}:{self.peer} is {self.name}"

    def clean(self) -> None:
        """One link a person: a peer is compared in any case (ids.peer_id), so another link
        for the same peer written in another case would make their name a coin toss."""
        self.channel = (self.channel or "").strip().lower()
        self.peer = (self.peer or "").strip()
        same = IdentityLink.objects.filter(
            channel__iexact=self.channel, peer__iexact=self.peer
        ).exclude(pk=self.pk)
        other = same.first()
        if other is not None:
            raise ValidationError({"peer": ERR_LINK_TAKEN.format(peer=other.peer, name=other.name)})


class ResetMode(models.TextChoices):
    DAILY = "daily", "daily at a set hour (and after idle minutes, if set)"
    IDLE = "idle", "after idle minutes"
    NONE = "none", "never"


class ResetPolicy(models.Model):
    """When sessions start fresh, per chat type and per channel.

    The most specific policy applies: channel and type, then channel, then
    type, then the catch-all; with none at all, daily at 04:00 local time.
    """

    chat_type = models.CharField(
        max_length=8,
        blank=True,
        choices=[(c, label) for c, label in ChatType.choices if c != ChatType.CRON],
        help_text="Empty for every chat type.",
    )
    channel = models.CharField(max_length=32, blank=True, help_text="Empty for every channel.")
    mode = models.CharField(max_length=8, choices=ResetMode.choices, default=ResetMode.DAILY)
    at_hour = models.PositiveSmallIntegerField(
        default=4,
        validators=[MaxValueValidator(23)],
        help_text="Local hour of the daily reset (CONCH_TIME_ZONE).",
    )
    idle_minutes = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)]
    )

    class Meta:
        verbose_name_plural = "reset policies"
        constraints = [
            models.UniqueConstraint(fields=["chat_type", "channel"], name="reset_policy_scope"),
        ]

    def __str__(self) -> str:
        scope = " ".join(filter(None, [self.channel, self.chat_type])) or "every session"
        return f"{scope}: {self.get_mode_display()}"

    def clean(self) -> None:
        if self.mode == ResetMode.IDLE and not self.idle_minutes:
            raise ValidationError({"idle_minutes": "An idle reset needs its minutes."})


class SessionOrigin(models.Model):
    """Where a gateway session came from, the rule that chose its agent, and its generations."""

    # What a new generation of the session carries over from the one before.
    ORIGIN_FIELDS = (
        "chat_type",
        "channel",
        "account_id",
        "peer",
        "group_id",
        "thread_id",
        "parent_peer",
        "guild_id",
        "team_id",
        "job_id",
        "reply_to",
        "rule",
        "dm_scope",
    )

    conversation = models.OneToOneField(
        Conversation, on_delete=models.CASCADE, primary_key=True, related_name="gateway"
    )
    chat_type = models.CharField(max_length=8, choices=ChatType.choices)
    channel = models.CharField(max_length=32)
    account_id = models.CharField(max_length=128, blank=True)
    peer = models.CharField(max_length=128, blank=True)
    group_id = models.CharField(max_length=128, blank=True)
    group_name = models.CharField(
        max_length=128, blank=True, help_text="The group's name on its app, as the title has it."
    )
    thread_id = models.CharField(max_length=128, blank=True)
    parent_peer = models.CharField(max_length=128, blank=True)
    guild_id = models.CharField(max_length=128, blank=True)
    team_id = models.CharField(max_length=128, blank=True)
    job_id = models.CharField(max_length=128, blank=True)
    reply_to = models.JSONField(
        default=dict, blank=True, help_text="Where replies go: the latest message's chat."
    )
    rule = models.CharField(max_length=255, blank=True, help_text="The routing rule that won.")
    dm_scope = models.CharField(max_length=32, blank=True)
    previous = models.ForeignKey(
        Conversation,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="next_generations",
        help_text="The generation this one started fresh from.",
    )
    started_because = models.TextField(blank=True)
    ended_because = models.TextField(blank=True)
    reset_pending = models.TextField(
        blank=True, help_text="A reset waiting for the running reply to end."
    )

    class Meta:
        indexes = [models.Index(fields=["chat_type", "channel"], name="session_origin_scope")]

    def __str__(self) -> str:
        return f"{self.chat_type} on {self.channel} → {self.conversation_id}"


class InboundRecord(models.Model):
    """One inbound message as received: the idempotency key and the routing decision."""

    channel = models.CharField(max_length=32)
    account_id = models.CharField(max_length=128)
    message_id = models.CharField(max_length=255)
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    session_key = models.CharField(max_length=512)
    agent_slug = models.CharField(max_length=64)
    rule = models.CharField(max_length=255)
    outcome = models.CharField(max_length=32)
    reason = models.TextField(blank=True, help_text="Why it was refused or ignored, if it was.")
    shared_dm = models.BooleanField(default=False)
    received_at = models.DateTimeField(default=timezone.now)
    # How fast the gateway takes messages in (chats/gateway/floods.py).
    sender = models.CharField(max_length=128, blank=True, help_text="Who sent it: its peer id.")
    limited = models.BooleanField(
        default=False, help_text="Refused for coming too fast (the inbound rate limits)."
    )
    told = models.BooleanField(default=False, help_text="Its sender was told, in words, to wait.")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "account_id", "message_id"], name="inbound_once"
            )
        ]
        indexes = [models.Index(fields=["received_at"], name="inbound_received")]

    def __str__(self) -> str:
        return f"{self.channel}:{self.account_id}:{self.message_id} → {self.session_key}"


class OutboxState(models.TextChoices):
    PENDING = "pending", "waiting to be sent"
    SENDING = "sending", "being sent"
    SENT = "sent", "sent"
    FAILED = "failed", "failed for good"


class OutboxMessage(models.Model):
    """A reply on its way back to a chat app, delivered with retries and backoff."""

    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    turn = models.OneToOneField(
        Turn, null=True, blank=True, on_delete=models.SET_NULL, related_name="outbox_message"
    )
    channel = models.CharField(max_length=32)
    account_id = models.CharField(max_length=128)
    target = models.JSONField(default=dict, help_text="The chat on the app, e.g. chat_id.")
    text = models.TextField()
    state = models.CharField(max_length=8, choices=OutboxState.choices, default=OutboxState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    parts_sent = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)
    # The app's own ids for the parts that went out (Slack's ts, WhatsApp's wamid,
    # Discord's message id), and what the app last said about them.
    sent_ids = models.JSONField(default=list, blank=True)
    delivery = models.CharField(max_length=10, choices=Delivery.choices, blank=True)
    delivery_error = models.TextField(blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["state", "next_attempt_at"], name="outbox_due"),
            # Maintenance's prune of replies delivered (or failed) before pruneAfter: each
            # batch seeks the old ones instead of reading every sent reply and sorting them
            # (tests/gateway/test_maintenance_cost.py).
            models.Index(fields=["state", "created_at"], name="outbox_finished"),
        ]

    def __str__(self) -> str:
        return f"to {self.channel}:{self.account_id} ({self.state})"


class SentPart(models.Model):
    """One part of a reply as its app numbered it, so the app's later word on it
    (delivered, read, failed) finds the reply."""

    # Not CASCADE: maintenance deletes a batch of old replies' parts first, then the
    # replies, each one DELETE, with no row read back (tests/gateway/test_maintenance_cost.py).
    message = models.ForeignKey(OutboxMessage, on_delete=models.DO_NOTHING, related_name="parts")
    channel = models.CharField(max_length=32)
    account_id = models.CharField(max_length=128)
    platform_message_id = models.CharField(max_length=255)
    delivery = models.CharField(max_length=10, choices=Delivery.choices, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "account_id", "platform_message_id"], name="sent_part_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.channel}:{self.platform_message_id}"


class Session(Conversation):
    """Gateway sessions in the admin: the chats that have a session key."""

    class Meta:
        proxy = True
        verbose_name = "gateway session"


# ---------------------------------------------------------------------------
# Routines: words run on a schedule, each run a fresh session on the cron lane


ERR_ROUTINE_NO_WORDS = "A routine needs the words it runs."
ERR_ROUTINE_NO_CHAT = "Pick the chat of yours the result goes to."
ERR_ROUTINE_NOT_YOURS = "The result can only go to a chat of yours."
ERR_ROUTINE_NO_PEER = "Say who on the chat app gets the result: the peer's id."


def new_routine_id() -> str:
    return new_public_id("r")


class RoutineDelivery(models.TextChoices):
    """Where a run's result goes, besides its own chat (which always keeps it)."""

    RUN = "run", "only its own run, in the chat list"
    CHAT = "chat", "a chat of yours"
    PEER = "peer", "a chat-app peer, through the outbox"


class RoutineMissed(models.TextChoices):
    """What happens to due times missed while Conch was down."""

    ONCE = "once", "run once, however many times were missed"
    SKIP = "skip", "skip them, and wait for the next time"


class Routine(models.Model):
    """Words a persona runs on a schedule (cron, in a time zone), each run a fresh session.

    ``next_due_at`` is the next time the sweep looks at: empty while paused.
    """

    public_id = models.CharField(max_length=32, unique=True, default=new_routine_id, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="routines"
    )
    name = models.CharField(max_length=120)
    schedule = models.CharField(
        max_length=120,
        help_text="Cron: minute hour day-of-month month day-of-week, e.g. 0 8 * * 1-5.",
        error_messages={"blank": ERR_SCHEDULE_EMPTY},
    )
    time_zone = models.CharField(
        max_length=64,
        default="UTC",
        help_text="e.g. Europe/Berlin.",
        error_messages={"blank": ERR_ZONE_EMPTY},
    )
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="routines")
    folder = models.CharField(
        max_length=1024, blank=True, help_text="Where it works; empty for the persona's own folder."
    )
    mode = models.CharField(max_length=8, choices=Mode.choices, default=Mode.AUTO)
    text = models.TextField(help_text="The words each run starts with.")
    deliver = models.CharField(
        max_length=8, choices=RoutineDelivery.choices, default=RoutineDelivery.RUN
    )
    target_chat = models.ForeignKey(
        Conversation,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="For results to a chat of yours.",
    )
    channel = models.CharField(max_length=32, blank=True, help_text="For results to a chat app.")
    account_id = models.CharField(max_length=128, blank=True)
    peer = models.CharField(max_length=128, blank=True, help_text="The chat on that app.")
    missed = models.CharField(
        max_length=8, choices=RoutineMissed.choices, default=RoutineMissed.ONCE
    )
    paused = models.BooleanField(default=False)
    next_due_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "pk"]
        indexes = [models.Index(fields=["next_due_at"], name="routine_due")]

    def __str__(self) -> str:
        return f"{self.name} ({self.schedule}, {self.time_zone})"

    def save(self, *args, **kwargs) -> None:
        # No bad schedule reaches the table, from a form or not: the sweep could not read it.
        self.schedule_refuse_bad()
        if self.paused:
            self.next_due_at = None
        elif self.next_due_at is None:
            self.next_due_at = next_time(self.schedule, self.time_zone, timezone.now())
        super().save(*args, **kwargs)

    def schedule_refuse_bad(self) -> None:
        """Refuse a bad expression or time zone, with words, naming the field."""
        try:
            self.schedule, _ = schedule_check(self.schedule, self.time_zone)
        except ScheduleError as exc:
            raise ValidationError({exc.field: exc.message}, code="schedule") from None
        self.time_zone = self.time_zone.strip()

    def clean(self) -> None:
        self.schedule_refuse_bad()
        if not (self.text or "").strip():
            raise ValidationError({"text": ERR_ROUTINE_NO_WORDS})
        if self.deliver == RoutineDelivery.CHAT:
            if self.target_chat_id is None:
                raise ValidationError({"target_chat": ERR_ROUTINE_NO_CHAT})
            target = self.target_chat
            if (
                self.owner_id is not None
                and target is not None
                and target.owner_id != self.owner_id
            ):
                raise ValidationError({"target_chat": ERR_ROUTINE_NOT_YOURS})
        if self.deliver == RoutineDelivery.PEER:
            # Whether Conch can send to the channel is the forms' to say (the outbox's
            # senders register at start-up; the records stand below the outbox).
            self.channel = (self.channel or "").strip().lower()
            self.peer = (self.peer or "").strip()
            if not CHANNEL_PATTERN.match(self.channel):
                raise ValidationError({"channel": ERR_CHANNEL})
            if not self.peer:
                raise ValidationError({"peer": ERR_ROUTINE_NO_PEER})

    @property
    def job_id(self) -> str:
        """The routine's id in its runs' session keys: ``cron:<job>:<run>``."""
        return self.public_id


class RunTrigger(models.TextChoices):
    SCHEDULE = "schedule", "on schedule"
    CAUGHT_UP = "caught_up", "once, for times missed while Conch was down"
    RUN_NOW = "run_now", "Run now"


class RunState(models.TextChoices):
    """How a run ended: its reply's ending, or skipped."""

    RUNNING = TurnState.RUNNING.value, "running"
    COMPLETED = TurnState.COMPLETED.value, "completed"
    NEEDS_YOU = TurnState.NEEDS_YOU.value, "needs you"
    STOPPED = TurnState.STOPPED.value, "stopped"
    FAILED = TurnState.FAILED.value, "failed"
    INTERRUPTED = TurnState.INTERRUPTED.value, "interrupted"
    SKIPPED = "skipped", "skipped: missed while Conch was down"


class RoutineRun(models.Model):
    """One due time of a routine, claimed by the one runner that inserted this row.

    The (routine, due time) pair is unique: a second runner's insert fails, and
    that runner leaves the time alone. ``missed`` counts the earlier due times
    this one stands for after downtime.
    """

    routine = models.ForeignKey(Routine, on_delete=models.CASCADE, related_name="runs")
    due_at = models.DateTimeField()
    trigger = models.CharField(max_length=16, choices=RunTrigger.choices)
    missed = models.PositiveIntegerField(default=0)
    missed_more = models.BooleanField(
        default=False, help_text="More were missed than were counted."
    )
    state = models.CharField(max_length=16, choices=RunState.choices, default=RunState.RUNNING)
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    result = models.TextField(blank=True, help_text="The run's last words, as delivered.")
    reason = models.TextField(blank=True, help_text="Why it failed or was skipped.")

    class Meta:
        ordering = ["-due_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["routine", "due_at"], name="routine_run_once"),
        ]

    def __str__(self) -> str:
        return f"{self.routine.name} at {self.due_at:%Y-%m-%d %H:%M} ({self.state})"
