"""CSRF that trusts only the server's own origin, with or without an Origin header.

Conch runs on loopback, where every other program's port is the same site:
a page on http://127.0.0.1 (port 80) can set Conch's CSRF cookie, since
cookies don't isolate ports, and post with the token it chose. So the token
alone proves nothing; the origin must. Django already refuses an Origin
other than ``scheme://Host`` (``CSRF_TRUSTED_ORIGINS`` is empty in
conch/settings.py). What it doesn't do over plain HTTP is look at the
Referer when there is no Origin: it trusts the token. Every browser Conch
supports sends an Origin on a POST, but one that doesn't could be led by
such a page, so an unsafe request without an Origin must carry a Referer
from Conch's own origin, or it is refused.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.core.exceptions import DisallowedHost
from django.middleware.csrf import CsrfViewMiddleware

REASON_NO_OWN_ORIGIN = "Origin checking failed - no Origin, and the Referer is not this site."
SAFE_METHODS = ("GET", "HEAD", "OPTIONS", "TRACE")


def _own_origin(request) -> str | None:
    try:
        host = request.get_host()
    except DisallowedHost:
        return None
    return f"{'https' if request.is_secure() else 'http'}://{host}"


def _referer_origin(request) -> str | None:
    referer = request.META.get("HTTP_REFERER")
    if not referer:
        return None
    try:
        parts = urlsplit(referer)
    except ValueError:
        return None
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"


class OwnOriginCsrfViewMiddleware(CsrfViewMiddleware):
    """Django's CSRF check, plus: no Origin means the Referer must be our own origin."""

    def process_view(self, request, callback, callback_args, callback_kwargs):
        if (
            request.method not in SAFE_METHODS
            and "HTTP_ORIGIN" not in request.META
            and not getattr(request, "csrf_processing_done", False)
            and not getattr(callback, "csrf_exempt", False)
            # The test client's switch for "no CSRF checks", honoured as Django does.
            and not getattr(request, "_dont_enforce_csrf_checks", False)
        ):
            own = _own_origin(request)
            if own is None or _referer_origin(request) != own:
                return self._reject(request, REASON_NO_OWN_ORIGIN)  # type: ignore[attr-defined]  # Django's own refusal; the stubs leave it out
        return super().process_view(request, callback, callback_args, callback_kwargs)
