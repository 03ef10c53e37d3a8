"""The person's presses on ADR 0134's cards: Pass it on, Dismiss, and each chat's inbound setting.

They live here, not in ``chats``, because they call ``together``'s services and
``chats`` never imports ``together``. They answer the way every action on a
chat's page does (chats/views.py): a plain POST redirects back to the chat;
under HTMX the chat's regions come back as out-of-band swaps.

Only the signed-in person's press does any of this: a session and its CSRF
token. No tool can reach these views, and the gateway's token is no session.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.views.decorators.http import require_GET, require_POST

from chats.limits import LIMITS
from chats.models import Conversation
from chats.runtime.chats import ConchError
from chats.views import get_chat_for_user, page_with, respond_done, respond_refused
from conch.http import HtmxHttpRequest, signed_in_id
from together.messages import held_message_dismiss, held_message_pass, inbound_set
from together.models import ChatMessage
from together.past import person_search

PRESSES = {"pass": held_message_pass, "dismiss": held_message_dismiss}
ERR_BAD_ACTION = "action must be “pass” (Pass it on) or “dismiss” (Dismiss)."


def _get_message_for_user(
    request: HtmxHttpRequest, public_id: str, message_id: str
) -> tuple[Conversation, ChatMessage]:
    """The signed-in person's chat and a message sent *to* it; otherwise 404, as if neither existed."""
    chat = get_chat_for_user(request, public_id)
    message = ChatMessage.objects.filter(message_id=message_id, receiver=chat).first()
    if message is None:
        raise Http404("No such message came to this chat.")
    return chat, message


@login_required
@require_POST
def message_press(request: HtmxHttpRequest, public_id: str, message_id: str) -> HttpResponse:
    """``POST /api/conversations/<id>/messages/<messageId>`` with ``action=pass|dismiss``."""
    chat, message = _get_message_for_user(request, public_id, message_id)
    press = PRESSES.get(request.POST.get("action", ""))
    if press is None:
        return respond_refused(request, chat, ERR_BAD_ACTION)
    try:
        press(message=message)
    except ConchError as exc:  # it isn't held any more: someone pressed first, or it was read
        return respond_refused(request, chat, str(exc), status=409)
    return respond_done(request, chat)


@login_required
@require_POST
def chat_inbound(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    """Messages from other chats: Let them in, Hold them for me, or Turn them away."""
    chat = get_chat_for_user(request, public_id)
    try:
        inbound_set(conversation=chat, inbound=request.POST.get("inbound", ""))
    except ConchError as exc:
        return respond_refused(request, chat, str(exc))
    return respond_done(request, chat)


@login_required
@require_GET
def search(request: HtmxHttpRequest) -> HttpResponse:
    """The sidebar's search box: the words of the person's own chats, on the full-text
    index ``search_chats`` uses. A plain GET page; under HTMX the same page, of which
    the box's form takes the main column."""
    query = request.GET.get("q", "")
    try:
        offset = max(0, int(request.GET.get("offset", "0")))
    except ValueError:
        offset = 0
    found = error = None
    if query.strip():
        try:
            found = person_search(
                owner_id=signed_in_id(request),
                query=query,
                offset=offset,
                limit=LIMITS.search_results_max,
            )
        except ConchError as exc:
            error = str(exc)
    return page_with(
        request,
        main="find/search.html",
        skip_to="the search results",
        query=query,
        found=found,
        search_error=error,
    )
