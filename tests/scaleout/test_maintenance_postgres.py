"""Maintenance on the real PostgreSQL.

Two runs at once never over-compact. Every runner starts a maintenance
run, so two processes run one at the same time. Here the second has counted a long
session's entries (700, over the cap of 500) and is held there until the first, in another
process, has compacted it. Without the re-read under the chat's lock the second folded the
first one's recap and 200 of the entries the cap keeps.

A used store is pruned by a statement per table, and its old sent replies are found by
``outbox_finished`` with no sort (the SQLite twins are in
``tests/gateway/test_maintenance_cost.py``): what the statements leave satisfies every
foreign key at commit, and each plan is read here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.commands import wait_for_fifo
from tests.scaleout.processes import MANAGE, REPO, manage_ok

SEED = """
import json
from chats.gateway.models import SessionOrigin
from chats.models import Entry, EntryRole
from chats.runtime.chats import conversation_create
from chats.signin import owner_ensure
chat = conversation_create(owner=owner_ensure(), title="Long", origin="chat_app",
                           origin_channel="telegram")
chat.session_key = "agent:main:dm:telegram:long"
chat.save(update_fields=["session_key"])
SessionOrigin.objects.create(conversation=chat, chat_type="dm", channel="telegram", peer="long")
Entry.objects.bulk_create(
    Entry(conversation=chat, seq=n, role=EntryRole.PERSON, text=f"line {n}.")
    for n in range(1, 701)
)
print(json.dumps({"pk": chat.pk}))
"""

# The second run: counted, then held until the first run is done.
HELD = """
from chats.gateway import maintenance
real = maintenance.session_compact
def held(**kwargs):
    with open({counted!r}, "w") as said:  # the test reads it
        said.write("counted\\n")
    with open({first_done!r}) as done:  # until the first run has written its end
        done.read()
    return real(**kwargs)
maintenance.session_compact = held
report = maintenance.maintenance_run()
print("compacted", report.compacted, "deferred", report.compaction_deferred)
"""

FIRST = """
from chats.gateway.maintenance import maintenance_run
report = maintenance_run()
print("compacted", report.compacted, "deferred", report.compaction_deferred)
with open({first_done!r}, "w") as done:  # the held run is waiting to read it
    done.write("done\\n")
"""

AFTER = """
import json
from chats.models import Entry, EntryKind
entries = Entry.objects.filter(conversation_id={pk})
recap = entries.get(kind=EntryKind.RECAP)
print(json.dumps({{"count": entries.count(), "recaps": entries.filter(kind=EntryKind.RECAP).count(),
  "compacted": recap.data["compacted"], "first_kept": min(e.seq for e in entries if e.kind != EntryKind.RECAP)}}))
"""


def _shell(code: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(MANAGE), "shell", "-c", code],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_maintenance_runs_at_once_compact_a_session_once(scaleout, tmp_path):
    env = scaleout.env
    seeded = manage_ok("shell", "-c", SEED, env=env, timeout=120)
    pk = json.loads(seeded.stdout.strip().splitlines()[-1])["pk"]
    counted, first_done = tmp_path / "counted.fifo", tmp_path / "first_done.fifo"
    os.mkfifo(counted)
    os.mkfifo(first_done)

    runs = [_shell(HELD.format(counted=str(counted), first_done=str(first_done)), env)]
    try:
        said = wait_for_fifo(counted, timeout=120)
        assert said == "counted", "the second run never counted the entries"
        runs.insert(0, _shell(FIRST.format(first_done=str(first_done)), env))
        first, second = runs
        out_first, err_first = first.communicate(timeout=120)
        out_second, err_second = second.communicate(timeout=120)
    finally:  # a run left waiting on its FIFO ends with the test
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.communicate(timeout=30)
    assert first.returncode == 0, err_first
    assert second.returncode == 0, err_second
    assert out_first.strip().splitlines()[-1] == "compacted 1 deferred 0"
    assert out_second.strip().splitlines()[-1] == "compacted 0 deferred 1"

    after = json.loads(
        manage_ok("shell", "-c", AFTER.format(pk=pk), env=env).stdout.strip().splitlines()[-1]
    )
    # One recap of the 201 oldest, and the most recent 499 untouched: the cap, not less.
    assert after == {"count": 500, "recaps": 1, "compacted": 201, "first_kept": 202}


USED = r"""
import json
from datetime import timedelta
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from chats.gateway.maintenance import maintenance_run
from chats.gateway.models import InboundRecord, OutboxMessage
from chats.models import Conversation, Entry, Step, Task, Turn
from chats.runtime.chats import default_agent
from chats.signin import owner_ensure

owner, agent = owner_ensure(), default_agent()
now = timezone.now()
old, recent = now - timedelta(days=40), now - timedelta(days=1)
chats = Conversation.objects.bulk_create([
    Conversation(owner=owner, agent=agent, title=f"p{n}", folder="/tmp", public_id=f"c_u{n}",
                 session_key=f"agent:main:dm:telegram:p{n}", origin="chat_app",
                 last_interaction_at=old if n % 4 == 0 else recent)
    for n in range(2_000)
], batch_size=1_000)
turns = Turn.objects.bulk_create([
    Turn(conversation=c, number=k, folder="/tmp", state="completed", ended_at=now)
    for c in chats for k in (1, 2)
], batch_size=2_000)
Step.objects.bulk_create([
    Step(turn=t, number=1, tool="read_file", family="reading files", effect="read") for t in turns
], batch_size=2_000)
Entry.objects.bulk_create([
    Entry(conversation_id=t.conversation_id, turn=t, seq=2 * t.number - k, role=role,
          text="Can you check the deploy?")
    for t in turns for k, role in ((1, "person"), (0, "assistant"))
], batch_size=2_000)
Task.objects.bulk_create([Task(parent=c, title="Check", state="done") for c in chats[::50]])
stamp = {c.pk: old if n % 4 == 0 else recent for n, c in enumerate(chats)}
InboundRecord.objects.bulk_create([
    InboundRecord(channel="telegram", account_id="bot", message_id=str(t.pk),
                  session_key="k", agent_slug="main", rule="dm", outcome="routed",
                  conversation_id=t.conversation_id, received_at=stamp[t.conversation_id])
    for t in turns
], batch_size=2_000)
OutboxMessage.objects.bulk_create([
    OutboxMessage(channel="telegram", account_id="bot", target={}, text="Done.",
                  state="sent", conversation_id=t.conversation_id, turn=t,
                  created_at=stamp[t.conversation_id])
    for t in turns
], batch_size=2_000)
with connection.cursor() as cursor:
    cursor.execute("ANALYZE")

def plan(sql):
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        return [row[0] for row in cursor.fetchall()]

with CaptureQueriesContext(connection) as ran:
    report = maintenance_run()
finds = [q["sql"] for q in ran if q["sql"].startswith('SELECT "gateway_outboxmessage"."id"')]
print(json.dumps({
    "pruned": report.pruned, "records": report.records_pruned,
    "left": [Conversation.objects.count(), Turn.objects.count(), Step.objects.count(),
             Entry.objects.count(), Task.objects.count(), InboundRecord.objects.count(),
             OutboxMessage.objects.count()],
    "replies_read": sum(q["sql"].startswith('SELECT "chats_turn"."id"') for q in ran),
    "replies_deleted": sum(q["sql"].startswith('DELETE FROM "chats_turn"') for q in ran),
    "find": plan(finds[0]),
}))
"""


def test_a_used_store_is_pruned_by_statements_and_its_old_sent_replies_found_by_index(scaleout):
    env = scaleout.env
    out = manage_ok("shell", "-c", USED, env=env, timeout=180).stdout
    report = json.loads(out.strip().splitlines()[-1])
    # A quarter of the 2,000 sessions are old, each with two replies, a receipt and a sent
    # reply for each; the commit would have failed had a statement left a row pointing
    # at a deleted one.
    assert (report["pruned"], report["records"]) == (500, 2_000)
    assert report["left"] == [1_500, 3_000, 3_000, 6_000, 20, 3_000, 3_000]
    # The batch's replies deleted by one statement, never read into Python first.
    assert (report["replies_read"], report["replies_deleted"]) == (0, 1)
    text = "\n".join(report["find"])
    assert "outbox_finished" in text, text
    assert "Sort" not in text and "Seq Scan" not in text, text
