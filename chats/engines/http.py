"""The HTTP clients the engines talk to model servers with, on one TLS context.

An ``httpx.Client`` makes a TLS context of its own unless it is given one, and making
one loads the whole CA bundle: 10-20 ms of CPU with the GIL held, on every model call
of every reply (the engines make a client per call), even to a plain ``http://``
loopback server. In a busy server that was a stall for every request and push in
flight (14% of the server's CPU under load, in ``ssl.create_default_context``).
The context is made once, the way httpx makes its default one (certifi's bundle, or
``SSL_CERT_FILE``/``SSL_CERT_DIR``), and shared: an ``SSLContext`` may wrap many
sockets from many threads at once.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's one TLS context for model servers, made when first needed."""
    return httpx.create_ssl_context()


def http_client(**options: Any) -> httpx.Client:
    """An ``httpx.Client`` with these options, on :func:`tls_context`."""
    return httpx.Client(verify=tls_context(), **options)
