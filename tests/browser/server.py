"""A Conch server for the browser tests: Daphne on loopback with the embedded runner.

It runs the way ``conch serve`` does (the ASGI app behind the static-files
handler, the runner started before the first request, the runner's sends
handed to the reactor's loop) against the database the test process set up.
It prints ``listening <port>`` once the port is bound.

    python -m tests.browser.server --port 0 --websocket-timeout 2 [--no-runner]
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--websocket-timeout", type=int, default=None)
    parser.add_argument("--no-runner", action="store_true")
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conch.settings")
    import django

    django.setup()  # the "daphne" app installs Twisted's asyncio reactor

    from daphne.server import Server
    from django.conf import settings
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
    from twisted.internet import reactor

    from chats import events
    from chats.runtime.runner import start_embedded_runner
    from conch.asgi import application

    class TestServer(Server):
        def listen_success(self, port):
            super().listen_success(port)
            print(f"listening {self.listening_addresses[-1][1]}", flush=True)

    timeout = args.websocket_timeout
    server = TestServer(
        application=ASGIStaticFilesHandler(application),
        endpoints=[f"tcp:port={args.port}:interface=127.0.0.1"],
        signal_handlers=True,
        websocket_timeout=settings.CONCH_WEBSOCKET_TIMEOUT if timeout is None else timeout,
        verbosity=0,
    )
    events.bind_loop(reactor._asyncioEventloop)
    runner = None if args.no_runner else start_embedded_runner()
    try:
        server.run()
    finally:
        if runner is not None:
            runner.stop(timeout=2)
    sys.exit(0)


if __name__ == "__main__":
    main()
