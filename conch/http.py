"""The request every view gets: django-htmx's middleware has set ``request.htmx`` on it."""

from __future__ import annotations

import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
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


# The browser's own time zone, as conch.js reads it (Intl) and leaves it for the server.
TIME_ZONE_COOKIE = "conch_tz"
_ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+){0,3}")


def person_zone(request: HttpRequest) -> ZoneInfo:
    """The time zone of the person's browser, whose days the chat list is grouped by."""
    return zone_named(request.COOKIES.get(TIME_ZONE_COOKIE, ""))


def zone_named(name: str) -> ZoneInfo:
    """The time zone of this name, as the browser left it in its cookie (the page's
    requests and its socket's handshake carry the same one).

    Only a name the tz database knows is taken; anything else (a cookie someone wrote
    by hand, a browser that says nothing) is Conch's own, ``CONCH_TIME_ZONE``."""
    name = str(name or "")
    if len(name) <= 64 and _ZONE_NAME.fullmatch(name):
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return ZoneInfo(settings.TIME_ZONE)
