"""Views: parse, check access through a named lookup, call one service, render.

Every page and action needs the sign-in. Actions are plain POSTs that
redirect, so the page works without JavaScript; under HTMX they answer with
the page's regions as out-of-band swaps instead (chats/regions.py renders
them, for the socket too). A refusal from a service is a 400 that shows its
message, and a refused message keeps its text in the composer.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import login, logout
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from chats import hooks, personas, regions
from chats.demo import demo_start_pending
from chats.engines.discovery import other_account_warning, servers_find, usual_ports
from chats.forms import ConnectModelForm, NewChatForm
from chats.models import Agent, Conversation
from chats.runtime import selectors
from chats.runtime.chats import (
    ConchError,
    conversation_archive,
    conversation_create,
    conversation_pin,
    conversation_rename,
    conversation_set_mode,
    default_agent,
    persona_for_new_chat,
)
from chats.runtime.connect import (
    ModelChoice,
    model_connect,
    model_connected,
    model_try,
)
from chats.runtime.standing import standing_ok_take_back
from chats.runtime.turns import (
    conversation_delete,
    conversation_stop,
    message_send,
    queued_input_cancel,
    reply_again,
    turn_approve,
    turn_deny,
)
from chats.signin import signin_token_redeem
from conch.http import HtmxHttpRequest, person_zone, signed_in_id

ERR_STALE_REQUEST = "That request has already been answered."


def get_chat_for_user(request: HtmxHttpRequest, public_id: str) -> Conversation:
    """The signed-in person's chat, or 404: someone else's chat does not exist for them.

    Public, with :func:`respond_done` and :func:`respond_refused`, for the views of
    apps built on ``chats`` (together/views.py) that act on a chat's page."""
    return get_object_or_404(
        Conversation.objects.select_related("agent"), public_id=public_id, owner=request.user
    )


def _new_chat_form(
    request: HtmxHttpRequest, data=None, *, persona: Agent | None = None
) -> NewChatForm:
    persona = persona or persona_for_new_chat(request.user)
    return NewChatForm(data, account=request.user, initial={"agent": persona and persona.pk})


def _page(
    request: HtmxHttpRequest,
    *,
    chat: Conversation | None = None,
    form: NewChatForm | None = None,
    status: int = 200,
    **extra,
) -> HttpResponse:
    context = regions.page_context(
        owner_id=signed_in_id(request), conversation=chat, zone=person_zone(request)
    )
    context["notices"] = _notices(request)
    if chat is None:
        persona = persona_for_new_chat(request.user)
        context["form"] = form or _new_chat_form(request, persona=persona)
        manages = personas.runs_the_install(request.user)
        context["default_agent"] = persona
        context["manages_models"] = manages
        context["no_persona"] = personas.ERR_NO_PERSONA
        # Whether any persona has a model; for another account, whether its own has.
        context["model_connected"] = (
            model_connected() if manages else bool(persona and persona.has_model)
        )
    context.update(extra)
    return render(request, regions.PAGE, context, status=status)


def _notices(request: HtmxHttpRequest) -> list[hooks.OwnerNotice]:
    """What the owner should know (the apps' notices), for the owner and staff alone."""
    return hooks.owner_notices() if personas.runs_the_install(request.user) else []


def page_with(
    request: HtmxHttpRequest, *, main: str, skip_to: str, status: int = 200, **extra
) -> HttpResponse:
    """The workspace with another view in its main column (``main``, a template): the
    archived chats, a search's results. The sidebar and its socket are the page's own."""
    context = regions.page_context(owner_id=signed_in_id(request), zone=person_zone(request))
    context.update(main=main, skip_to=skip_to, notices=_notices(request), **extra)
    return render(request, regions.PAGE, context, status=status)


def respond_done(request: HtmxHttpRequest, chat: Conversation) -> HttpResponse:
    """After an action: the fresh regions under HTMX, otherwise back to the chat."""
    if request.htmx:
        bundle = regions.render_chat_bundle(
            owner_id=signed_in_id(request), conversation=chat, zone=person_zone(request)
        )
        cleared = regions.render_error("flash", "") + regions.render_error("composer-error", "")
        return HttpResponse(bundle + cleared)
    return redirect("chats:chat", public_id=chat.public_id)


def respond_refused(
    request: HtmxHttpRequest,
    chat: Conversation,
    message: str,
    *,
    slot: str = "flash",
    draft: str = "",
    status: int = 400,
) -> HttpResponse:
    """A refusal, said where the person looks. A 409 (it changed meanwhile) also brings
    the chat's fresh regions under HTMX, so the page shows what it is now."""
    if request.htmx:
        fresh = ""
        if status == 409:
            bundle = regions.render_chat_bundle(
                owner_id=signed_in_id(request), conversation=chat, zone=person_zone(request)
            )
            fresh = bundle + "\n"
        return HttpResponse(fresh + regions.render_error(slot, message), status=status)
    extra: dict[str, Any] = (
        {"composer_error": message, "draft": draft} if slot == "composer-error" else {}
    )
    if slot == "flash":
        extra["flash"] = message
    return _page(request, chat=chat, status=status, **extra)


# ---------------------------------------------------------------------------
# Pages and regions


@login_required
@require_GET
def home(request: HtmxHttpRequest) -> HttpResponse:
    demo_start_pending()  # the demo's replies start as you first look
    return _page(request)


@login_required
@require_GET
def chat_detail(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    demo_start_pending()
    chat = get_chat_for_user(request, public_id)
    return _page(request, chat=chat)


@login_required
@require_GET
def chat_list(request: HtmxHttpRequest) -> HttpResponse:
    """The sidebar alone, for a page that missed events. Constant queries in the number of chats."""
    if not request.htmx:
        return redirect("chats:home")
    return HttpResponse(
        regions.render_list_bundle(owner_id=signed_in_id(request), zone=person_zone(request))
    )


@login_required
@require_GET
def archived(request: HtmxHttpRequest) -> HttpResponse:
    """The archived chats, which the sidebar leaves out, each with Unarchive."""
    rows = selectors.chat_archived_rows(owner_id=signed_in_id(request))
    return page_with(
        request, main="find/archived.html", skip_to="the archived chats", archived_rows=rows
    )


@login_required
@require_GET
def chat_regions(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    """A chat page's regions and the sidebar, for a page that missed events or reconnected."""
    chat = get_chat_for_user(request, public_id)
    if not request.htmx:
        return redirect("chats:chat", public_id=chat.public_id)
    return HttpResponse(
        regions.render_chat_bundle(
            owner_id=signed_in_id(request), conversation=chat, zone=person_zone(request)
        )
    )


# ---------------------------------------------------------------------------
# Actions


@login_required
@require_POST
def chat_create(request: HtmxHttpRequest) -> HttpResponse:
    form = _new_chat_form(request, request.POST)
    if not form.is_valid():
        return _page(request, form=form, status=400)
    try:
        chat = conversation_create(
            owner=request.user,
            title=form.cleaned_data["title"],
            folder=form.cleaned_data["folder"] or None,
            agent=form.cleaned_data["agent"],
            mode=form.cleaned_data["mode"],
        )
    except ConchError as exc:
        form.add_error(None, str(exc))
        return _page(request, form=form, status=400)
    url = reverse("chats:chat", kwargs={"public_id": chat.public_id})
    if request.htmx:
        return HttpResponse(status=204, headers={"HX-Redirect": url})
    return redirect(url)


@login_required
@require_POST
def chat_send(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    chat = get_chat_for_user(request, public_id)
    text = request.POST.get("text", "")
    try:
        message_send(conversation=chat, text=text)
    except ConchError as exc:
        return respond_refused(request, chat, str(exc), slot="composer-error", draft=text)
    return respond_done(request, chat)


@login_required
@require_POST
def chat_stop(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    chat = get_chat_for_user(request, public_id)
    conversation_stop(conversation=chat, by="person")
    return respond_done(request, chat)


@login_required
@require_POST
def chat_queued_cancel(request: HtmxHttpRequest, public_id: str, queued_id: int) -> HttpResponse:
    """Cancel a message still queued behind the running reply; a 409 if a reply took it."""
    chat = get_chat_for_user(request, public_id)
    try:
        queued_input_cancel(conversation=chat, queued_id=queued_id)
    except ConchError as exc:
        return respond_refused(request, chat, str(exc), status=409)
    return respond_done(request, chat)


def _again(request: HtmxHttpRequest, public_id: str, *, text: str | None) -> HttpResponse:
    chat = get_chat_for_user(request, public_id)
    try:
        turn_number = int(request.POST.get("turn", ""))
    except ValueError:
        return respond_refused(request, chat, ERR_STALE_REQUEST, status=409)
    try:
        reply_again(conversation=chat, turn_number=turn_number, text=text)
    except ConchError as exc:
        # An edit's refusal leaves the page as it is, so the edited words stay in their box.
        return respond_refused(request, chat, str(exc), status=409 if text is None else 400)
    return respond_done(request, chat)


@login_required
@require_POST
def chat_retry(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    """Write the last reply again; the one it replaces stays readable as an earlier version."""
    return _again(request, public_id, text=None)


@login_required
@require_POST
def chat_edit(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    """Send the person's last message again, edited, in place of it and its reply."""
    return _again(request, public_id, text=request.POST.get("text", ""))


def _pending_turn_for(chat: Conversation, request: HtmxHttpRequest):
    """The reply waiting for an OK, if it is the one the person's page showed."""
    turn = selectors.chat_pending_turn(conversation=chat)
    if turn is None or request.POST.get("turn") != str(turn.number):
        raise ConchError(ERR_STALE_REQUEST)
    return turn


@login_required
@require_POST
def chat_approve(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    """Approve; with ``always``, and don't ask again in this chat (chats/runtime/standing.py)."""
    chat = get_chat_for_user(request, public_id)
    try:
        turn_approve(
            turn=_pending_turn_for(chat, request), always=request.POST.get("always") == "1"
        )
    except ConchError as exc:
        return respond_refused(request, chat, str(exc))
    return respond_done(request, chat)


@login_required
@require_POST
def chat_deny(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    """Deny, with the person's reason if they gave one: the model reads it."""
    chat = get_chat_for_user(request, public_id)
    try:
        turn_deny(turn=_pending_turn_for(chat, request), reason=request.POST.get("reason", ""))
    except ConchError as exc:
        return respond_refused(request, chat, str(exc))
    return respond_done(request, chat)


@login_required
@require_POST
def chat_allowed_take_back(request: HtmxHttpRequest, public_id: str, ok_id: int) -> HttpResponse:
    """Take back one of the chat's standing OKs: it asks again from its next step."""
    chat = get_chat_for_user(request, public_id)
    standing_ok_take_back(conversation=chat, ok_id=ok_id)
    return respond_done(request, chat)


@login_required
@require_POST
def chat_mode(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    chat = get_chat_for_user(request, public_id)
    try:
        conversation_set_mode(conversation=chat, mode=request.POST.get("mode", ""))
    except ConchError as exc:
        return respond_refused(request, chat, str(exc))
    return respond_done(request, chat)


@login_required
@require_POST
def chat_rename(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    chat = get_chat_for_user(request, public_id)
    try:
        conversation_rename(conversation=chat, title=request.POST.get("title", ""))
    except ConchError as exc:
        return respond_refused(request, chat, str(exc))
    return respond_done(request, chat)


@login_required
@require_POST
def chat_archive(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    chat = get_chat_for_user(request, public_id)
    archived = request.POST.get("archived", "1") != "0"
    conversation_archive(conversation=chat, archived=archived)
    return respond_done(request, chat)


@login_required
@require_POST
def chat_pin(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    """Pin (``pinned=1``) or unpin (``pinned=0``) the chat: it sorts first in the list."""
    chat = get_chat_for_user(request, public_id)
    conversation_pin(conversation=chat, pinned=request.POST.get("pinned", "1") != "0")
    return respond_done(request, chat)


@login_required
@require_POST
def chat_delete(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    chat = get_chat_for_user(request, public_id)
    conversation_delete(conversation=chat)
    home = reverse("chats:home")
    if request.htmx:
        return HttpResponse(status=204, headers={"HX-Redirect": home})
    return redirect(home)


# ---------------------------------------------------------------------------
# Connect a model


def _connect_page(
    request: HtmxHttpRequest,
    form: ConnectModelForm,
    *,
    result=None,
    warning: str = "",
    status: int = 200,
) -> HttpResponse:
    context = {"form": form, "result": result, "agent": default_agent(), "warning": warning}
    if request.htmx and request.method == "POST":
        # Only the result swaps in: the fields keep what was typed, the key included.
        return render(request, "connect.html#connect-result", context, status=status)
    context["servers"] = servers_find()
    context["ports"] = usual_ports().items()
    return render(request, "connect.html", context, status=status)


SAVE_ANYWAY = "save-anyway"  # Save pressed again, once told the context is too small
ERR_NOT_YOURS_TO_CONNECT = (
    "Only the owner or staff connect models: the model a persona answers with is the "
    "whole install's, and its tools run as the owner. Ask them."
)


def _models_refused(request: HtmxHttpRequest) -> HttpResponse | None:
    """Who may see and change personas' models: the install's owner and staff."""
    if personas.runs_the_install(request.user):
        return None
    return HttpResponse(ERR_NOT_YOURS_TO_CONNECT, status=403, content_type="text/plain")


@login_required
@require_GET
def connect(request: HtmxHttpRequest) -> HttpResponse:
    """Connect a model: the servers found on this computer, and a form for any other."""
    refused = _models_refused(request)
    if refused is not None:
        return refused
    agent = default_agent()
    config = (
        agent.engine_config if agent.has_model and isinstance(agent.engine_config, dict) else {}
    )
    initial = {
        "base_url": request.GET.get("base_url") or config.get("base_url", ""),
        "model": request.GET.get("model") or config.get("model", ""),
    }
    return _connect_page(request, ConnectModelForm(initial=initial))


@login_required
@require_POST
def connect_post(request: HtmxHttpRequest) -> HttpResponse:
    """Test connection, or Save: Save tries the model again and saves only if it answered."""
    refused = _models_refused(request)
    if refused is not None:
        return refused
    form = ConnectModelForm(request.POST)
    if not form.is_valid():
        return _connect_page(request, form, status=400)
    choice = ModelChoice(
        base_url=form.cleaned_data["base_url"],
        model=form.cleaned_data["model"],
        key=form.cleaned_data["key"],
    )
    result = model_try(choice=choice)
    if not result.ok:
        return _connect_page(request, form, result=result, status=400)
    # Another account's server on a usual port: said plainly, and saved only when trusted.
    warning = other_account_warning(choice.base_url)
    action = request.POST.get("action")
    if action not in ("save", SAVE_ANYWAY):
        return _connect_page(request, form, result=result, warning=warning)
    if warning and request.POST.get("trust_other_account") != "yes":
        return _connect_page(request, form, result=result, warning=warning, status=400)
    # A context too small to work in: said plainly, and saved only when asked twice.
    if result.too_small and action != SAVE_ANYWAY:
        return _connect_page(request, form, result=result, warning=warning, status=400)
    model_connect(choice=choice)
    home = reverse("chats:home")
    if request.htmx:
        return HttpResponse(status=204, headers={"HX-Redirect": home})
    return redirect(home)


# ---------------------------------------------------------------------------
# Sign-in and sign-out


@require_GET
def signin(request: HtmxHttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect("chats:home")
    return render(request, "signin.html", {"failed": False})


@require_GET
def signin_token(request: HtmxHttpRequest, token: str) -> HttpResponse:
    user = signin_token_redeem(token=token)
    if user is None:
        if request.user.is_authenticated:
            # A used link opened again (from history, a bookmark): you're in already.
            return redirect("chats:home")
        return render(request, "signin.html", {"failed": True}, status=403)
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    return redirect("chats:home")


@require_POST
def signout(request: HtmxHttpRequest) -> HttpResponse:
    """Sign out: the session is deleted, and with it every socket it opened (chats/signout.py)."""
    logout(request)
    return redirect("chats:signin")
