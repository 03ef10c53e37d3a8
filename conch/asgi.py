"""ASGI entry point: HTTP through Django, WebSockets through Channels.

``get_asgi_application()`` must run before anything imports models, so the
routing import comes after it. The socket's Origin and Host checks are
described in chats/routing.py; the body cap in conch/bodylimit.py.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conch.settings")
django.setup(set_prefix=False)  # what get_asgi_application() does, before its handler

from conch.handler import KeptThreadsASGIHandler  # noqa: E402

# Django's handler, with each request's sync work on a thread kept between requests.
django_asgi_app = KeptThreadsASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from chats.routing import SameOriginValidator, websocket_urlpatterns  # noqa: E402
from conch.bodylimit import BodyLimit  # noqa: E402

application = ProtocolTypeRouter(
    {
        # A body over the cap is refused as it arrives, before Django spools it to disk.
        "http": BodyLimit(django_asgi_app),
        # Outermost, so a foreign page's handshake is refused before its cookie is read.
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
