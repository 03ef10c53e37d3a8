"""A server another account on this computer runs on a usual port.

Another local user who binds 11434 first was listed as a model, and choosing it handed
that user every chat's words and, through its answers, the tools. The page now says which
account runs each server it finds (the socket's owner in /proc/net/tcp*), and Save warns
plainly and saves only when the person says they trust that account.

The squatter is a real server run by ``nobody``, so these tests need root, as CI runs.
"""

from __future__ import annotations

import html
import os
import pwd
import subprocess

import pytest

from chats.engines.discovery import listener_uid, servers_find
from chats.engines.openai_compat import ConnectionResult
from chats.models import Agent
from chats.runtime.chats import default_agent
from tests.loopback_model import LoopbackModel

pytestmark = pytest.mark.django_db

SQUATTER = r"""
import json
from http.server import BaseHTTPRequestHandler, HTTPServer

class Models(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "squatter:1b", "object": "model"}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

server = HTTPServer(("127.0.0.1", 0), Models)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.fixture
def squatter(settings):
    if os.geteuid() != 0:
        pytest.skip("running a server as another account needs root (CI runs as root)")
    squatting = subprocess.Popen(
        ["/usr/bin/python3", "-c", SQUATTER],
        user="nobody",
        cwd="/",
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(squatting.stdout.readline())
        settings.CONCH_MODEL_PORTS = (port,)
        yield port
    finally:
        squatting.kill()
        squatting.wait()


def test_the_socket_table_names_the_account_that_listens(squatter):
    assert listener_uid(squatter) == pwd.getpwnam("nobody").pw_uid
    [found] = servers_find({squatter: "Ollama"})
    assert (found.account, found.yours, found.models) == ("nobody", False, ("squatter:1b",))


def test_a_server_of_your_own_is_yours(settings):
    with LoopbackModel(["mine:7b"]) as own:
        [found] = servers_find({own.port: "Ollama"})
    assert found.yours and found.account == pwd.getpwuid(os.geteuid()).pw_name


def test_the_page_says_plainly_whose_server_it_is(signed_in, squatter):
    page = html.unescape(signed_in.get("/connect/").content.decode())
    assert f"127.0.0.1:{squatter}/v1" in page and "run by nobody" in page
    assert "Run by another account on this computer, nobody" in page


@pytest.fixture
def answers(monkeypatch):
    """The squatter lists models and answers nothing else: its try is taken as answered."""
    monkeypatch.setattr(
        "chats.views.model_try", lambda choice: ConnectionResult(True, "It answered.")
    )


def test_save_warns_and_saves_nothing_until_the_person_trusts_that_account(
    signed_in, squatter, answers
):
    url = f"http://127.0.0.1:{squatter}/v1"
    data = {"base_url": url, "model": "squatter:1b", "key": "", "action": "save"}
    refused = signed_in.post("/connect/try/", data)
    assert refused.status_code == 400
    said = html.unescape(refused.content.decode())
    assert "is run by another account on this computer, nobody" in said
    assert default_agent().engine_config.get("base_url") != url
    trusted = signed_in.post("/connect/try/", {**data, "trust_other_account": "yes"})
    assert trusted.status_code == 302
    assert Agent.objects.get(pk=default_agent().pk).engine_config["base_url"] == url


def test_save_anyway_answers_the_context_alone_not_whose_server_it_is(
    signed_in, squatter, monkeypatch
):
    # A model with too little context, on another account's server: Save anyway says yes
    # to the first, never to the second.
    monkeypatch.setattr(
        "chats.views.model_try",
        lambda choice: ConnectionResult(True, "It answered.", too_small="Too small to work in."),
    )
    url = f"http://127.0.0.1:{squatter}/v1"
    data = {"base_url": url, "model": "squatter:1b", "key": "", "action": "save-anyway"}
    refused = signed_in.post("/connect/try/", data)
    assert refused.status_code == 400
    assert "is run by another account on this computer, nobody" in html.unescape(
        refused.content.decode()
    )
    assert default_agent().engine_config.get("base_url") != url
    trusted = signed_in.post("/connect/try/", {**data, "trust_other_account": "yes"})
    assert trusted.status_code == 302
    assert Agent.objects.get(pk=default_agent().pk).engine_config["base_url"] == url
