"""The socket's route, behind a Host check.

``AllowedHostsOriginValidator`` (in conch/asgi.py) checks the Origin; this
checks the Host header too, as Django does for HTTP, so a DNS-rebinding page
that points evil.example at 127.0.0.1 can't open the socket either.
"""

from __future__ import annotations

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.urls import path

from chats import consumers


def _host(scope) -> str:
    for name, value in scope.get("headers", []):
        if name == b"host":
            return value.decode("latin1")
    return ""


class AllowedHostsValidator:
    """Refuse a WebSocket whose Host header isn't in ``ALLOWED_HOSTS``."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        domain, _port = split_domain_port(_host(scope))
        if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
            denier = WebsocketDenier()
            return await denier(scope, receive, send)
        return await self.application(scope, receive, send)


websocket_urlpatterns = [
    path("ws/", AllowedHostsValidator(consumers.WorkspaceConsumer.as_asgi())),
]
