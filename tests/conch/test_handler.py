"""Each request's sync work runs on a thread kept between requests (conch/handler.py): one
request at a time on a thread, its database connection kept as CONN_MAX_AGE says."""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from channels.testing import HttpCommunicator

from conch.handler import KeptThreadsASGIHandler
from tests.conch import kept_threads_urls

pytestmark = [pytest.mark.django_db(transaction=True)]

HEADERS = [(b"host", b"127.0.0.1")]


@pytest.fixture(autouse=True)
def urls(settings):
    settings.ROOT_URLCONF = "tests.conch.kept_threads_urls"
    kept_threads_urls.held.clear()
    kept_threads_urls.release.clear()
    yield
    kept_threads_urls.release.set()  # never leave a request held


async def get(handler, path: str) -> dict:
    communicator = HttpCommunicator(handler, "GET", path, headers=HEADERS)
    response = await communicator.get_response(timeout=10)
    assert response["status"] == 200, response
    return json.loads(response["body"])


async def test_the_next_request_runs_on_the_same_thread_with_the_same_connection():
    handler = KeptThreadsASGIHandler()
    first = await get(handler, "/where/")
    second = await get(handler, "/where/")
    assert first["thread"] != threading.get_ident()  # never on the event loop's thread
    assert second == first  # the thread kept, and its SQLite connection with it


async def test_requests_at_once_never_share_a_thread():
    handler = KeptThreadsASGIHandler()
    held = asyncio.ensure_future(get(handler, "/hold/"))
    assert await asyncio.to_thread(kept_threads_urls.held.wait, 10)
    meanwhile = await asyncio.wait_for(get(handler, "/where/"), 10)  # not behind the held one
    kept_threads_urls.release.set()
    assert (await held)["thread"] != meanwhile["thread"]
    assert len(handler._idle) == 2  # both kept for the next requests


async def test_past_the_kept_threads_a_request_gets_a_thread_of_its_own():
    handler = KeptThreadsASGIHandler(kept=1)
    held = asyncio.ensure_future(get(handler, "/hold/"))
    assert await asyncio.to_thread(kept_threads_urls.held.wait, 10)
    await get(handler, "/where/")
    kept_threads_urls.release.set()
    await held
    assert len(handler._idle) == 1


class CountingThread(ThreadPoolExecutor):
    """A kept thread that counts the hops to it."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.hops = 0

    def submit(self, *args, **kwargs):
        self.hops += 1
        return super().submit(*args, **kwargs)


async def test_a_request_goes_to_its_thread_once_for_its_middleware_and_view(monkeypatch):
    """Django's async chain sends every sync middleware to the thread and back twice a
    request (15 hops here, each a thread's wake-up and a pass of the GIL)."""
    thread = CountingThread()
    handler = KeptThreadsASGIHandler()
    monkeypatch.setattr(handler, "_thread", lambda: thread)
    await get(handler, "/where/")
    thread.hops = 0

    answer = await get(handler, "/where/")

    # The chain in one hop; the other is Django's own, around it (its request signals
    # and closing the response, which must run on the thread whose connection they close).
    assert thread.hops == 2
    assert answer["thread"] != threading.get_ident()


def test_every_view_is_sync_as_the_one_hop_chain_needs(settings):
    """An async view would run through async_to_sync on the request's thread, holding it
    for the whole await: the handler's sync chain is only right while every view is sync."""
    from django.urls import URLPattern, URLResolver, get_resolver

    settings.ROOT_URLCONF = "conch.urls"

    def views(patterns):
        for entry in patterns:
            if isinstance(entry, URLResolver):
                yield from views(entry.url_patterns)
            elif isinstance(entry, URLPattern):
                yield entry.lookup_str, entry.callback

    found = dict(views(get_resolver("conch.urls").url_patterns))
    assert len(found) > 20  # the app's views and the admin's, not an empty list
    assert [name for name, view in found.items() if asyncio.iscoroutinefunction(view)] == []
