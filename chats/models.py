"""The chat runtime's records: personas, chats, their transcripts, replies and steps.

Writes go through the services in ``chats.runtime``; these classes hold the
fields, the states and the guards a row needs for itself, and a chat's row lock
(``Conversation.objects.lock``), which every app takes the same way.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from chats.limits import LIMITS
from chats.secretbox import EncryptedTextField, secret_masked


class _IdSource:
    """Random ids normally; counted ids inside :func:`counted_ids`, so ``conch_play`` prints the same twice."""

    counters: dict[str, int] | None = None


def new_public_id(prefix: str) -> str:
    counters = _IdSource.counters
    if counters is not None:
        counters[prefix] = counters.get(prefix, 0) + 1
        return f"{prefix}_{counters[prefix]}"
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def counted_ids():
    _IdSource.counters = {}
    try:
        yield
    finally:
        _IdSource.counters = None


def new_chain_id() -> str:
    return new_public_id("chain")


def new_chat_id() -> str:
    return new_public_id("c")


def new_task_id() -> str:
    return new_public_id("t")


# The engine that plays a chat's JSON script (chats/engines/scripted.py): no model.
SCRIPTED_ENGINE = "scripted"


class Agent(models.Model):
    """A persona: its own workspace, auth profiles, allowed tools and sessions."""

    slug = models.SlugField(max_length=64, unique=True, help_text="The agentId in session keys.")
    name = models.CharField(max_length=120)
    workspace = models.CharField(max_length=1024, help_text="The folder this persona works in.")
    is_default = models.BooleanField(default=False)
    allowed_tools = models.JSONField(
        default=list,
        blank=True,
        help_text="Tool names this persona may use in your own chats; empty means every tool.",
    )
    stranger_tools = models.JSONField(
        default=list,
        blank=True,
        help_text=(
            "Tool names this persona may use in chats with someone else's words (a DM from "
            "anyone but you, a group); empty means none: it only answers in words."
        ),
    )
    stranger_tools_ask_first = models.JSONField(
        default=list,
        blank=True,
        help_text="Of those, the tools that ask you first each time, whatever the chat's mode.",
    )
    system_text = models.TextField(
        blank=True, help_text="The persona's own part of the system text."
    )
    engine = models.CharField(max_length=32, default=SCRIPTED_ENGINE)
    engine_config = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Whose persona it is (chats/personas.py): that account's alone, or, left empty, the
    # install's own, its owner's and staff's.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="personas",
        help_text=(
            "The account whose chats answer with this persona. Left empty, it is the "
            "install's own: its owner's and staff's. Another account has none until given one."
        ),
    )

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=Q(is_default=True), name="one_default_agent"
            ),
        ]

    def __str__(self) -> str:
        return self.name or self.slug

    @property
    def has_model(self) -> bool:
        """Whether a model answers for this persona; the scripted engine only plays scripts."""
        return self.engine != SCRIPTED_ENGINE


class AuthProfile(models.Model):
    """Credentials that belong to one persona and never reach another."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="auth_profiles")
    name = models.CharField(max_length=64)
    provider = models.CharField(max_length=64, blank=True)
    # Sealed at rest with the secrets key (chats.secretbox): the database alone reveals none.
    secret = EncryptedTextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "name"], name="auth_profile_name_per_agent")
        ]

    def __str__(self) -> str:
        return f"{self.agent.slug}:{self.name}"

    @property
    def masked(self) -> str:
        return secret_masked(self.secret)


class FolderRoot(models.Model):
    """A folder an account's chats may work beneath, set by the owner in the admin.

    An account with none works beneath its own folder in Conch's home (``chats.roots``);
    the install's owner (a superuser) with none works anywhere, as ever.
    """

    account = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="folder_roots"
    )
    path = models.CharField(max_length=1024, help_text="A full path to a folder that is there.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["account", "path"], name="folder_root_per_account")
        ]

    def __str__(self) -> str:
        return f"{self.account}: {self.path}"


class Status(models.TextChoices):
    """A chat's state, as the chat list has it."""

    WORKING = "working", "working"
    NEEDS_YOU = "needs_you", "needs you"
    IDLE = "idle", "idle"
    STOPPED = "stopped", "stopped"


class Origin(models.TextChoices):
    OWN = "own", "your chat"
    CHAT_APP = "chat_app", "a chat app"
    ROUTINE = "routine", "a routine"
    TASK = "task", "a task"
    PEER = "peer", "an outside agent"
    CLIENT = "client", "another app"
    ARTIFACT = "artifact", "an artifact"


class Taint(models.TextChoices):
    """What a chat has read from outside, or whose words are in it. Only ever grows."""

    NONE = "none", "none"
    UNTRUSTED = "untrusted", "read something from outside"
    PERSON = "person", "someone else's words"


TAINT_ORDER = {Taint.NONE: 0, Taint.UNTRUSTED: 1, Taint.PERSON: 2}


class Inbound(models.TextChoices):
    """Whether messages from other chats are let in. Unset (blank) means accept."""

    ACCEPT = "accept", "Let them in"
    HOLD = "hold", "Hold them for me"
    REFUSE = "refuse", "Turn them away"


class Mode(models.TextChoices):
    ASK = "ask", "Ask"
    AUTO = "auto", "Auto"
    PLAN = "plan", "Plan"


class ConversationQuerySet(models.QuerySet):
    def locked(self) -> ConversationQuerySet:
        """These chats' rows, locked until the transaction ends: call inside ``atomic()``.

        A chat's row lock orders everything written about it (its transcript, its
        replies, what is sent to it), in every app.
        """
        # of=("self",): locking the joined agent row too would serialise every chat of a
        # persona across runners, and deadlock on PostgreSQL with a commit's deferred FK check.
        # no_key (FOR NO KEY UPDATE): lockers still go one at a time, but a row another
        # transaction merely points at (a wait for this chat, a message to it: FOR KEY SHARE)
        # isn't blocked, so two chats waiting for each other at once can't deadlock.
        return self.select_for_update(of=("self",), no_key=True)

    def lock(self, pk: int) -> Conversation:
        """Lock one chat's row and read it afresh, with its agent: call inside ``atomic()``."""
        return self.locked().select_related("agent").get(pk=pk)


class Conversation(models.Model):
    """A chat. A gateway session is a chat with a ``session_key``."""

    public_id = models.CharField(max_length=32, unique=True, default=new_chat_id, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chats"
    )
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="chats")
    title = models.CharField(max_length=LIMITS.title_chars)
    untitled = models.BooleanField(
        default=False,
        help_text="Started without a title: the person's first message gives it one.",
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IDLE)
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.OWN)
    origin_channel = models.CharField(
        max_length=32, blank=True, help_text="For chat-app chats: Telegram, Slack…"
    )
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="children",
        help_text="A task's chat points to the chat that started it.",
    )
    folder = models.CharField(max_length=1024)
    place = models.CharField(
        max_length=128, default="local", help_text="The computer the chat works on."
    )
    archived = models.BooleanField(default=False)
    pinned = models.BooleanField(default=False)
    taint = models.CharField(max_length=16, choices=Taint.choices, default=Taint.NONE)
    inbound = models.CharField(max_length=16, choices=Inbound.choices, blank=True, default="")
    mode = models.CharField(max_length=8, choices=Mode.choices, default=Mode.AUTO)
    script = models.JSONField(
        default=list,
        blank=True,
        help_text="For the scripted engine: the replies this chat's assistant plays.",
    )
    context_recap = models.JSONField(
        default=dict,
        blank=True,
        help_text="The oldest replies, summarized by a model to fit its context: how many "
        "replies it covers, a digest of them, and its words. The next recap folds on from it.",
    )
    # NULL, not "", for chats outside the gateway: unique only among real keys.
    session_key = models.CharField(max_length=512, null=True, blank=True)  # noqa: DJ001
    session_started_at = models.DateTimeField(default=timezone.now)
    last_interaction_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ConversationQuerySet.as_manager()

    class Meta:
        ordering = ["-last_interaction_at"]
        indexes = [
            models.Index(
                fields=["owner", "status", "last_interaction_at"], name="chat_owner_status"
            ),
            # The chats not archived, newest first (list_chats' recent ones, the routine form's
            # list). Partial, so a query saying ``archived=False`` (which Django writes as
            # ``NOT "archived"``, a term SQLite can't seek a column with) still reads it in order:
            # its WHERE is that same term. tests/together/test_cost.py checks the plan.
            models.Index(
                fields=["owner", "last_interaction_at"],
                condition=Q(archived=False),
                name="chat_owner_unarchived",
            ),
            # A session's earlier generations are found by key (the unique one is partial).
            models.Index(fields=["session_key"], name="chat_session_key"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["session_key"],
                condition=Q(session_key__isnull=False, archived=False),
                name="one_active_session_per_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.title} ({self.public_id})"

    @property
    def effective_inbound(self) -> str:
        return self.inbound or Inbound.ACCEPT

    def taint_at_least(self, taint: str) -> bool:
        return TAINT_ORDER[Taint(self.taint)] >= TAINT_ORDER[Taint(taint)]


class EntryRole(models.TextChoices):
    PERSON = "person", "person"
    ASSISTANT = "assistant", "assistant"
    TOOL = "tool", "tool"
    CONCH = "conch", "Conch"


class EntryKind(models.TextChoices):
    MESSAGE = "message", "message"
    NOTE = "note", "note"
    CARD = "card", "card"
    RECAP = "recap", "recap"


class Entry(models.Model):
    """One append-only line of a chat's transcript."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="entries")
    turn = models.ForeignKey(
        "Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="entries"
    )
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=16, choices=EntryRole.choices)
    kind = models.CharField(max_length=16, choices=EntryKind.choices, default=EntryKind.MESSAGE)
    text = models.TextField()
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    card: Any  # what chats.cards.cards_load shows for a card entry on the page; not stored

    class Meta:
        verbose_name_plural = "entries"
        ordering = ["conversation_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "seq"], name="entry_seq_per_chat")
        ]

    def __str__(self) -> str:
        return f"{self.conversation_id}#{self.seq} {self.role}/{self.kind}"


class TurnState(models.TextChoices):
    RUNNING = "running", "running"
    COMPLETED = "completed", "completed"
    NEEDS_YOU = "needs_you", "needs you"
    STOPPED = "stopped", "stopped"
    FAILED = "failed", "failed"
    INTERRUPTED = "interrupted", "interrupted"
    RECOVERY_PENDING = "recovery_pending", "recovery pending"


ENDED_TURN_STATES = frozenset(
    {TurnState.COMPLETED, TurnState.STOPPED, TurnState.FAILED, TurnState.INTERRUPTED}
)


class StartedBy(models.TextChoices):
    PERSON = "person", "the person"
    MESSAGE = "message", "a message from another chat"
    WAIT = "wait", "a wait ending"
    ROUND = "round", "a round"
    TASK = "task", "a task starting"
    GATEWAY = "gateway", "the gateway"
    RECOVERY = "recovery", "recovery"


class Lane(models.TextChoices):
    FOREGROUND = "foreground", "foreground"
    SUBAGENT = "subagent", "subagent"
    CRON = "cron", "cron"


class Turn(models.Model):
    """One reply of the assistant, from start to end."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="turns")
    number = models.PositiveIntegerField(help_text="1 for a chat's first reply.")
    state = models.CharField(max_length=20, choices=TurnState.choices, default=TurnState.RUNNING)
    started_by = models.CharField(
        max_length=16, choices=StartedBy.choices, default=StartedBy.PERSON
    )
    lane = models.CharField(max_length=16, choices=Lane.choices, default=Lane.FOREGROUND)
    chain_id = models.CharField(max_length=40, blank=True, db_index=True)
    folder = models.CharField(max_length=1024)
    place = models.CharField(max_length=128, default="local")
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    step_family = models.CharField(
        max_length=64, blank=True, help_text="The running step's family."
    )
    step_started_at = models.DateTimeField(null=True, blank=True)
    files_changed = models.JSONField(
        default=list, blank=True, help_text="Full paths, in order first changed."
    )
    unwatched = models.BooleanField(default=False)
    browser_open = models.BooleanField(
        default=False, help_text="A web page this reply read is still open."
    )
    notes_said = models.JSONField(
        default=dict,
        blank=True,
        help_text="What the notes about other chats have said this turn (once each).",
    )
    engine_state = models.JSONField(default=dict, blank=True)
    pending_action = models.JSONField(
        null=True, blank=True, help_text="A request waiting for the person's Approve or Deny."
    )
    end_reason = models.TextField(blank=True)
    replaced_by = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The reply that replaced this one (a retry, or the person's edited message). "
        "The page keeps this one as an earlier version; the model no longer reads it.",
    )
    claimed_by = models.CharField(max_length=128, blank=True, db_index=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["conversation_id", "number"]
        indexes = [
            models.Index(fields=["state", "claimed_by"], name="turn_runnable"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "number"], name="turn_number_per_chat"),
            models.UniqueConstraint(
                fields=["conversation"],
                condition=Q(ended_at__isnull=True),
                name="one_open_turn_per_chat",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.conversation_id} reply {self.number} ({self.state})"

    @property
    def is_open(self) -> bool:
        """Not ended: running, waiting for the person's OK, or pending recovery."""
        return self.ended_at is None


class StandingOk(models.Model):
    """The person's "don't ask again" in one chat: a tool, or for a command, how it starts.

    Belongs to one chat and goes with it; a change of the chat's mode clears them all
    (``chats.runtime.standing``, which also says when one is honoured).
    """

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="standing_oks"
    )
    tool = models.CharField(max_length=64)
    command = models.CharField(
        max_length=1024,
        blank=True,
        help_text="For a command: the words it starts with, or (with whole) all its words; "
        "empty for any use of the tool.",
    )
    whole = models.BooleanField(
        default=False, help_text="The command's words are the whole command, not its start."
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "tool", "command", "whole"], name="standing_ok_per_chat"
            )
        ]

    def __str__(self) -> str:
        return f"{self.conversation_id}: {self.tool} {self.command}".strip()


class Effect(models.TextChoices):
    READ = "read", "read"
    WRITE = "write", "write"


class Step(models.Model):
    """One tool call inside a reply."""

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="steps")
    number = models.PositiveIntegerField()
    tool = models.CharField(max_length=64)
    family = models.CharField(max_length=64)
    effect = models.CharField(max_length=8, choices=Effect.choices)
    args = models.JSONField(default=dict, blank=True, help_text="Arguments, with secrets scrubbed.")
    result = models.TextField(blank=True, help_text="What the tool said, cut short.")
    error = models.TextField(blank=True)
    files = models.JSONField(default=list, blank=True, help_text="Full paths this step changed.")
    changes = models.JSONField(
        default=list,
        blank=True,
        help_text="Each file's change as the person sees it: a diff, or a new file's words "
        "(chats.tools.diffs), secrets scrubbed.",
    )
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    # A command's process group, recorded as it starts: after a kill -9 of Conch the
    # restarted runner finds what was left running and ends it (chats/processes.py).
    process_group = models.PositiveIntegerField(
        null=True, blank=True, help_text="A command's process group id."
    )
    process_mark = models.CharField(
        max_length=200,
        blank=True,
        help_text="The computer, its boot and the group leader's start time: "
        "tells the command's group from a reused id.",
    )
    sandboxed = models.BooleanField(
        null=True, blank=True, help_text="For a command: whether it ran in the sandbox."
    )
    progress = models.CharField(
        max_length=300, blank=True, help_text="What a running step last said of its progress."
    )

    class Meta:
        ordering = ["turn_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["turn", "number"], name="step_number_per_turn")
        ]

    def __str__(self) -> str:
        return f"{self.turn_id}.{self.number} {self.tool}"


class TaintCause(models.TextChoices):
    """Why a chat's taint rose: what came in, and from where."""

    PAGE = "page", "read a web page"
    MESSAGE = "message", "a message from another chat"
    WAIT = "wait", "the answer of a wait"
    TASK = "task", "a task's result"
    CHAT_READ = "chat_read", "read another chat's words"
    ROUTINE = "routine", "a routine's result"
    STRANGER = "stranger", "someone else's words"
    IMPORT = "import", "an import"
    MCP = "mcp", "an MCP tool's result"
    COMMAND_NETWORK = "command_network", "ran a command that could reach the network"
    PARENT = "parent", "started by a chat that was careful"
    PREVIOUS = "previous", "the session before it had someone else's words"
    SETUP = "setup", "started careful, as set up"


class TaintRiseQuerySet(models.QuerySet):
    def update(self, **kwargs: Any) -> int:
        raise TypeError("A chat's trust timeline is append-only: a rise is never changed.")


class TaintRise(models.Model):
    """One rise of a chat's taint, written in the same transaction as the rise
    (``chats.taint.taint_raise``, the one door). Append-only: a rise is never changed,
    and goes only with its chat.

    What it holds is what the chat itself used (a URL, a path), which chat the taint
    came from (never that chat's words: the timeline follows ``source_rise`` to say
    why that chat was careful, as far as the person may see), and where it came in.
    """

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="taint_rises"
    )
    at = models.DateTimeField(default=timezone.now)
    before = models.CharField(max_length=16, choices=Taint.choices)
    after = models.CharField(max_length=16, choices=Taint.choices)
    cause = models.CharField(max_length=16, choices=TaintCause.choices)
    url = models.TextField(blank=True, help_text="The page or server the chat itself used.")
    path = models.TextField(blank=True, help_text="The file the chat itself read.")
    source = models.ForeignKey(
        Conversation,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The chat the taint came from (a message, a wait, a task, a routine).",
    )
    source_taint = models.CharField(
        max_length=16, choices=Taint.choices, blank=True, help_text="That chat's taint then."
    )
    source_rise = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="That chat's latest rise then: where its own care came from.",
    )
    turn = models.ForeignKey(
        Turn, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    step = models.ForeignKey(
        "Step",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The step of that reply that carried it in.",
    )
    detail = models.JSONField(
        default=dict,
        blank=True,
        help_text="The rest of the cause: a message's or task's id, a chat app and sender, "
        "an archive's claim, an MCP server and tool.",
    )

    objects = TaintRiseQuerySet.as_manager()

    class Meta:
        ordering = ["conversation_id", "at", "id"]
        indexes = [models.Index(fields=["conversation", "at"], name="taint_rise_chat_at")]

    def __str__(self) -> str:
        return f"{self.conversation_id}: {self.before} → {self.after} ({self.cause})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise TypeError("A chat's trust timeline is append-only: a rise is never changed.")
        super().save(*args, **kwargs)


class QueuedInput(models.Model):
    """The person's message that arrived during a running reply; the next reply takes it."""

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="queued_inputs"
    )
    text = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    taken_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"queued for {self.conversation_id}"


class TaskState(models.TextChoices):
    QUEUED = "queued", "queued"
    WAITING_FOR_ROOM = "waiting_for_room", "waiting for room"
    WAITING_FOR_OK = "waiting_for_ok", "waiting for your OK"
    RUNNING = "running", "running"
    DONE = "done", "done"
    UNVERIFIED = "unverified", "unverified"
    FAILED = "failed", "failed"
    STOPPED = "stopped", "stopped"
    INTERRUPTED = "interrupted", "interrupted"


TASK_GOING_STATES = frozenset(
    {TaskState.QUEUED, TaskState.WAITING_FOR_ROOM, TaskState.WAITING_FOR_OK, TaskState.RUNNING}
)


class Task(models.Model):
    """Background work a chat started. It runs as a chat of its own, on the subagent lane."""

    public_id = models.CharField(max_length=32, unique=True, default=new_task_id, editable=False)
    parent = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="tasks")
    chat = models.OneToOneField(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="task_record"
    )
    title = models.CharField(max_length=LIMITS.title_chars)
    prompt = models.TextField(blank=True)
    state = models.CharField(max_length=20, choices=TaskState.choices, default=TaskState.QUEUED)
    result = models.TextField(blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["state", "created_at"], name="task_state")]

    def __str__(self) -> str:
        return f"{self.title} ({self.public_id})"

    @property
    def is_going(self) -> bool:
        return self.state in TASK_GOING_STATES


class SignInToken(models.Model):
    """The one-time link `conch serve` prints, like Jupyter's token URL."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"sign-in for {self.user} ({'used' if self.used_at else 'unused'})"


class EventStream(models.Model):
    """Each owner's event sequence: the numbers let a page notice a gap and refetch."""

    owner = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="event_stream"
    )
    seq = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"events for {self.owner} at {self.seq}"


class McpTransport(models.TextChoices):
    STDIO = "stdio", "a command (stdio)"
    HTTP = "http", "an address (streamable HTTP)"


class McpStatus(models.TextChoices):
    UNCHECKED = "unchecked", "not checked yet"
    OK = "ok", "ok"
    FAILING = "failing", "failing"


class McpServer(models.Model):
    """A Model Context Protocol server a persona takes tools from (``chats.mcp.servers``).

    Either a command Conch starts (stdio), run in the sandbox in the chat's folder, or a
    streamable-HTTP address with an optional key. The key and the environment it is given
    are sealed at rest, like every other secret. Its tools are listed when the persona is
    saved and when the server says its list changed; a server that fails is shown failing
    with its own words, and none of its tools is offered.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="mcp_servers")
    name = models.CharField(
        max_length=24,
        help_text="A short name: small letters, digits and dashes (git, issues). "
        "Its tools are called mcp__<name>__<tool>.",
    )
    transport = models.CharField(
        max_length=8, choices=McpTransport.choices, default=McpTransport.STDIO
    )
    command = models.JSONField(
        default=list,
        blank=True,
        help_text="For a command: the program and its arguments, run in the chat's folder.",
    )
    url = models.CharField(max_length=2_000, blank=True, help_text="For an address: its URL.")
    # Sealed at rest with the secrets key (chats.secretbox), as auth profiles' secrets are.
    secret = EncryptedTextField(blank=True, verbose_name="key")
    env = EncryptedTextField(
        blank=True,
        verbose_name="environment",
        help_text="NAME=value lines the command is given, on top of the sandbox's own.",
    )
    enabled = models.BooleanField(default=True)
    status = models.CharField(max_length=12, choices=McpStatus.choices, default=McpStatus.UNCHECKED)
    status_words = models.TextField(
        blank=True, help_text="What went wrong, in the server's own words where it gave any."
    )
    checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["agent_id", "name"]
        verbose_name = "MCP server"
        constraints = [
            models.UniqueConstraint(fields=["agent", "name"], name="mcp_server_name_per_agent")
        ]

    def __str__(self) -> str:
        return f"{self.agent.slug}:{self.name}"

    @property
    def masked(self) -> str:
        return secret_masked(self.secret)

    def env_values(self) -> list[str]:
        """The values of its ``NAME=value`` lines, as they are (checked when saved)."""
        return [line.partition("=")[2] for line in (self.env or "").splitlines() if "=" in line]


def mcp_secrets(agent: Agent | None = None) -> list[str]:
    """MCP servers' keys and environment values (one persona's, or every persona's): taken
    from a tool's result before it is kept, and from words leaving a chat."""
    rows = McpServer.objects.exclude(secret="", env="")
    if agent is not None:
        rows = rows.filter(agent=agent)
    values: list[str] = []
    for server in rows.only("secret", "env"):
        values.append(server.secret)
        values += [value for value in server.env_values() if len(value) >= 4]
    return [value for value in values if value]


class McpTool(models.Model):
    """One tool a server listed, as it described it, and the owner's ticks for it."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=200, help_text="The server's own name for it.")
    call_name = models.CharField(
        max_length=64, help_text="The name a chat's model calls it by: mcp__<server>__<tool>."
    )
    title = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict, blank=True)
    read_only = models.BooleanField(
        default=False, help_text="The server marks it read-only (readOnlyHint)."
    )
    problem = models.TextField(
        blank=True, help_text="Why it is not offered (its schema can't be read), or empty."
    )
    for_owner = models.BooleanField(
        default=True, verbose_name="in your chats", help_text="Offered in your own chats."
    )
    for_strangers = models.BooleanField(
        default=False,
        verbose_name="in other people's chats",
        help_text="Offered in chats with someone else's words (none by default).",
    )
    asks_first = models.BooleanField(
        default=True,
        help_text="Asks you first: in Ask mode, and in other people's chats every time.",
    )

    class Meta:
        ordering = ["server_id", "name"]
        verbose_name = "MCP tool"
        constraints = [
            models.UniqueConstraint(fields=["server", "name"], name="mcp_tool_name_per_server")
        ]

    def __str__(self) -> str:
        return f"{self.server}/{self.name}"
