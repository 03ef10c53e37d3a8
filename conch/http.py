"""The request every view gets: django-htmx's middleware has set ``request.htmx`` on it."""

from __future__ import annotations

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """How views annotate their request, so ``request.htmx`` is typed (django-htmx's advice)."""

    htmx: HtmxDetails


def signed_in_id(request: HttpRequest) -> int:
    """The signed-in person's id, for views behind ``login_required``."""
    pk = request.user.pk
    assert pk is not None, "a view that needs the person is behind login_required"
    return pk
