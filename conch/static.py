"""The static files, served in front of the app by ``conch serve`` with DEBUG off.

Django's ASGI static handler turns only Http404 into an answer. A path that
climbs out of the static folders (``/static/%2e%2e/secret_key``: the server
decodes it to ``..``) makes ``safe_join`` raise SuspiciousFileOperation,
which escaped as a 500. Here it is what it is to the person asking: no such
file.
"""

from __future__ import annotations

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.exceptions import SuspiciousOperation
from django.http import Http404

ERR_NO_SUCH_FILE = "No such static file."


class StaticFiles(ASGIStaticFilesHandler):
    """Django's ASGI static handler, answering 404 for a path outside the static folders."""

    def serve(self, request):
        try:
            return super().serve(request)
        except SuspiciousOperation:
            raise Http404(ERR_NO_SUCH_FILE) from None
