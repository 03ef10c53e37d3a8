"""A message's session lookup on the real PostgreSQL: the written-out statement holds the
chat's row lock for the rest of the message's transaction, and says who the owner is as
the ORM's query does.

On SQLite a message's transaction takes the database's write lock at its start
(IMMEDIATE), so only PostgreSQL can show the row lock is there. A child ``manage.py
shell`` makes the session through the door, then looks it up inside a transaction
while a second connection tries to lock the same row without waiting.

And two messages to one session at once start one reply and queue the other, and a
server on PostgreSQL and Redis stops on SIGTERM while messages are coming in.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.scaleout.processes import MANAGE, REPO, UNLIMITED, manage_ok, stopped_under_load

pytestmark = pytest.mark.scaleout

SCRIPT = r"""
import json
import os

import psycopg
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import Client

from chats.gateway.inbound import inbound_parse
from chats.gateway.models import OwnerIdentity
from chats.gateway.routing import route_index
from chats.gateway.selectors import is_owner_peer, session_for_inbound
from chats.gateway.services import gateway_token_rotate
from chats.models import Agent, Conversation

owner = get_user_model().objects.create(username="owner", is_superuser=True)
Agent.objects.create(slug="main", name="Conch", workspace="/tmp", is_default=True)
token = gateway_token_rotate(owner=owner)
client = Client(HTTP_HOST="127.0.0.1", raise_request_exception=True)


def fields(n, **more):
    return {"channel": "telegram", "chat_type": "dm", "peer": "alice", "message_id": str(n),
            "text": "hello", **more}


answered = client.post("/gateway/inbound", json.dumps(fields(1)), content_type="application/json",
                       HTTP_AUTHORIZATION=f"Bearer {token}").status_code
chat = Conversation.objects.get()
other = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)


def lock_now(strength):
    try:
        other.execute(f"SELECT id FROM chats_conversation WHERE id = %s FOR {strength} NOWAIT",
                      [chat.pk])
        return "free"
    except psycopg.errors.LockNotAvailable:
        return "locked"


def look(message):
    route = route_index().resolve(message)
    return session_for_inbound(agent_id=route.agent.id, session_key=route.session_key,
                               owner=owner, inbound=message)


before = lock_now("UPDATE")
with transaction.atomic():
    found = look(inbound_parse(fields(2)))
    during = [lock_now("NO KEY UPDATE"), lock_now("KEY SHARE")]
after = lock_now("UPDATE")

owner_said = []
for stored in (("Telegram", "", "alice"), ("telegram", "bot2", "alice"), ("telegram", "", "bob")):
    OwnerIdentity.objects.all().delete()
    OwnerIdentity.objects.create(owner=owner, channel=stored[0], account_id=stored[1],
                                 peer=stored[2])
    with transaction.atomic():
        said = look(inbound_parse(fields(3))).from_owner
    asked = is_owner_peer(owner=owner, channel="telegram", account_id="default", peer="alice")
    owner_said.append([said, asked])
print("RESULT " + json.dumps({
    "vendor": connection.vendor, "answered": answered, "found": found.pk == chat.pk,
    "before": before, "during": during, "after": after, "owner_said": owner_said,
}))
"""


# Two messages to one session at once, on PostgreSQL: A starts a reply and, before it
# commits, B reads the session and waits for its row lock. Run in a child manage.py shell.
AT_ONCE = r"""
import json
import os
import threading

import psycopg
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.utils import timezone

from chats.gateway import services
from chats.gateway.services import gateway_token_rotate
from chats.models import Agent, Turn, TurnState
from tests.scaleout.processes import wait_until

owner = get_user_model().objects.create(username="owner", is_superuser=True)
Agent.objects.create(slug="main", name="Conch", workspace="/tmp", is_default=True)
token = gateway_token_rotate(owner=owner)


def post(n):
    # Not raise_request_exception: a client hears every thread's failed request, not its own.
    client = Client(HTTP_HOST="127.0.0.1", raise_request_exception=False)
    body = {"channel": "telegram", "chat_type": "dm", "peer": "alice", "message_id": str(n),
            "text": f"hello {n}"}
    try:
        response = client.post("/gateway/inbound", json.dumps(body),
                               content_type="application/json",
                               HTTP_AUTHORIZATION=f"Bearer {token}")
        outcome = response.json().get("outcome") if response.status_code < 500 else None
        return [response.status_code, outcome]
    finally:
        connection.close()


assert post(1) == [202, "started"]
# Its reply ended: the next message starts one.
Turn.objects.update(ended_at=timezone.now(), state=TurnState.COMPLETED)

a_written, a_go = threading.Event(), threading.Event()
receipt = services._receipt


def held_receipt(inbound, *args, **kwargs):
    receipt(inbound, *args, **kwargs)
    if inbound.message_id == "2":  # A: written, not committed
        a_written.set()
        a_go.wait(30)


services._receipt = held_receipt
answers = {}


def run(name, n):
    answers[name] = post(n)


a = threading.Thread(target=run, args=("a", 2))
b = threading.Thread(target=run, args=("b", 3))
a.start()
assert a_written.wait(30)
b.start()
watcher = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)


def lock_waits():
    return watcher.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock'"
    ).fetchone()[0]


# B waits for A's lock on the chat's row: PostgreSQL sends no word of it, so it is looked at.
waiting = wait_until(lock_waits, timeout=30, what="B to wait for A's lock")
a_go.set()
a.join(30)
b.join(30)
open_replies = Turn.objects.filter(ended_at__isnull=True).count()
print("RESULT " + json.dumps({"waiting": waiting, **answers, "open_replies": open_replies}))
"""


def test_two_messages_at_once_to_one_session_on_postgresql_start_one_reply_and_queue_one(
    scaleout,
):
    """B read whether a reply runs in the statement that waited for A's lock, from that
    statement's snapshot: A's new reply unseen, B started a second one and failed on
    one_open_turn_per_chat (a 500, the message lost). SQLite's writers never overlap."""
    done = manage_ok("shell", "-c", AT_ONCE, env=scaleout.env, timeout=120)
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    found = json.loads(line.removeprefix("RESULT "))
    assert found["waiting"] == 1  # B did wait for A's lock: the case is the one meant
    assert found["a"] == [202, "started"]
    assert found["b"] == [202, "queued"]
    assert found["open_replies"] == 1


def test_a_messages_session_lookup_holds_the_chats_row_lock_on_postgresql(scaleout):
    done = manage_ok("shell", "-c", SCRIPT, env=scaleout.env, timeout=120)
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    found = json.loads(line.removeprefix("RESULT "))
    assert (found["vendor"], found["answered"], found["found"]) == ("postgresql", 202, True)
    assert found["before"] == found["after"] == "free"
    # Another writer of the chat waits for the message's commit; a row that merely points
    # at the chat (FOR KEY SHARE: a wait for it, a message to it) does not.
    assert found["during"] == ["locked", "free"]
    # Who the owner is, as the ORM's query says: a channel in any case, one account, one peer.
    assert found["owner_said"] == [[True, True], [False, False], [False, False]]


def test_a_server_on_postgresql_and_redis_stops_on_sigterm_while_messages_come_in(
    scaleout, tmp_path
):
    """As on SQLite (tests/conch/test_cli.py): a request's events after the loop stopped
    go to Redis on a loop of their own, and the server exits."""
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, str(MANAGE), "serve", "--port", "0"],
            cwd=REPO,
            env=scaleout.env | UNLIMITED,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    token_command = [sys.executable, str(MANAGE), "conch_gateway_token"]
    code, answers = stopped_under_load(server, log, token_command, env=scaleout.env)
    assert code == 0, f"exit status {code} (None: running 20 s after SIGTERM)\n{log.read_text()}"
    assert "Conch stopped." in log.read_text()
    assert set(answers) == {202}
