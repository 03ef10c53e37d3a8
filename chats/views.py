"""Views: parse, check access through a named lookup, call one service, render."""

from __future__ import annotations

from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from chats.models import Conversation
from chats.signin import signin_token_redeem


@login_required
def home(request: HttpRequest) -> HttpResponse:
    chats = Conversation.objects.filter(owner=request.user).select_related("agent")[:200]
    return render(request, "home.html", {"chats": chats})


@require_GET
def signin(request: HttpRequest) -> HttpResponse:
    return render(request, "signin.html", {"failed": False})


@require_GET
def signin_token(request: HttpRequest, token: str) -> HttpResponse:
    user = signin_token_redeem(token=token)
    if user is None:
        return render(request, "signin.html", {"failed": True}, status=403)
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    return redirect("chats:home")
