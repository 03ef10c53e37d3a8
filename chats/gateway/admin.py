"""The gateway in the admin: agents (one default), bindings (ties refused), sessions,
the outbox, reset policies, who you are on each channel, identity links, and routines
with their runs.

Found by the admin's autodiscovery, after ``chats.admin``: it registers Agent again with
its bindings inline. Secrets are write-only: bot tokens show masked,
tokens and webhook secrets are shown once, when made.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.forms.models import BaseInlineFormSet

from chats.admin import AgentAdmin, NamedInputsAdmin, NamedInputsInline, ReadOnlyAdmin
from chats.forms import WriteOnlySecretMixin
from chats.gateway.forms import RoutineAdminForm
from chats.gateway.ladder import ERR_TIE, CompiledBinding, binding_conflicts, compile_binding
from chats.gateway.models import (
    Binding,
    ChannelAccount,
    GatewayConfig,
    GatewayToken,
    IdentityLink,
    InboundRecord,
    OutboxMessage,
    OutboxState,
    OwnerIdentity,
    ResetPolicy,
    Routine,
    RoutineRun,
    Session,
    SessionOrigin,
)
from chats.gateway.outbox import DeliveryError, outbox_retry_now
from chats.gateway.routines import routine_pause, routine_resume, routine_run_now
from chats.gateway.services import channel_account_secret_rotate, session_end
from chats.gateway.slack import CHANNEL as SLACK
from chats.gateway.slack import slack_bot_identify
from chats.gateway.telegram import CHANNEL as TELEGRAM
from chats.gateway.telegram import telegram_bot_identify
from chats.models import Agent
from chats.secretbox import SecretsKeyError, secret_seal

ERR_ONE_DEFAULT = "There must be exactly one default agent: make another agent the default instead."


# ---------------------------------------------------------------------------
# Agents and bindings


class AgentForm(forms.ModelForm):
    class Meta:
        model = Agent
        fields = [
            "slug",
            "name",
            "workspace",
            "is_default",
            "allowed_tools",
            "stranger_tools",
            "stranger_tools_ask_first",
            "system_text",
            "engine",
            "engine_config",
            "created_at",
        ]

    def clean_is_default(self) -> bool:
        value = self.cleaned_data.get("is_default", False)
        if self.instance.pk and self.instance.is_default and not value:
            raise ValidationError(ERR_ONE_DEFAULT)
        return value

    def _get_validation_exclusions(self):
        # Making this agent the default retires the old one in save_model, so the
        # one-default constraint is not checked against the old default here.
        exclude = super()._get_validation_exclusions()  # type: ignore[misc]  # Django's, not in the stubs
        exclude.add("is_default")
        return exclude


class BindingFormSet(BaseInlineFormSet):
    """Two new rows of one form that would tie are refused together, naming both."""

    def clean(self) -> None:
        super().clean()
        agent = self.instance
        seen: list[CompiledBinding] = []
        for form in self.forms:
            data = getattr(form, "cleaned_data", None)
            if not data or data.get("DELETE") or not data.get("channel"):
                continue
            compiled = compile_binding(
                id=form.instance.pk,
                agent_id=agent.pk or 0,
                agent_slug=agent.slug,
                channel=data["channel"],
                account_id=data.get("account_id", ""),
                peer=data.get("peer", ""),
                peer_kind=data.get("peer_kind", ""),
                parent_peer=data.get("parent_peer", ""),
                guild_id=data.get("guild_id", ""),
                roles=data.get("roles") or [],
                team_id=data.get("team_id", ""),
            )
            clashes = binding_conflicts(compiled, seen)
            if clashes:
                other, tier = clashes[0]
                raise ValidationError(
                    ERR_TIE.format(this=compiled.label, other=other.label, tier=tier)
                )
            seen.append(compiled)


class BindingInline(NamedInputsInline):
    model = Binding
    formset = BindingFormSet
    extra = 0
    fields = [
        "channel",
        "account_id",
        "peer",
        "peer_kind",
        "parent_peer",
        "guild_id",
        "roles",
        "team_id",
    ]


class GatewayAgentAdmin(AgentAdmin):
    form = AgentForm
    inlines = [*AgentAdmin.inlines, BindingInline]

    def save_model(self, request, obj: Agent, form, change) -> None:
        with transaction.atomic():
            if obj.is_default:
                Agent.objects.filter(is_default=True).exclude(pk=obj.pk).update(is_default=False)
            super().save_model(request, obj, form, change)

    def has_delete_permission(self, request, obj=None) -> bool:
        if obj is not None and obj.is_default:
            return False  # there is always exactly one default agent
        return super().has_delete_permission(request, obj)


admin.site.unregister(Agent)
admin.site.register(Agent, GatewayAgentAdmin)


@admin.register(Binding)
class BindingAdmin(NamedInputsAdmin):
    list_display = [
        "__str__",
        "agent",
        "channel",
        "account_id",
        "peer",
        "peer_kind",
        "guild_id",
        "team_id",
    ]
    list_filter = ["channel", "peer_kind", "agent"]
    search_fields = ["peer", "parent_peer", "guild_id", "team_id", "account_id"]


# ---------------------------------------------------------------------------
# Sessions


class SessionOriginInline(admin.StackedInline):
    model = SessionOrigin
    fk_name = "conversation"
    can_delete = False
    extra = 0
    readonly_fields = fields = (
        *SessionOrigin.ORIGIN_FIELDS,
        "previous",
        "started_because",
        "ended_because",
        "reset_pending",
    )

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = [
        "session_key",
        "title",
        "agent",
        "chat_type",
        "status",
        "taint",
        "archived",
        "pinned",
        "session_started_at",
        "last_interaction_at",
    ]
    list_filter = ["agent", "archived", "status", "gateway__chat_type", "gateway__channel"]
    search_fields = ["session_key", "title", "public_id"]
    list_select_related = ["agent", "gateway"]
    readonly_fields = [
        "public_id",
        "session_key",
        "agent",
        "owner",
        "folder",
        "origin",
        "origin_channel",
        "status",
        "taint",
        "session_started_at",
        "last_interaction_at",
        "created_at",
        "updated_at",
    ]
    fields = [*readonly_fields, "title", "pinned", "archived"]
    inlines = [SessionOriginInline]
    actions = ["start_fresh"]
    date_hierarchy = "last_interaction_at"

    def get_queryset(self, request):
        return super().get_queryset(request).filter(session_key__isnull=False)

    def has_add_permission(self, request) -> bool:
        return False  # sessions are made by inbound messages

    @admin.display(description="chat type")
    def chat_type(self, obj) -> str:
        origin = getattr(obj, "gateway", None)
        return origin.chat_type if origin else ""

    @admin.action(description="Start fresh (archive, keep everything)")
    def start_fresh(self, request, queryset) -> None:
        done = {"archived": 0, "pending": 0, "gone": 0}
        for chat in queryset.filter(archived=False):
            done[session_end(conversation=chat, reason="a reset from the admin")] += 1
        self.message_user(
            request,
            f"{done['archived']} started fresh; {done['pending']} will once their reply ends.",
        )


# ---------------------------------------------------------------------------
# The outbox and the inbound log


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyAdmin):
    list_display = [
        "__str__",
        "conversation",
        "state",
        "attempts",
        "parts_sent",
        "delivery",
        "next_attempt_at",
        "last_error",
        "created_at",
        "sent_at",
    ]
    list_filter = ["state", "channel", "delivery"]
    search_fields = ["text", "account_id", "last_error", "delivery_error"]
    list_select_related = ["conversation"]
    actions = ["retry_now"]

    @admin.action(description="Retry now")
    def retry_now(self, request, queryset) -> None:
        for message in queryset.filter(state__in=[OutboxState.FAILED, OutboxState.PENDING]):
            outbox_retry_now(message=message)
        self.message_user(request, "They go out on the runner's next sweep.")


@admin.register(InboundRecord)
class InboundRecordAdmin(ReadOnlyAdmin):
    list_display = [
        "received_at",
        "channel",
        "account_id",
        "message_id",
        "session_key",
        "agent_slug",
        "rule",
        "outcome",
        "reason",
        "sender",
        "limited",
        "told",
        "shared_dm",
    ]
    list_filter = ["channel", "outcome", "limited", "shared_dm", "agent_slug"]
    search_fields = ["message_id", "session_key", "rule", "reason", "sender"]
    date_hierarchy = "received_at"


# ---------------------------------------------------------------------------
# Settings, accounts, identities, policies


@admin.register(GatewayConfig)
class GatewayConfigAdmin(admin.ModelAdmin):
    list_display = ["__str__", "dm_scope", "maintenance_mode", "prune_after_days", "max_entries"]
    readonly_fields = ["routing_version"]

    def has_add_permission(self, request) -> bool:
        return not GatewayConfig.objects.exists()

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(GatewayToken)
class GatewayTokenAdmin(ReadOnlyAdmin):
    """Tokens are made with ``manage.py conch_gateway_token``, which shows one once."""

    list_display = ["owner", "created_at", "revoked_at"]
    exclude = ["digest"]


class ChannelAccountForm(WriteOnlySecretMixin, forms.ModelForm):
    secret = forms.CharField(
        required=False,
        label="Bot token",
        widget=forms.PasswordInput(render_value=False),
        help_text="Telegram's bot token, Slack's xoxb-… token, Discord's bot token or "
        "WhatsApp's access token. Leave empty to keep the current one.",
    )
    signing_secret = forms.CharField(
        required=False,
        label="Signing secret",
        widget=forms.PasswordInput(render_value=False),
        help_text="Slack's signing secret, or the WhatsApp app's secret: every request the "
        "app sends is checked against it. Leave empty to keep the current one.",
    )

    class Meta:
        model = ChannelAccount
        fields = [
            "owner",
            "channel",
            "account_id",
            "secret",
            "signing_secret",
            "public_key",
            "platform_id",
            "group_activation",
            "edited_messages",
            "linked_channel_posts",
        ]

    def clean_signing_secret(self) -> str:
        value = self.cleaned_data.get("signing_secret") or ""
        if not value and self.instance.pk:
            return self.instance.signing_secret
        try:
            secret_seal(value)  # a key file that can't seal it is said here, not as a 500
        except SecretsKeyError as exc:
            raise forms.ValidationError(str(exc)) from None
        return value


@admin.register(ChannelAccount)
class ChannelAccountAdmin(admin.ModelAdmin):
    form = ChannelAccountForm
    list_display = [
        "__str__",
        "owner",
        "masked",
        "bot_username",
        "has_webhook_secret",
        "edited_messages",
        "created_at",
    ]
    list_filter = ["channel"]
    readonly_fields = ["masked", "bot_username", "bot_user_id"]
    actions = ["new_webhook_secret", "learn_bot_name"]

    def save_model(self, request, obj: ChannelAccount, form, change) -> None:
        super().save_model(request, obj, form, change)
        if obj.channel in (TELEGRAM, SLACK) and "secret" in form.changed_data and obj.secret:
            self._learn_bot_name(request, obj)

    def _learn_bot_name(self, request, account: ChannelAccount) -> None:
        asked = "Telegram's getMe" if account.channel == TELEGRAM else "Slack's auth.test"
        try:
            if account.channel == TELEGRAM:
                name = "@" + telegram_bot_identify(account)
            else:
                name = f"the user {slack_bot_identify(account)}"
        except DeliveryError as exc:
            self.message_user(
                request,
                f"{account}: {asked} didn't answer ({exc}); the bot's own messages and "
                "mentions of it are not known until it does (use “Learn the bot's name”).",
                messages.WARNING,
            )
        else:
            self.message_user(request, f"{account} is {name}.")

    @admin.action(
        description="Learn the bot's name from its app (Telegram's getMe, Slack's auth.test)"
    )
    def learn_bot_name(self, request, queryset) -> None:
        for account in queryset.filter(channel__in=[TELEGRAM, SLACK]):
            self._learn_bot_name(request, account)

    @admin.display(boolean=True, description="webhook secret set")
    def has_webhook_secret(self, obj: ChannelAccount) -> bool:
        return bool(obj.webhook_secret_digest)

    @admin.action(description="Make a new webhook secret (shown once)")
    def new_webhook_secret(self, request, queryset) -> None:
        for account in queryset:
            secret = channel_account_secret_rotate(account=account)
            self.message_user(
                request,
                f"{account}: the webhook's secret_token is {secret} — it is not shown again.",
                messages.WARNING,
            )


@admin.register(OwnerIdentity)
class OwnerIdentityAdmin(admin.ModelAdmin):
    list_display = ["owner", "channel", "account_id", "peer"]
    list_filter = ["channel"]
    search_fields = ["peer"]


@admin.register(IdentityLink)
class IdentityLinkAdmin(admin.ModelAdmin):
    list_display = ["name", "channel", "peer"]
    list_filter = ["channel"]
    search_fields = ["name", "peer"]


@admin.register(ResetPolicy)
class ResetPolicyAdmin(admin.ModelAdmin):
    list_display = ["__str__", "chat_type", "channel", "mode", "at_hour", "idle_minutes"]
    list_filter = ["mode", "chat_type"]


# ---------------------------------------------------------------------------
# Routines and their runs


class RoutineRunInline(admin.TabularInline):
    model = RoutineRun
    fields = readonly_fields = (
        "due_at",
        "trigger",
        "state",
        "missed",
        "conversation",
        "ended_at",
        "reason",
    )
    extra = 0
    max_num = 0
    can_delete = False
    ordering = ["-due_at"]
    show_change_link = True
    template = "admin/edit_inline/readonly_tabular.html"  # as chats.admin.ReadOnlyInline


@admin.register(Routine)
class RoutineAdmin(NamedInputsAdmin):
    """A routine's schedule is checked as on its page; changing it counts the next time afresh."""

    form = RoutineAdminForm
    list_display = ["name", "schedule", "time_zone", "agent", "deliver", "paused", "next_due_at"]
    list_filter = ["paused", "deliver", "agent"]
    search_fields = ["name", "public_id", "text"]
    readonly_fields = ["public_id", "next_due_at"]
    raw_id_fields = ["target_chat"]
    inlines = [RoutineRunInline]
    actions = ["run_now", "pause", "resume"]

    def save_model(self, request, obj: Routine, form, change) -> None:
        if change and {"schedule", "time_zone", "paused"} & set(form.changed_data):
            obj.next_due_at = None  # counted afresh from now when saved
        super().save_model(request, obj, form, change)

    @admin.action(description="Run now")
    def run_now(self, request, queryset) -> None:
        for routine in queryset.select_related("agent", "owner"):
            routine_run_now(routine=routine)
        self.message_user(request, f"{queryset.count()} routine(s) started.", messages.SUCCESS)

    @admin.action(description="Pause")
    def pause(self, request, queryset) -> None:
        for routine in queryset:
            routine_pause(routine=routine)

    @admin.action(description="Resume")
    def resume(self, request, queryset) -> None:
        for routine in queryset.filter(paused=True):
            routine_resume(routine=routine)


@admin.register(RoutineRun)
class RoutineRunAdmin(ReadOnlyAdmin):
    list_display = ["routine", "due_at", "trigger", "state", "missed", "conversation", "ended_at"]
    list_filter = ["state", "trigger"]
    search_fields = ["routine__name", "routine__public_id"]
    list_select_related = ["routine", "conversation"]
    readonly_fields = [
        "routine",
        "due_at",
        "trigger",
        "state",
        "missed",
        "missed_more",
        "conversation",
        "started_at",
        "ended_at",
        "result",
        "reason",
    ]
