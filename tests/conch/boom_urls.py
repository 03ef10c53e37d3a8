"""A test-only URLconf: Conch's own, plus one view that fails as a bug would."""

from __future__ import annotations

from django.urls import include, path

MARKER = "an-unhandled-failure-f3b1"


def boom(request):
    raise RuntimeError(MARKER)


urlpatterns = [
    path("boom/", boom),
    path("", include("conch.urls")),
]
