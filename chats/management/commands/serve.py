"""``conch serve``: migrate, print a one-time sign-in link, start the runner, run Daphne.

Daphne sends no lifespan event, so the runner that executes replies starts
here, before the server takes its first request, and stops when the server
does (Ctrl-C or SIGTERM), ending the commands its replies are running. Static
files are served by Django's ASGI static handler in front of the app
(:class:`conch.static.StaticFiles`), so ``/static/`` works with DEBUG off and
nothing needs collecting.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable

from daphne.server import Server  # first of Twisted in this process: the reactor is asyncio
from django.conf import settings
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from chats import engines
from chats.engines.discovery import LOOPBACK_HOSTS
from chats.forms import base_url_clean
from conch import collector

log = logging.getLogger(__name__)

ERR_HOST = (
    "--host must be a loopback address ({allowed}): Conch answers only on this machine "
    "(got {host!r})."
)
ERR_LISTEN = "Could not listen on {host}:{port}. Is another Conch (or anything) using that port?"
ERR_MODEL_URL = "--model (or CONCH_MODEL_URL): {why}"
ERR_MODEL_DOWN = (
    "--model (or CONCH_MODEL_URL): {why} Conch needs the server to list its models, "
    "or CONCH_MODEL to name one."
)
ERR_MODEL_WHICH = (
    "The server at {url} serves several models ({models}); name one with CONCH_MODEL, "
    "such as CONCH_MODEL={first}."
)
ERR_MODEL_MISSING = "The server at {url} has no model called “{model}”; it serves {models}."


def port_number(value: str) -> int:
    """argparse type for --port: 1 to 65535, or 0 for any free port."""
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 1 to 65535 (got {value!r})"
        ) from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"must be from 1 to 65535, or 0 for any free port (got {port})"
        )
    return port


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def endpoint(host: str, port: int) -> str:
    """A Twisted endpoint string; colons in an IPv6 address are escaped."""
    return f"tcp:port={port}:interface={host.replace(':', chr(92) + ':')}"


class Command(BaseCommand):
    help = "Run Conch on this machine: the web server and the runner that plays replies."

    requires_system_checks = []  # run below, after the arguments are known to be good
    requires_migrations_checks = False

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--host",
            default="127.0.0.1",
            help=f"Loopback address to listen on: {', '.join(LOOPBACK_HOSTS)} (default 127.0.0.1).",
        )
        parser.add_argument(
            "--port",
            type=port_number,
            default=8000,
            help="Port to listen on (default 8000; 0 picks a free one).",
        )
        parser.add_argument(
            "--model",
            metavar="URL",
            default="",
            help="Make the default persona answer with the model server at URL (an "
            "OpenAI-compatible API, such as http://127.0.0.1:11434/v1); CONCH_MODEL names "
            "the model if the server has several. Default: CONCH_MODEL_URL.",
        )
        parser.add_argument(
            "--demo",
            action="store_true",
            help="Load the demo chats (manage.py conch_demo) before serving.",
        )

    def handle(self, *args, host: str, port: int, demo: bool, model: str = "", **options) -> None:
        host = host.strip().strip("[]")
        if host not in LOOPBACK_HOSTS:
            raise CommandError(ERR_HOST.format(allowed=", ".join(LOOPBACK_HOSTS), host=host))
        model_url = (model or settings.CONCH_MODEL_URL).strip()
        if model_url:
            try:
                model_url = base_url_clean(model_url)
            except ValueError as exc:
                raise CommandError(ERR_MODEL_URL.format(why=exc)) from None

        self.check()
        call_command("migrate", interactive=False, verbosity=0)

        from chats.signin import owner_ensure, signin_link_create

        owner = owner_ensure()
        if demo:
            self._demo()
        if model_url:
            self._model(model_url, settings.CONCH_MODEL)
        token = signin_link_create(user=owner)
        # On the embedded SQLite this is the only runner; on a shared database
        # (DATABASE_URL) workers and other servers may be mid-reply right now.
        lone = connection.vendor == "sqlite"
        connection.close()  # the main thread's connection would idle for the server's life

        from twisted.internet import reactor

        from chats import events
        from chats.runtime.runner import start_embedded_runner
        from conch.asgi import application
        from conch.static import StaticFiles

        server = ConchServer(
            application=StaticFiles(application),
            endpoints=[endpoint(host, port)],
            signal_handlers=True,  # SIGINT and SIGTERM stop the reactor; we stop the runner after
            websocket_timeout=settings.CONCH_WEBSOCKET_TIMEOUT,
            verbosity=0,
        )
        server.on_listening = lambda bound_port: self._announce(host, bound_port, token)

        # Runner threads hand their channel-layer sends to the server's loop.
        events.bind_loop(reactor._asyncioEventloop)
        runner = start_embedded_runner(lone=lone)
        self.stdout.write(f"Runner {runner.name} started with {runner.threads} threads.")
        # Daphne listens (and the link is printed) before its reactor runs; the rest of
        # start-up takes a moment (most of a second here, more on a busy machine), so it
        # is done once the reactor runs, its signal handlers set, before the first request.
        reactor.callWhenRunning(_start_up_done)
        try:
            server.run()
        finally:
            self.stdout.write("Stopping the runner…")
            runner.stop()
            self.stdout.write("Conch stopped.")
        if not server.listening_addresses:
            raise CommandError(ERR_LISTEN.format(host=url_host(host), port=port))

    def _demo(self) -> None:
        if "conch_demo" in get_commands():
            call_command("conch_demo", serving=True)
            self.stdout.write("Demo chats loaded.")
        else:
            self.stdout.write(
                "Note: this Conch has no conch_demo command, so --demo loaded nothing."
            )

    def _model(self, url: str, name: str) -> None:
        """Make the default persona answer with ``name`` (or the server's one model) at ``url``."""
        from chats.engines.base import EngineError
        from chats.engines.discovery import models_list
        from chats.runtime.connect import ModelChoice, model_connect

        try:
            served = models_list(url)
        except EngineError as exc:
            if not name:
                raise CommandError(ERR_MODEL_DOWN.format(why=exc)) from None
            self.stdout.write(f"Note: {exc} Conch will ask it for “{name}” when a chat needs it.")
            served = ()
        listed = ", ".join(served[:8]) + (", …" if len(served) > 8 else "")
        if not name:
            if len(served) > 1:
                raise CommandError(ERR_MODEL_WHICH.format(url=url, models=listed, first=served[0]))
            name = served[0]
        elif served and name not in served:
            raise CommandError(ERR_MODEL_MISSING.format(url=url, model=name, models=listed))
        agent = model_connect(choice=ModelChoice(base_url=url, model=name))
        self.stdout.write(
            f"{agent.name}, every new chat's persona, answers with “{name}” at {url}."
        )

    def _announce(self, host: str, port: int, token: str) -> None:
        from chats.signin import server_url_note

        base = f"http://{url_host(host)}:{port}"
        server_url_note(base)  # for `conch signin`
        self.stdout.write("")
        self.stdout.write(f"Conch is running at {base}/")
        self.stdout.write("Open this link to sign in (it works once, for 12 hours):")
        self.stdout.write(f"    {base}/signin/{token}/")
        self.stdout.write(f"The admin is at {base}/admin/")
        self.stdout.write("For another link while this runs: conch signin")
        self.stdout.write("Press Ctrl-C to stop.")
        self.stdout.flush()


class ConchServer(Server):
    """Daphne's server, telling us once it really listens, so the link has the real port."""

    on_listening: Callable[[int], None] | None = None

    def listen_success(self, port):
        super().listen_success(port)
        if self.on_listening and self.listening_addresses:
            self.on_listening(self.listening_addresses[-1][1])


def _start_up_done() -> None:
    engines.preload()  # the model SDK, imported now so that settle() freezes it too
    collector.settle()  # start-up is done: full collections walk only what comes after
