"""Django's ASGI handler, with each request's sync work on a thread kept between requests.

Django gives every request a thread-sensitive context of its own, and asgiref a new
thread for each one: a thread started and joined for every request, and with it a new
database connection, since connections are per thread (SQLite reads the whole schema
again at a connection's first statement: about 1 ms here, on every request that reads
anything). Here a request borrows a kept single-thread executor for its sync parts (its
middleware, a sync view, its response's close) and gives it back when it is answered:
one request at a time on a thread, as a WSGI server's threads serve requests, so a
request's transaction and connection stay on one thread as Django needs. The connection
lives as CONN_MAX_AGE says (``close_old_connections`` runs at each request's start and
end, on that thread, as ever): kept on SQLite, closed after each request on PostgreSQL.

And the middleware and the view run as one sync chain, in one hop to that thread. Django
builds an async chain for ASGI, and every sync middleware in it (all of Conch's are)
goes to the thread and back for its request half and again for its response half: 15
hops a request here, each a wake-up of a sleeping thread and a pass of the GIL, more
than a request's own work (a 401 at the gateway's door: 170 requests/s, 643 with one
hop). Conch's views are all sync, as they must stay: an async view would run through
async_to_sync on the request's thread, holding it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler

# Threads kept idle for the next requests; more requests at once than this get a thread
# of their own for the request, as Django gives each (started, then joined after).
KEPT_THREADS = 32


class KeptThreadsASGIHandler(ASGIHandler):
    def __init__(self, *, kept: int = KEPT_THREADS) -> None:
        super().__init__()
        self.kept = kept
        self._idle: list[ThreadPoolExecutor] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":  # as Django's own refuses it
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        # Only the event loop's thread takes and gives back: no lock needed.
        thread = self._idle.pop() if self._idle else self._thread()
        try:
            async with ThreadSensitiveContext(executor=thread):
                await self.handle(scope, receive, send)
        finally:
            if len(self._idle) < self.kept:
                self._idle.append(thread)
            else:
                thread.shutdown(wait=False)

    def load_middleware(self, is_async: bool = False) -> None:
        """The sync chain, whatever the caller asks (ASGIHandler asks for the async one)."""
        super().load_middleware(is_async=False)

    async def get_response_async(self, request):
        """The whole chain, middleware and view, in one hop to the request's thread."""
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)

    @staticmethod
    def _thread() -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="conch-request")
