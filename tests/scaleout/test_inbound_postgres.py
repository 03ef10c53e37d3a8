"""A message's session lookup on the real PostgreSQL: the written-out statement holds the
chat's row lock for the rest of the message's transaction, and says who the owner is as
the ORM's query does.

On SQLite a message's transaction takes the database's write lock at its start
(IMMEDIATE), so only PostgreSQL can show the row lock is there. A child ``manage.py
shell`` makes the session through the door, then looks it up inside a transaction
while a second connection tries to lock the same row without waiting.
"""

from __future__ import annotations

import json

import pytest

from tests.scaleout.processes import manage_ok

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


def test_a_messages_session_lookup_holds_the_chats_row_lock_on_postgresql(scaleout):
    manage_ok("migrate", "--noinput", "-v0", env=scaleout.env, timeout=120)
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
