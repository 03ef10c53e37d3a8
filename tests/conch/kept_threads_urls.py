"""A test-only URLconf: a view that says which thread and database connection served it,
and one that holds its request until the test lets it go."""

from __future__ import annotations

import threading

from django.db import connection
from django.http import JsonResponse
from django.urls import path

held = threading.Event()  # set: the holding view's request has reached the view
release = threading.Event()  # set: the test lets that request answer
HOLD_SECONDS = 10


def where(request):
    connection.ensure_connection()
    return JsonResponse({"thread": threading.get_ident(), "connection": id(connection.connection)})


def hold(request):
    held.set()
    release.wait(HOLD_SECONDS)
    return JsonResponse({"thread": threading.get_ident()})


urlpatterns = [path("where/", where), path("hold/", hold)]
