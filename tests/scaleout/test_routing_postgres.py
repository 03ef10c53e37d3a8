"""A binding changed by another process is seen by the next message, in place, on PostgreSQL.

Two child processes share one PostgreSQL database: a "server" that keeps its routing
index across messages (posting through Django's test client), and an admin process
that adds, then deletes, a binding. The server never asks for the routing version by
a query of its own: it rides on the session lookup. Each change must route the very
next message, and the server's index must be the same object, caught up in place.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.scaleout.processes import MANAGE, REPO, manage_ok, process_env

pytestmark = pytest.mark.scaleout

SETUP = r"""
from django.contrib.auth import get_user_model
from chats.gateway.services import gateway_token_rotate
from chats.models import Agent

owner = get_user_model().objects.create(username="owner", is_superuser=True)
Agent.objects.create(slug="main", name="Conch", workspace="/tmp", is_default=True)
Agent.objects.create(slug="work", name="Work", workspace="/tmp")
print("TOKEN " + gateway_token_rotate(owner=owner))
"""

SERVER = r"""
import json, sys
from django.test import Client
from chats.gateway import routing

client = Client(HTTP_HOST="127.0.0.1")
token = sys.stdin.readline().strip()
first = None
for n, line in enumerate(sys.stdin):
    response = client.post(
        "/gateway/inbound",
        json.dumps({"channel": "telegram", "chat_type": "dm", "peer": line.strip(),
                    "message_id": f"m{n}", "text": "hi"}),
        content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    index = routing.route_index()
    first = first or index
    print("RESULT " + json.dumps({"status": response.status_code,
                                  "agent": response.json().get("agent"),
                                  "same_index": index is first,
                                  "version": index.version}), flush=True)
"""

ADD = r"""
from chats.gateway.models import Binding
from chats.models import Agent
Binding.objects.create(agent=Agent.objects.get(slug="work"), channel="telegram", peer="zed",
                       peer_kind="direct")
"""

DELETE = r"""
from chats.gateway.models import Binding
Binding.objects.get(peer="zed").delete()
"""


def test_a_binding_added_and_deleted_elsewhere_routes_the_next_message_in_place(scaleout, tmp_path):
    env = scaleout.env
    setup = manage_ok("shell", "-c", SETUP, env=env, timeout=120)
    token = next(line for line in setup.stdout.splitlines() if line.startswith("TOKEN "))
    server = subprocess.Popen(
        [sys.executable, str(MANAGE), "shell", "-c", SERVER],
        cwd=REPO,
        env=process_env(tmp_path / "server", **{k: v for k, v in env.items() if k != "CONCH_HOME"}),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None

    def message(peer: str) -> dict:
        server.stdin.write(peer + "\n")
        server.stdin.flush()
        for line in server.stdout:
            if line.startswith("RESULT "):
                return json.loads(line.removeprefix("RESULT "))
        raise AssertionError(f"the server process ended: {server.stderr.read()}")

    try:
        server.stdin.write(token.removeprefix("TOKEN ") + "\n")
        before = message("zed")
        manage_ok("shell", "-c", ADD, env=env, timeout=120)
        added = message("zed")
        manage_ok("shell", "-c", DELETE, env=env, timeout=120)
        deleted = message("zed")
    finally:
        server.stdin.close()
        server.wait(60)

    assert [r["status"] for r in (before, added, deleted)] == [202, 202, 202]
    assert [r["agent"] for r in (before, added, deleted)] == ["main", "work", "main"]
    assert added["same_index"] and deleted["same_index"]  # caught up in place, never reloaded
    assert before["version"] < added["version"] < deleted["version"]
