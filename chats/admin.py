"""The admin is for inspecting. History (entries, turns, steps) is read-only.

``ReadOnlyAdmin`` and ``AgentAdmin`` are bases other apps' admins build on.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.forms.utils import pretty_name
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from chats.engines import engine_names
from chats.forms import WriteOnlySecretMixin
from chats.mcp.servers import (
    ERR_SERVER_NAME,
    ERR_URL_FOR_HTTP,
    SERVER_NAME,
    command_parse,
    command_shown,
    discover,
    env_parse,
)
from chats.models import (
    Agent,
    AuthProfile,
    Conversation,
    Entry,
    FolderRoot,
    McpServer,
    McpStatus,
    McpTool,
    McpTransport,
    Origin,
    QueuedInput,
    SignInToken,
    Step,
    Taint,
    TaintRise,
    Task,
    Turn,
)
from chats.runtime.connect import model_test
from chats.tools.registry import (
    FOLDER_FAMILIES,
    all_tools,
    get_tool,
)
from chats.tools.sandbox import command_settings_errors
from chats.toolsets import is_owners_default_workspace


def name_each_input(form: Any, *, by_label: bool) -> None:
    """Give each input of ``form`` a name a screen reader reads (axe: label). The admin's
    date-and-time field is two inputs under one label that names neither; a tabular
    inline's inputs sit under column headings, with no label at all (``by_label``)."""
    for name, field in form.base_fields.items():
        widget = getattr(field.widget, "widget", field.widget)  # inside the related-field wrapper
        label = str(field.label or pretty_name(name))
        if isinstance(widget, forms.MultiWidget):
            parts = ("date", "time") if isinstance(widget, forms.SplitDateTimeWidget) else ()
            for index, part in enumerate(widget.widgets):
                part.attrs.setdefault(
                    "aria-label", f"{label}, {parts[index] if parts else index + 1}"
                )
        elif by_label and not widget.is_hidden:
            widget.attrs.setdefault("aria-label", label)


class NamedInputsAdmin(admin.ModelAdmin):
    """A model admin whose every input has a name (:func:`name_each_input`)."""

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        name_each_input(form, by_label=False)
        return form


class NamedInputsInline(admin.TabularInline):
    """A tabular inline whose every input is named by its column (:func:`name_each_input`)."""

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        name_each_input(formset.form, by_label=True)

        class NamedFormSet(formset):  # type: ignore[valid-type,misc]
            def add_fields(self, form, index) -> None:
                super().add_fields(form, index)
                if "DELETE" in form.fields:  # the row's Delete box, under its column heading
                    form.fields["DELETE"].widget.attrs.setdefault("aria-label", "Delete")

        return NamedFormSet


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True
    # Its rows have nothing to focus: the box that scrolls them on a phone takes focus.
    template = "admin/edit_inline/readonly_tabular.html"

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


class AuthProfileForm(WriteOnlySecretMixin, forms.ModelForm):
    """Secrets are write-only here: the field starts empty, and empty keeps the old value."""

    secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Leave empty to keep the current secret.",
    )

    class Meta:
        model = AuthProfile
        fields = ["agent", "name", "provider", "secret"]


class AuthProfileInline(NamedInputsInline):
    model = AuthProfile
    form = AuthProfileForm
    extra = 0
    fields = ["name", "provider", "secret", "masked"]
    readonly_fields = ["masked"]


ERR_COMMAND_FOR_STDIO = "A server started by a command needs the command."
ENV_CLEAR = "-"


class McpServerForm(WriteOnlySecretMixin, forms.ModelForm):
    """A persona's MCP server: its command as words, its key and environment write-only."""

    command = forms.CharField(
        required=False,
        max_length=4_000,
        help_text="For a command: as you would type it (uvx mcp-server-git), or a JSON list. "
        "It runs in the chat's folder, in the sandbox commands run in.",
    )
    secret = forms.CharField(
        label="Key",
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="For an address: sent as its bearer key. Leave empty to keep the current one.",
    )
    env = forms.CharField(
        label="Environment",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="For a command: NAME=value lines it is given, sealed like every secret. "
        f"Leave empty to keep them; “{ENV_CLEAR}” alone removes them.",
    )

    class Meta:
        model = McpServer
        fields = ["name", "transport", "command", "url", "secret", "env", "enabled"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            try:
                self.initial["command"] = command_shown(command_parse(self.instance.command))
            except ValueError:
                self.initial["command"] = ""
            self.initial["env"] = ""
            try:
                names = sorted(env_parse(self.instance.env))
            except ValueError:
                names = []
            if names:
                self.fields["env"].help_text += " Now set: " + ", ".join(names) + "."

    def clean_name(self) -> str:
        name = (self.cleaned_data.get("name") or "").strip()
        if not SERVER_NAME.match(name):
            raise forms.ValidationError(ERR_SERVER_NAME)
        return name

    def clean_env(self) -> str:
        text = self.cleaned_data.get("env") or ""
        if text.strip() == ENV_CLEAR:
            return ""
        if not text.strip() and self.instance.pk:
            return self.instance.env
        try:
            env_parse(text)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return text.strip()

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data
        transport = cleaned.get("transport")
        raw = cleaned.get("command") or ""
        if transport == McpTransport.STDIO:
            try:
                cleaned["command"] = command_parse(raw)
            except ValueError as exc:
                self.add_error("command", str(exc))
        else:
            cleaned["command"] = []  # reached by its address: no command
            url = (cleaned.get("url") or "").strip()
            if not url.lower().startswith(("http://", "https://")):
                self.add_error("url", ERR_URL_FOR_HTTP)
        return cleaned


def _status_shown(server: McpServer) -> str:
    if not server.pk:
        return "–"
    when = f" ({server.checked_at:%Y-%m-%d %H:%M})" if server.checked_at else ""
    words = f": {server.status_words}" if server.status_words else ""
    return f"{server.get_status_display()}{when}{words}"


def _tools_shown(server: McpServer) -> str:
    """Its tools as listed: name, what the owner ticked, and the server's description."""
    if not server.pk:
        return "–"
    rows = list(server.tools.all())
    if not rows:
        return "No tools listed yet."

    def ticks(tool: McpTool) -> str:
        said = []
        if tool.problem:
            return f"not offered: {tool.problem}"
        said.append("your chats" if tool.for_owner else "not in your chats")
        if tool.for_strangers:
            said.append("other people's chats")
        said.append("asks first" if tool.asks_first else "doesn't ask")
        if tool.read_only:
            said.append("read-only")
        return ", ".join(said)

    return format_html(
        '<ul class="mcp-tools">{}</ul>',
        format_html_join(
            "",
            "<li><code>{}</code> ({}): {}</li>",
            ((tool.call_name, ticks(tool), tool.description or tool.title) for tool in rows),
        ),
    )


class McpServerInline(admin.StackedInline):
    """A persona's MCP servers, on its page; each server's page ticks its tools."""

    model = McpServer
    form = McpServerForm
    extra = 0
    show_change_link = True
    fields = [
        "name",
        "transport",
        "command",
        "url",
        "secret",
        "env",
        "enabled",
        "status_shown",
        "tools_shown",
    ]
    readonly_fields = ["status_shown", "tools_shown"]
    verbose_name_plural = "MCP servers (their tools are ticked on each server's page)"

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        name_each_input(formset.form, by_label=False)
        return formset

    @admin.display(description="Status")
    def status_shown(self, server: McpServer) -> str:
        return _status_shown(server)

    @admin.display(description="Tools")
    def tools_shown(self, server: McpServer) -> str:
        return _tools_shown(server)


class McpToolInline(NamedInputsInline):
    model = McpTool
    extra = 0
    can_delete = False
    fields = [
        "call_name",
        "title",
        "description",
        "read_only",
        "problem",
        "for_owner",
        "for_strangers",
        "asks_first",
    ]
    readonly_fields = ["call_name", "title", "description", "read_only", "problem"]

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # the server lists its tools; the owner only ticks them


@admin.register(McpServer)
class McpServerAdmin(NamedInputsAdmin):
    """One MCP server: its settings, its status in its own words, and its tools' ticks.

    Saving lists its tools again (``tools/list``).
    """

    form = McpServerForm
    list_display = ["name", "agent", "transport", "enabled", "status", "checked_at"]
    list_filter = ["status", "transport", "enabled"]
    inlines = [McpToolInline]
    fields = [
        "agent",
        "name",
        "transport",
        "command",
        "url",
        "secret",
        "env",
        "enabled",
        "status_shown",
    ]
    readonly_fields = ["status_shown"]

    @admin.display(description="Status")
    def status_shown(self, server: McpServer) -> str:
        return _status_shown(server)

    def get_inlines(self, request, obj):
        return self.inlines if obj is not None else []  # a new server has listed nothing yet

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        form.base_fields["agent"].help_text = "The persona whose chats get its tools."
        return form

    def save_related(self, request, form, formsets, change) -> None:
        super().save_related(request, form, formsets, change)
        if form.instance.enabled:
            _discover_said(self, request, form.instance)


def _discover_said(model_admin, request, server: McpServer) -> None:
    """List a server's tools, and say in the admin how it went."""
    server = discover(server)
    if server.status == McpStatus.FAILING:
        model_admin.message_user(
            request, f"{server.name}: failing: {server.status_words}", messages.WARNING
        )


# The model endpoint's settings, each kept under its key in Agent.engine_config.
ENDPOINT_FIELDS = {
    "model_base_url": "base_url",
    "model_name": "model",
    "model_context_tokens": "context_tokens",
    "model_auth_profile": "auth_profile",
}


class EndpointFields(forms.Form):
    """A persona's model endpoint as plain fields, stored in ``engine_config``.

    Mixed into whichever agent form the admin uses. The JSON field keeps any
    other engine settings (retries, timeout, temperature…).
    """

    instance: Any  # the model form's, once mixed in

    model_base_url = forms.URLField(
        label="Base URL",
        required=False,
        assume_scheme="http",
        help_text="The endpoint's API root, e.g. http://127.0.0.1:11434/v1 for Ollama.",
    )
    model_name = forms.CharField(
        label="Model", required=False, max_length=200, help_text="e.g. qwen2.5-coder:7b"
    )
    model_context_tokens = forms.IntegerField(
        label="Context size (tokens)",
        required=False,
        min_value=256,
        help_text="The model's context window. Older replies are recapped to fit it.",
    )
    model_auth_profile = forms.CharField(
        label="Auth profile",
        required=False,
        max_length=64,
        help_text="The name of this persona's auth profile whose secret is the API key. "
        "Leave empty for a server that needs no key.",
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        instance = getattr(self, "instance", None)
        if "engine" in self.fields:
            names = engine_names()
            current = getattr(instance, "engine", "")
            if current and current not in names:
                names.append(current)
            self.fields["engine"].widget = forms.Select(choices=[(n, n) for n in names])
            self.fields["engine"].help_text = "openai: an OpenAI-compatible model endpoint."
        config = dict(getattr(instance, "engine_config", None) or {})
        for field, key in ENDPOINT_FIELDS.items():
            if key in config:
                self.initial.setdefault(field, config[key])
        if "engine_config" in self.fields:
            others = {k: v for k, v in config.items() if k not in ENDPOINT_FIELDS.values()}
            self.initial["engine_config"] = others
            self.fields["engine_config"].help_text = (
                "Other engine settings, as JSON: retries, timeout, temperature, reserve_tokens; "
                'for commands, "command_env" (a list of variable names passed to them) and '
                '"command_network" (true lets them reach the network from the sandbox).'
            )

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data
        if "engine_config" in self.fields:
            config = dict(cleaned.get("engine_config") or {})
        else:
            config = dict(self.instance.engine_config or {})
        for field, key in ENDPOINT_FIELDS.items():
            value = cleaned.get(field)
            if value in (None, ""):
                config.pop(key, None)
            else:
                config[key] = value.strip() if isinstance(value, str) else value
        if cleaned.get("engine", getattr(self.instance, "engine", "")) == "openai":
            for field, key in (("model_base_url", "base_url"), ("model_name", "model")):
                if not config.get(key) and not self.has_error(field):
                    self.add_error(field, "A persona on the openai engine needs this.")
        for error in command_settings_errors(config):
            self.add_error("engine_config" if "engine_config" in self.fields else None, error)
        cleaned["engine_config"] = config
        self.instance.engine_config = config
        return cleaned


def _tool_choices() -> list[tuple[str, str]]:
    return [(tool.name, f"{tool.name} ({tool.family})") for tool in all_tools()]


def _never_for_other_people(name: str) -> bool:
    """A tool whose own rule never offers it to a chat with someone else's words (ADR 0134)."""
    probe = Conversation(taint=Taint.PERSON, origin=Origin.CHAT_APP)
    return not get_tool(name).offered(probe)


ERR_ASK_FIRST_NOT_GIVEN = "{names}: ask first only for tools ticked for other people."
ERR_NEVER_OFFERED = (
    "{names}: never offered to a chat with someone else's words (ADR 0134), whatever is ticked."
)
ERR_NO_OWN_FOLDER = (
    "{names}: these work in the persona's folder, and this persona works in your default "
    "workspace. Give it a folder of its own before letting other people use them."
)


class ToolSetFields(forms.Form):
    """A persona's two tool sets as ticks: its tools in your chats, and in chats with other people."""

    instance: Any  # the model form's, once mixed in

    allowed_tools = forms.MultipleChoiceField(
        label="Tools in your own chats",
        choices=_tool_choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every tool.",
    )
    stranger_tools = forms.MultipleChoiceField(
        label="Tools in chats with other people",
        choices=_tool_choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=(
            "A DM from anyone but you, or a group. None ticked: it only answers in words. "
            "Ticked tools work in the persona's own folder, and commands always run in the sandbox."
        ),
    )
    stranger_tools_ask_first = forms.MultipleChoiceField(
        label="Of those, ask you first",
        choices=_tool_choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="These wait for your Approve each time, whatever the chat's mode.",
    )

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data
        given = cleaned.get("stranger_tools") or []
        asking = [
            name for name in cleaned.get("stranger_tools_ask_first") or [] if name not in given
        ]
        if asking:
            self.add_error(
                "stranger_tools_ask_first", ERR_ASK_FIRST_NOT_GIVEN.format(names=", ".join(asking))
            )
        never = [name for name in given if _never_for_other_people(name)]
        if never:
            self.add_error("stranger_tools", ERR_NEVER_OFFERED.format(names=", ".join(never)))
        workspace = cleaned.get("workspace") or getattr(self.instance, "workspace", "")
        in_folder = [name for name in given if get_tool(name).family in FOLDER_FAMILIES]
        if in_folder and is_owners_default_workspace(workspace or ""):
            self.add_error("stranger_tools", ERR_NO_OWN_FOLDER.format(names=", ".join(in_folder)))
        return cleaned


TOOL_SET_FIELDS = ("allowed_tools", "stranger_tools", "stranger_tools_ask_first")


@admin.register(Agent)
class AgentAdmin(NamedInputsAdmin):
    list_display = ["slug", "name", "owner", "workspace", "is_default", "engine"]
    list_filter = ["is_default", "engine"]
    search_fields = ["slug", "name", "workspace"]
    # Another app that adds a persona's records subclasses this and registers its own
    # (the gateway's adds bindings), so this module never imports it.
    inlines = [AuthProfileInline, McpServerInline]
    actions = ["check_connection"]

    def save_related(self, request, form, formsets, change) -> None:
        """Saved with its MCP servers: each enabled one lists its tools (``tools/list``)."""
        super().save_related(request, form, formsets, change)
        for server in form.instance.mcp_servers.filter(enabled=True):
            _discover_said(self, request, server)

    def get_form(self, request, obj=None, change=False, **kwargs):
        base = kwargs.get("form", self.form)
        if not issubclass(base, EndpointFields):
            base = type(f"Endpoint{base.__name__}", (EndpointFields, base), {})
        if not issubclass(base, ToolSetFields):
            base = type(f"ToolSets{base.__name__}", (ToolSetFields, base), {})
        kwargs["form"] = base
        return super().get_form(request, obj, change, **kwargs)

    def get_fieldsets(self, request, obj=None):
        fields = [
            f
            for f in self.get_fields(request, obj)
            if f not in ENDPOINT_FIELDS and f not in TOOL_SET_FIELDS
        ]
        return [
            (None, {"fields": fields}),
            (
                "Tools",
                {
                    "fields": list(TOOL_SET_FIELDS),
                    "description": "Two sets: one for your own chats, one for chats with "
                    "someone else's words in them (a DM from anyone but you, a group). "
                    "A chat moves to the second set at its next step once such words come in.",
                },
            ),
            (
                "Model endpoint",
                {
                    "fields": list(ENDPOINT_FIELDS),
                    "description": "For the engine “openai”: any OpenAI-compatible endpoint "
                    "(Ollama, llama.cpp, vLLM, LM Studio, a hosted API). Use the action "
                    "“Test connection” on the list of agents to try it.",
                },
            ),
        ]

    @admin.action(description="Test connection to the model endpoint")
    def check_connection(self, request, queryset) -> None:
        for agent in queryset:
            if agent.engine != "openai":
                self.message_user(
                    request,
                    f"{agent.slug}: uses the “{agent.engine}” engine, which has no endpoint.",
                    messages.WARNING,
                )
                continue
            result = model_test(agent)
            if result.too_small:
                level, said = messages.WARNING, f"{result.message} {result.too_small}"
            else:
                level = messages.SUCCESS if result.ok else messages.ERROR
                said = result.message
            self.message_user(request, f"{agent.slug}: {said}", level)


class FolderRootForm(forms.ModelForm):
    class Meta:
        model = FolderRoot
        fields = ["account", "path"]

    def clean_path(self) -> str:
        from chats.forms import folder_clean

        path = folder_clean(self.cleaned_data["path"])
        if not path:
            raise forms.ValidationError("A folder root needs a folder.")
        return path


@admin.register(FolderRoot)
class FolderRootAdmin(admin.ModelAdmin):
    """The folders each account's chats may work beneath (chats/roots.py)."""

    form = FolderRootForm
    list_display = ["account", "path"]
    search_fields = ["account__username", "path"]


class NamedBlankFilter(admin.AllValuesFieldListFilter):
    """Each value of the field, and "(none)" for a blank one: a link with no words has no
    name (axe: link-name)."""

    def choices(self, changelist):
        for choice in super().choices(changelist):
            if not str(choice["display"]).strip():
                choice["display"] = "(none)"
            yield choice


@admin.register(AuthProfile)
class AuthProfileAdmin(admin.ModelAdmin):
    form = AuthProfileForm
    list_display = ["agent", "name", "provider", "masked"]
    list_filter = [("provider", NamedBlankFilter)]
    search_fields = ["name", "agent__slug"]
    readonly_fields = ["masked"]


class EntryInline(ReadOnlyInline):
    model = Entry
    fields = readonly_fields = ("seq", "role", "kind", "text", "created_at")
    ordering = ["seq"]


class TurnInline(ReadOnlyInline):
    model = Turn
    fields = readonly_fields = (
        "number",
        "state",
        "started_by",
        "lane",
        "started_at",
        "ended_at",
        "files_changed",
    )
    ordering = ["number"]


class StepInline(ReadOnlyInline):
    model = Step
    fields = readonly_fields = (
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
    )
    ordering = ["number"]


class TaintRiseInline(ReadOnlyInline):
    """The chat's trust timeline: each rise of its taint and why, as it was written down.
    Append-only, so nothing here adds, changes or deletes one; the chat it came from is a
    link to that chat's own page, where its own timeline says why it was careful."""

    model = TaintRise
    fk_name = "conversation"
    verbose_name = "rise of its taint"
    verbose_name_plural = "trust timeline"
    fields = readonly_fields = (
        "at",
        "before",
        "after",
        "cause",
        "url",
        "path",
        "source_chat",
        "source_taint",
        "source_rise",
        "turn",
        "step",
        "detail",
    )
    ordering = ["at", "id"]
    show_change_link = False  # a rise has no page of its own: this is all of it

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("source", "turn", "step")

    @admin.display(description="came from")
    def source_chat(self, rise: TaintRise) -> str:
        if rise.source is None:
            return "a chat that is gone" if rise.source_taint else "-"
        url = reverse("admin:chats_conversation_change", args=[rise.source.pk])
        return format_html('<a href="{}">{}</a>', url, rise.source)


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
        "context_recap",
        "session_started_at",
        "last_interaction_at",
        "created_at",
        "updated_at",
    ]
    list_select_related = ["owner", "agent"]
    inlines = [TaintRiseInline, TurnInline, EntryInline]
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


# Django's own admins for people and groups, with every input named, and permissions in a
# plain list to pick from: the two-box picker's search icons carry an aria-label that
# their role forbids (axe: aria-prohibited-attr).
admin.site.unregister(get_user_model())
admin.site.unregister(Group)


@admin.register(get_user_model())
class ConchUserAdmin(UserAdmin, NamedInputsAdmin):  # type: ignore[misc]  # UserAdmin drops "change"
    filter_horizontal = ()


@admin.register(Group)
class ConchGroupAdmin(GroupAdmin, NamedInputsAdmin):
    filter_horizontal = ()
