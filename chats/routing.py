"""The socket's route, behind an Origin check and a Host check.

A browser sends the session cookie to every port of 127.0.0.1 (cookies don't
isolate ports, and another port is the same site), so a page that any other
program serves on loopback could open the socket as the person and read every
chat. :class:`SameOriginValidator` (wrapped round the whole socket app in
conch/asgi.py) lets in only Conch's own origin; :class:`AllowedHostsValidator`
checks the Host header, as Django does for HTTP, so a DNS-rebinding page that
points evil.example at 127.0.0.1 can't open the socket either. Both refuse
before the handshake is accepted, which Daphne answers with a 403.
"""

from __future__ import annotations

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.urls import path

from chats import consumers


def _header(scope, name: bytes) -> str | None:
    """The header's one value; None if it is missing or sent more than once."""
    values = [value for key, value in scope.get("headers", []) if key == name]
    if len(values) != 1:
        return None
    return values[0].decode("latin1")


def own_origin(scope) -> str | None:
    """The origin this handshake reached: http(s)://<Host header>, as Django's CSRF
    check builds it for HTTP (``request.get_host()`` keeps the port)."""
    host = _header(scope, b"host")
    if not host:
        return None
    scheme = "https" if scope.get("scheme", "ws") == "wss" else "http"
    return f"{scheme}://{host}"


async def _deny(scope, receive, send):
    return await WebsocketDenier()(scope, receive, send)


class SameOriginValidator:
    """Refuse a WebSocket whose Origin isn't exactly the origin it reached.

    Scheme, host and port must all match, compared as strings the way
    Django's CSRF check compares an HTTP Origin: ``http://127.0.0.1:8000``
    reached at Host ``127.0.0.1:8000``. A page on another port or scheme, or
    under another of the loopback names, is refused.

    A handshake with no Origin (or two) is refused too. Every browser sends
    one on a WebSocket (RFC 6455 section 4.1), and Conch's only client is its
    own page; a program that sends none is not a browser showing Conch, and
    refusing it costs nothing.
    """

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        own = own_origin(scope)
        # A missing or doubled Origin is None, which is never our own origin.
        if own is None or _header(scope, b"origin") != own:
            return await _deny(scope, receive, send)
        return await self.application(scope, receive, send)


class AllowedHostsValidator:
    """Refuse a WebSocket whose Host header isn't in ``ALLOWED_HOSTS``."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        domain, _port = split_domain_port(_header(scope, b"host") or "")
        if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
            return await _deny(scope, receive, send)
        return await self.application(scope, receive, send)


websocket_urlpatterns = [
    path("ws/", AllowedHostsValidator(consumers.WorkspaceConsumer.as_asgi())),
]
