"""The plans of what runs often, on the real PostgreSQL.

The SQLite twins are in ``tests/together/test_cost.py``. Here a child
``manage.py shell`` fills a fresh PostgreSQL database with a month of chats
(20,000, most idle, a fifth archived) and 5,000 waits, ANALYZEs it, runs
``list_chats`` and a status event, and prints each query's plan: the recent
chats are read in order from ``chat_owner_unarchived`` (no sort), and an event
asks about its chat through ``wait_target``.
"""

from __future__ import annotations

import json

import pytest

from tests.scaleout.processes import manage_ok

pytestmark = pytest.mark.scaleout

SCRIPT = r"""
import json, random
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from chats import events
from chats.models import Agent, Conversation, Status, Turn
from together import waits
from together.listing import list_chats
from together.models import Wait, WaitKind

owner = get_user_model().objects.create(username="owner", is_superuser=True, is_staff=True)
agent = Agent.objects.create(slug="main", name="Conch", workspace="/tmp", is_default=True)
now = timezone.now()
rng = random.Random(17)
special = Conversation.objects.bulk_create([
    Conversation(owner=owner, agent=agent, title=f"S{n}", folder="/tmp", public_id=f"c_sp{n}",
                 status=Status.WORKING if n < 5 else Status.NEEDS_YOU)
    for n in range(8)
])
Turn.objects.bulk_create([Turn(conversation=c, number=1, folder="/tmp") for c in special[:5]])
chats = Conversation.objects.bulk_create([
    Conversation(owner=owner, agent=agent, title=f"Chat {n}", folder="/tmp", public_id=f"c_m{n}",
                 archived=rng.random() < 0.2, last_interaction_at=now - timedelta(days=30) * rng.random())
    for n in range(20_000)
], batch_size=5_000)
Wait.objects.bulk_create([
    Wait(waiter=chats[n], kind=WaitKind.CHAT, target_chat=chats[n + 1],
         target_public_id=chats[n + 1].public_id, target_title="T")
    for n in range(0, 10_000, 2)
])
me = Conversation.objects.create(owner=owner, agent=agent, title="Me", folder="/tmp")
with connection.cursor() as cursor:
    cursor.execute("ANALYZE")

def plan(sql):
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        return [row[0] for row in cursor.fetchall()]

with CaptureQueriesContext(connection) as listed:
    look = list_chats(conversation=me)
recent = [q["sql"] for q in listed if '"last_interaction_at" >=' in q["sql"]]
with CaptureQueriesContext(connection) as evented:
    waits.on_event(events.Event(type=events.STATUS, owner_id=owner.pk, seq=1,
                                conversation_id=chats[15_001].public_id))
print(json.dumps({
    "queries": len(listed), "working": look.working, "needs_you": look.needs_you,
    "rows": len(look.rows), "recent": [plan(sql) for sql in recent],
    "event": [plan(q["sql"]) for q in evented],
}))
"""


def test_list_chats_and_an_event_use_their_indexes_on_postgres(scaleout):
    env = scaleout.env
    out = manage_ok("shell", "-c", SCRIPT, env=env, timeout=180).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert report["queries"] <= 5
    assert (report["working"], report["needs_you"], report["rows"]) == (5, 3, 12)
    [recent] = report["recent"]
    text = "\n".join(recent)
    assert "chat_owner_unarchived" in text, text
    assert "Sort" not in text, text
    [event] = report["event"]  # one query: no one waits for that chat
    text = "\n".join(event)
    assert "wait_target" in text, text
    assert "Seq Scan" not in text, text
