"""The admin is for inspecting. History (entries, turns, steps) is read-only."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from chats.models import (
    Agent,
    AuthProfile,
    Binding,
    Conversation,
    Entry,
    QueuedInput,
    SignInToken,
    Step,
    Task,
    Turn,
)


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class ReadOnlyAdmin(admin.ModelAdmin):
    """History can be read, never rewritten by hand."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class AuthProfileForm(forms.ModelForm):
    """Secrets are write-only here: the field starts empty, and empty keeps the old value."""

    secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Leave empty to keep the current secret.",
    )

    class Meta:
        model = AuthProfile
        fields = ["agent", "name", "provider", "secret"]

    def clean_secret(self) -> str:
        value = self.cleaned_data.get("secret") or ""
        if not value and self.instance.pk:
            return self.instance.secret
        return value


class AuthProfileInline(admin.TabularInline):
    model = AuthProfile
    form = AuthProfileForm
    extra = 0
    fields = ["name", "provider", "secret", "masked"]
    readonly_fields = ["masked"]


class BindingInline(admin.TabularInline):
    model = Binding
    extra = 0
    fields = ["channel", "account_id", "peer", "parent_peer", "guild_id", "roles", "team_id"]


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "workspace", "is_default", "engine"]
    list_filter = ["is_default", "engine"]
    search_fields = ["slug", "name", "workspace"]
    inlines = [AuthProfileInline, BindingInline]


@admin.register(AuthProfile)
class AuthProfileAdmin(admin.ModelAdmin):
    form = AuthProfileForm
    list_display = ["agent", "name", "provider", "masked"]
    list_filter = ["provider"]
    search_fields = ["name", "agent__slug"]
    readonly_fields = ["masked"]


@admin.register(Binding)
class BindingAdmin(admin.ModelAdmin):
    list_display = ["__str__", "agent", "channel", "account_id", "peer", "guild_id", "team_id"]
    list_filter = ["channel", "agent"]
    search_fields = ["peer", "parent_peer", "guild_id", "team_id", "account_id"]


class EntryInline(ReadOnlyInline):
    model = Entry
    fields = ["seq", "role", "kind", "text", "created_at"]
    readonly_fields = fields
    ordering = ["seq"]


class TurnInline(ReadOnlyInline):
    model = Turn
    fields = ["number", "state", "started_by", "lane", "started_at", "ended_at", "files_changed"]
    readonly_fields = fields
    ordering = ["number"]


class StepInline(ReadOnlyInline):
    model = Step
    fields = [
        "number",
        "tool",
        "family",
        "effect",
        "args",
        "result",
        "error",
        "files",
        "started_at",
        "ended_at",
    ]
    readonly_fields = fields
    ordering = ["number"]


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = [
        "title",
        "public_id",
        "owner",
        "agent",
        "status",
        "origin",
        "taint",
        "inbound",
        "mode",
        "archived",
        "last_interaction_at",
    ]
    list_filter = ["status", "origin", "taint", "inbound", "mode", "archived", "agent"]
    search_fields = ["title", "public_id", "folder", "session_key"]
    readonly_fields = [
        "public_id",
        "status",
        "taint",
        "session_started_at",
        "last_interaction_at",
        "created_at",
        "updated_at",
    ]
    list_select_related = ["owner", "agent"]
    inlines = [TurnInline, EntryInline]
    date_hierarchy = "last_interaction_at"


@admin.register(Turn)
class TurnAdmin(ReadOnlyAdmin):
    list_display = [
        "__str__",
        "state",
        "started_by",
        "lane",
        "step_family",
        "started_at",
        "ended_at",
        "claimed_by",
    ]
    list_filter = ["state", "started_by", "lane"]
    search_fields = ["conversation__title", "conversation__public_id", "chain_id"]
    list_select_related = ["conversation"]
    inlines = [StepInline]


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "tool", "family", "effect", "started_at", "ended_at"]
    list_filter = ["family", "effect", "tool"]
    search_fields = ["tool", "turn__conversation__title"]


@admin.register(Entry)
class EntryAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "role", "kind", "created_at"]
    list_filter = ["role", "kind"]
    search_fields = ["text", "conversation__title"]
    list_select_related = ["conversation"]


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ["title", "public_id", "parent", "state", "created_at", "ended_at"]
    list_filter = ["state"]
    search_fields = ["title", "public_id", "parent__title"]
    list_select_related = ["parent"]


@admin.register(QueuedInput)
class QueuedInputAdmin(ReadOnlyAdmin):
    list_display = ["conversation", "created_at", "taken_at"]
    search_fields = ["text"]


@admin.register(SignInToken)
class SignInTokenAdmin(ReadOnlyAdmin):
    list_display = ["user", "created_at", "used_at"]
    exclude = ["digest"]


from chats.gateway import admin as gateway_admin  # noqa: E402,F401  registers the gateway's admin
