"""The gateway's doors, ``POST /gateway/inbound`` and Telegram's webhook, the
routing playground's page, and routines' pages.

Neither door uses the browser's session: the inbound door takes the install's
gateway token (``Authorization: Bearer …``), Telegram's takes the webhook
secret. They are CSRF-exempt because of that, and only because of that.

The playground is the person's page: sign-in required, CSRF on every POST.
Its actions are plain POSTs that redirect, so it works without JavaScript;
under HTMX they answer with the page's regions as out-of-band swaps. Its
forms are in :mod:`chats.gateway.forms`, its rules in :mod:`chats.gateway.playground`.
"""

from __future__ import annotations

import functools
import uuid

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from chats.gateway import playground as pg
from chats.gateway.floods import InboundLimited
from chats.gateway.forms import (
    PlaygroundBindingForm,
    PlaygroundMessageForm,
    PlaygroundScopeForm,
    RoutineForm,
    first_error,
)
from chats.gateway.inbound import (
    BodyTooLarge,
    InboundError,
    inbound_parse,
)
from chats.gateway.lifecycle import local_zone
from chats.gateway.models import ChatType, DmScope, PeerKind, Routine, RunState
from chats.gateway.routines import (
    routine_create,
    routine_next_times,
    routine_pause,
    routine_resume,
    routine_run_now,
)
from chats.gateway.routing import AgentRef
from chats.gateway.selectors import gateway_config, someone_elses
from chats.gateway.services import (
    SessionTaken,
    channel_account_check,
    gateway_token_owner,
    group_retitle,
    ignored_keep,
    inbound_not_taken,
    inbound_receive,
)
from chats.gateway.telegram import CHANNEL as TELEGRAM
from chats.gateway.telegram import (
    SECRET_HEADER,
    AnswerButton,
    Ignore,
    Migrate,
    Retitle,
    telegram_button_answer,
    telegram_chat_migrate,
    telegram_inbound,
    update_message_id,
)
from chats.gateway.webhooks import account_for, json_body
from chats.models import Agent
from chats.personas import runs_the_install
from chats.runtime.chats import ConchError, default_agent
from chats.toolsets import ToolSet, tool_set
from conch.http import HtmxHttpRequest

ERR_NO_TOKEN = "A gateway token is required: Authorization: Bearer <token>."
ERR_BAD_TOKEN = "That gateway token is not valid."
ERR_BAD_SECRET = "The webhook's secret token is missing or wrong."


def _refused(message: str, status: int, **extra) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)


def _bearer(request: HtmxHttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _result(result) -> JsonResponse:
    return JsonResponse(result.as_dict(), status=200 if result.outcome == "duplicate" else 202)


@csrf_exempt
@require_POST
def inbound(request: HtmxHttpRequest) -> JsonResponse:
    token = _bearer(request)
    if token is None:
        response = _refused(ERR_NO_TOKEN, 401)
        response["WWW-Authenticate"] = 'Bearer realm="conch-gateway"'
        return response
    owner = gateway_token_owner(token)
    if owner is None:
        response = _refused(ERR_BAD_TOKEN, 401)
        response["WWW-Authenticate"] = 'Bearer realm="conch-gateway", error="invalid_token"'
        return response
    try:
        message = inbound_parse(json_body(request))
        return _result(inbound_receive(owner=owner, inbound=message))
    except BodyTooLarge as exc:
        return _refused(exc.message, 413, field=exc.field)
    except InboundError as exc:
        return _refused(exc.message, 400, field=exc.field)
    except SessionTaken as exc:
        return _refused(str(exc), 409, field="account_id")
    except InboundLimited as exc:
        response = _refused(str(exc), 429, reason=exc.reason)
        response["Retry-After"] = str(exc.retry_after)
        return response
    except ConchError as exc:
        return _refused(str(exc), 400, field="text")


@csrf_exempt
@require_POST
def telegram_webhook(request: HtmxHttpRequest, account: str) -> JsonResponse:
    """Telegram's door. Past the secret, every update is answered 200: one we choose not to
    take is logged and kept in the admin as refused or ignored, since any other answer makes
    Telegram resend it for hours and hold back the updates behind it."""
    found = account_for(TELEGRAM, account)
    secret = request.headers.get(SECRET_HEADER, "")
    # An unknown account reads the same as a wrong secret: nothing to learn by probing.
    if found is None or not channel_account_check(account=found, secret=secret):
        return _refused(ERR_BAD_SECRET, 401)
    raw = None

    def refused(message: str, field: str) -> JsonResponse:
        inbound_not_taken(
            channel=TELEGRAM,
            account_id=account,
            message_id=update_message_id(raw) or f"refused:{uuid.uuid4().hex}",
            outcome="refused",
            reason=f"{field}: {message}",
        )
        return JsonResponse({"outcome": "refused", "error": message, "field": field}, status=200)

    try:
        raw = json_body(request)
        asked = telegram_inbound(raw, account=found)
    except InboundError as exc:
        return refused(exc.message, exc.field)
    if isinstance(asked, AnswerButton):
        telegram_button_answer(found, asked.callback_query_id)
        return JsonResponse({"outcome": "ignored", "reason": "a button press (answered)"})
    if isinstance(asked, Migrate):
        telegram_chat_migrate(
            account_id=account,
            old_chat_id=asked.old_chat_id,
            new_chat_id=asked.new_chat_id,
            title=asked.title,
        )
        return JsonResponse({"outcome": "migrated"}, status=200)
    if isinstance(asked, Retitle):
        renamed = group_retitle(
            channel=TELEGRAM, account_id=account, group_id=str(asked.chat_id), title=asked.title
        )
        return JsonResponse({"outcome": "retitled", "chats": renamed}, status=200)
    if isinstance(asked, Ignore):
        ignored_keep(channel=TELEGRAM, account_id=account, ignore=asked)
        return JsonResponse({"outcome": "ignored", "reason": asked.reason}, status=200)
    try:
        result = inbound_receive(owner=found.owner, inbound=asked.inbound, reply_to=asked.reply_to)
    except SessionTaken as exc:
        return refused(str(exc), "account_id")
    except InboundLimited as exc:  # kept as refused already, and its sender told once
        return JsonResponse({"outcome": "refused", "error": exc.reason}, status=200)
    except ConchError as exc:
        return refused(str(exc), "text")
    return _result(result)


# ---------------------------------------------------------------------------
# The routing playground

PLAYGROUND = "playground.html"
PLAYGROUND_REGIONS = ("pg-scope", "pg-bindings", "pg-palette", "pg-result", "pg-sessions", "pg-log")
SCOPE_WORDS: dict[str, str] = {
    DmScope.SHARED: "Every DM, from anyone, on any app, lands in one session: dm:shared. "
    "One person's words reach another.",
    DmScope.PER_PEER: "One session per person (dm:alice), the same one on every app.",
    DmScope.PER_CHANNEL_PEER: "One session per person per app (dm:whatsapp:alice). "
    "Recommended, and the default: no session is ever shared by two people.",
    DmScope.PER_ACCOUNT_CHANNEL_PEER: "One session per person per app per bot account "
    "(dm:whatsapp:work:alice).",
}


# (name, label, datalist, placeholder) of the two forms' fields
BINDING_FORM = (
    ("agent", "Agent", "pg-agents", "work"),
    ("channel", "Channel", "pg-channels", "slack"),
    ("peer", "Peer", "pg-peers", "mom"),
    ("peer_kind", "Peer kind", "", ""),
    ("team_id", "Team", "pg-teams", ""),
    ("guild_id", "Guild", "pg-guilds", ""),
    ("roles", "Roles", "pg-roles", "mod, admin"),
    ("parent_peer", "Parent peer", "pg-peers", ""),
    ("account_id", "Account", "", '"*" for any'),
)
MESSAGE_FORM = (
    ("channel", "Channel", "pg-channels", "telegram"),
    ("chat_type", "Chat type", "", ""),
    ("peer", "Sender", "pg-peers", "alice"),
    ("account_id", "Account", "", "default"),
    ("group_id", "Group", "pg-peers", ""),
    ("thread_id", "Thread", "", ""),
    ("parent_peer", "Parent peer", "pg-peers", ""),
    ("guild_id", "Guild", "pg-guilds", ""),
    ("member_roles", "Roles", "pg-roles", "a, b"),
    ("team_id", "Team", "pg-teams", ""),
    ("job_id", "Cron job", "", ""),
    ("text", "Text", "", "What they say"),
)


CHOICES = {"chat_type": ChatType.values, "peer_kind": PeerKind.values}


def _form_fields(spec, prefix: str, values: dict, error: pg.PlaygroundError | None) -> list[dict]:
    return [
        {
            "name": name,
            "id": f"{prefix}-{name.replace('_', '-')}",
            "label": label,
            "list": datalist,
            "placeholder": placeholder,
            "value": values.get(name, ""),
            "error": error.message if error is not None and error.field == name else "",
            "choices": CHOICES.get(name),
            "wide": name == "text",
        }
        for name, label, datalist, placeholder in spec
    ]


def _palette_values(*names: str) -> list[str]:
    found = set()
    for message in pg.PALETTE:
        for name in names:
            value = message.fields.get(name)
            if isinstance(value, list):
                found.update(value)
            elif value:
                found.add(value)
    return sorted(found)


def _playground_agents() -> tuple[dict[str, AgentRef], str]:
    """The personas by slug, and the default one's slug."""
    default = default_agent()
    agents = {
        slug: AgentRef(pk, slug, name, workspace)
        for pk, slug, name, workspace in Agent.objects.values_list(
            "pk", "slug", "name", "workspace"
        )
    }
    return agents, default.slug


def _playground_tool_set(owner, fired: pg.Fired) -> ToolSet:
    """The tool set the message's session would get: its persona's, for you or for other people."""
    agent = Agent.objects.filter(pk=fired.route.agent.id).first()
    if agent is None:  # a sandbox persona, made up here: it has the defaults
        agent = Agent(slug=fired.route.agent.slug)
    return tool_set(agent, for_strangers=someone_elses(owner=owner, inbound=fired.inbound))


def _playground_state(request: HtmxHttpRequest) -> pg.PlaygroundState:
    return pg.playground_load(request.session, dm_scope=gateway_config().dm_scope)


def _playground_page(
    request: HtmxHttpRequest,
    state: pg.PlaygroundState,
    *,
    status: int = 200,
    scope_error: pg.PlaygroundError | None = None,
    binding_error: pg.PlaygroundError | None = None,
    binding_values: dict | None = None,
    message_error: pg.PlaygroundError | None = None,
    message_values: dict | None = None,
) -> HttpResponse:
    agents, default_slug = _playground_agents()
    board = pg.playground_board(state=state, agents=agents, default_slug=default_slug)
    latest = board.latest
    context = {
        "board": board,
        "latest": latest,
        "latest_tools": _playground_tool_set(request.user, latest) if latest else None,
        "winner_id": latest.route.rule.binding_id if latest else None,
        "scopes": [(value, SCOPE_WORDS[value]) for value in DmScope.values],
        "scope_words": SCOPE_WORDS.get(state.dm_scope, ""),
        "gateway_scope": gateway_config().dm_scope,
        "shelves": pg.palette_shelves(),
        "scope_error": scope_error,
        "binding_error": binding_error,
        "binding_fields": _form_fields(BINDING_FORM, "pg-b", binding_values or {}, binding_error),
        "binding_field_names": [spec[0] for spec in BINDING_FORM],
        "message_error": message_error,
        "message_fields": _form_fields(MESSAGE_FORM, "pg-m", message_values or {}, message_error),
        "message_field_names": [spec[0] for spec in MESSAGE_FORM],
        "datalists": [
            {"id": "pg-agents", "values": sorted(agents)},
            {"id": "pg-channels", "values": _palette_values("channel")},
            {"id": "pg-peers", "values": _palette_values("peer", "group_id", "job_id")},
            {"id": "pg-teams", "values": _palette_values("team_id")},
            {"id": "pg-guilds", "values": _palette_values("guild_id")},
            {"id": "pg-roles", "values": _palette_values("member_roles")},
        ],
    }
    if request.htmx:
        context["oob"] = True
        html = "".join(
            render_to_string(f"{PLAYGROUND}#{region}", context, request=request)
            for region in PLAYGROUND_REGIONS
        )
        return HttpResponse(html, status=status)
    return render(request, PLAYGROUND, context, status=status)


def _playground_done(
    request: HtmxHttpRequest, state: pg.PlaygroundState, **refusal
) -> HttpResponse:
    """Save, then: the regions under HTMX, else back to the page (or the page with a 400)."""
    pg.playground_save(request.session, state)
    if refusal:
        return _playground_page(request, state, status=400, **refusal)
    if request.htmx:
        return _playground_page(request, state)
    return redirect("gateway:playground")


ERR_PLAYGROUND_NOT_YOURS = (
    "The routing playground is the owner's and staff's: it shows the install's personas "
    "and routing. Ask them."
)


def install_only(view):
    """A view for the install's owner and staff (chats/personas.py); 403 for anyone else."""

    @functools.wraps(view)
    def wrapped(request: HtmxHttpRequest, *args, **kwargs) -> HttpResponse:
        if not runs_the_install(request.user):
            return HttpResponse(ERR_PLAYGROUND_NOT_YOURS, status=403, content_type="text/plain")
        return view(request, *args, **kwargs)

    return wrapped


@login_required
@require_GET
@install_only
def playground(request: HtmxHttpRequest) -> HttpResponse:
    return _playground_page(request, _playground_state(request))


@login_required
@require_POST
@install_only
def playground_scope(request: HtmxHttpRequest) -> HttpResponse:
    state = _playground_state(request)
    form = PlaygroundScopeForm(request.POST)
    if not form.is_valid():
        return _playground_page(request, state, status=400, scope_error=first_error(form))
    pg.playground_set_scope(state=state, dm_scope=form.cleaned_data["dm_scope"])
    return _playground_done(request, state)


@login_required
@require_POST
@install_only
def playground_binding_add(request: HtmxHttpRequest) -> HttpResponse:
    state = _playground_state(request)
    form = PlaygroundBindingForm(request.POST)
    values = {name: request.POST.get(name, "") for name in form.fields}
    if not form.is_valid():
        return _playground_done(
            request, state, binding_error=first_error(form), binding_values=values
        )
    agents, _ = _playground_agents()
    try:
        pg.playground_binding_add(state=state, agents=agents, fields=form.cleaned_data)
    except pg.PlaygroundError as exc:
        return _playground_done(request, state, binding_error=exc, binding_values=values)
    return _playground_done(request, state)


@login_required
@require_POST
@install_only
def playground_binding_remove(request: HtmxHttpRequest, binding_id: int) -> HttpResponse:
    state = _playground_state(request)
    try:
        pg.playground_binding_remove(state=state, binding_id=binding_id)
    except pg.PlaygroundError as exc:
        return _playground_done(request, state, binding_error=exc)
    return _playground_done(request, state)


@login_required
@require_POST
@install_only
def playground_fire(request: HtmxHttpRequest) -> HttpResponse:
    state = _playground_state(request)
    agents, default_slug = _playground_agents()
    custom = None
    if "message" not in request.POST:  # not a palette button: a message of their own
        form = PlaygroundMessageForm(request.POST)
        if not form.is_valid():
            values = {name: request.POST.get(name, "") for name in form.fields}
            return _playground_done(
                request, state, message_error=first_error(form), message_values=values
            )
        custom = form.cleaned_data["inbound"]
    try:
        pg.playground_fire(
            state=state,
            agents=agents,
            default_slug=default_slug,
            palette_id=request.POST.get("message", ""),
            custom=custom,
        )
    except pg.PlaygroundError as exc:
        return _playground_done(request, state, message_error=exc)
    return _playground_done(request, state)


@login_required
@require_POST
@install_only
def playground_clear(request: HtmxHttpRequest) -> HttpResponse:
    state = _playground_state(request)
    pg.playground_clear(state=state, bindings=request.POST.get("what") == "everything")
    return _playground_done(request, state)


# ---------------------------------------------------------------------------
# Routines: the list, a new one, and each one's page

ROUTINES = "routines.html"
ROUTINE = "routine.html"
ROUTINE_REGIONS = ("rt-controls", "rt-times", "rt-runs")
RUNS_SHOWN = 20


def _routines_page(
    request: HtmxHttpRequest, form: RoutineForm, *, status: int = 200
) -> HttpResponse:
    routines = Routine.objects.filter(owner_id=request.user.pk).select_related("agent")
    return render(request, ROUTINES, {"routines": routines, "form": form}, status=status)


@login_required
@require_GET
def routines(request: HtmxHttpRequest) -> HttpResponse:
    return _routines_page(request, RoutineForm(owner=request.user))


@login_required
@require_POST
def routine_new(request: HtmxHttpRequest) -> HttpResponse:
    form = RoutineForm(request.POST, owner=request.user)
    if not form.is_valid():
        return _routines_page(request, form, status=400)
    fields = {name: form.cleaned_data[name] for name in form.Meta.fields}
    routine = routine_create(owner=request.user, **fields)
    return redirect("gateway:routine", public_id=routine.public_id)


def _routine_for(request: HtmxHttpRequest, public_id: str) -> Routine:
    """The person's own routine; anyone else's is not found."""
    return get_object_or_404(
        Routine.objects.select_related("agent", "target_chat"),
        public_id=public_id,
        owner=request.user,
    )


def _routine_context(routine: Routine) -> dict:
    runs = list(routine.runs.select_related("conversation")[:RUNS_SHOWN])
    zone = local_zone()
    return {
        "routine": routine,
        "next_times": routine_next_times(routine=routine, zone=zone) if not routine.paused else [],
        "zone": zone.key,
        "runs": runs,
        "running": any(run.state == RunState.RUNNING for run in runs),
    }


def _routine_answer(request: HtmxHttpRequest, routine: Routine) -> HttpResponse:
    """Under HTMX the page's regions, as out-of-band swaps; else back to the page."""
    if not request.htmx:
        return redirect("gateway:routine", public_id=routine.public_id)
    context = _routine_context(routine) | {"oob": True}
    html = "".join(
        render_to_string(f"{ROUTINE}#{region}", context, request=request)
        for region in ROUTINE_REGIONS
    )
    return HttpResponse(html)


@login_required
@require_GET
def routine_page(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    routine = _routine_for(request, public_id)
    return render(request, ROUTINE, _routine_context(routine))


@login_required
@require_GET
def routine_regions(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    """The history, polled while a run is running."""
    routine = _routine_for(request, public_id)
    return render(request, f"{ROUTINE}#rt-runs", _routine_context(routine))


@login_required
@require_POST
def routine_pause_view(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    routine = routine_pause(routine=_routine_for(request, public_id))
    return _routine_answer(request, routine)


@login_required
@require_POST
def routine_resume_view(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    routine = routine_resume(routine=_routine_for(request, public_id))
    return _routine_answer(request, routine)


@login_required
@require_POST
def routine_run_now_view(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    routine = _routine_for(request, public_id)
    routine_run_now(routine=routine)
    return _routine_answer(request, routine)
