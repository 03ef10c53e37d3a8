"""The Content-Security-Policy, sent as a header on every response Django makes, the admin's too.

A ``<meta>`` tag can't say ``frame-ancestors`` (browsers ignore it there) and covers only
the pages that carry it; a header covers every page and every error, and is the one place
the policy is written. No page Conch serves needs an inline script or style, a frame, or
anything from another origin: htmx and the styles are ``static/``, the socket is this origin.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "object-src 'none'",
    )
)


class ContentSecurityPolicyMiddleware:
    """Adds :data:`CONTENT_SECURITY_POLICY` to every response; sync and async alike."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):
        if self.is_async:
            return self._acall(request)
        return _with_policy(self.get_response(request))

    async def _acall(self, request: HttpRequest):
        return _with_policy(await self.get_response(request))


def _with_policy(response: HttpResponseBase) -> HttpResponseBase:
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return response
