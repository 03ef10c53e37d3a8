"""What one inbound message costs the database, counted at the real door (POST /gateway/inbound).

Counted as statements, not transaction control (BEGIN, SAVEPOINT, RELEASE), as the
issue counted them. A message to a live session reads one row for it (the chat, its
origin, the stored routing version, whether a reply runs, whether the sender is the
owner), locked as it is read; the routing index is never reloaded for a message, and
never asked for its version by a query of its own; events are numbered once, as the
message's transaction commits.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chats.gateway import routing
from chats.gateway.models import Binding, GatewayConfig, InboundRecord
from chats.models import QueuedInput, Turn
from chats.runtime.runner import drain

pytestmark = pytest.mark.django_db

URL = "/gateway/inbound"
CONTROL = ("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT", "BEGIN", "COMMIT")


def statements(captured) -> list[str]:
    return [q["sql"] for q in captured if not q["sql"].startswith(CONTROL)]


def on(table: str, sqls: list[str]) -> list[str]:
    """The statements that read or write ``table`` itself (not in a subquery or a join)."""
    return [
        s
        for s in sqls
        if s.startswith((f'SELECT "{table}"', f'INSERT INTO "{table}"', f'UPDATE "{table}"'))
        or s.startswith(f"UPDATE {table} ")
        or (s.startswith("SELECT") and _selected_from(s) == f'"{table}"')
    ]


def _selected_from(sql: str) -> str:
    """The table a SELECT reads from: its first FROM outside parentheses (a written-out
    statement need not start with that table's columns)."""
    depth = 0
    for at, ch in enumerate(sql):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and sql.startswith(" FROM ", at):
            return sql[at + 6 :].split(" ", 1)[0]
    return ""


_ids = iter(range(1, 1_000_000))


def post(client, token, **fields):
    data = {"channel": "telegram", "chat_type": "dm", "peer": "alice", "text": "hello"}
    data.update(fields)
    data.setdefault("message_id", f"cost-{next(_ids)}")
    return client.post(
        URL, json.dumps(data), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def counted(client, token, django_capture_on_commit_callbacks, **fields) -> list[str]:
    """The statements one message costs, its events' numbering included."""
    with CaptureQueriesContext(connection) as captured:
        with django_capture_on_commit_callbacks(execute=True):
            response = post(client, token, **fields)
    assert response.status_code == 202, response.content
    return statements(captured.captured_queries)


@pytest.fixture
def warm(client, gateway_token, agent, django_capture_on_commit_callbacks):
    """alice's session exists, its replies played; the index and the policies are read."""
    counted(client, gateway_token, django_capture_on_commit_callbacks)
    drain()
    counted(client, gateway_token, django_capture_on_commit_callbacks)
    drain()
    return gateway_token


def test_a_message_to_a_session_whose_reply_runs_costs_at_most_seven_queries(
    client, warm, django_capture_on_commit_callbacks
):
    counted(client, warm, django_capture_on_commit_callbacks, text="starts a reply")
    queued = counted(client, warm, django_capture_on_commit_callbacks, text="waits for it")
    assert QueuedInput.objects.filter(text="waits for it").exists()
    # Six, and the inbound rate's count (chats/gateway/floods.py): one statement.
    assert len(queued) <= 7, "\n".join(queued)
    assert len([s for s in on("gateway_inboundrecord", queued) if s.startswith("SELECT")]) == 1
    # The chat's row is read once, locked as it is read (no second read to lock it).
    assert len([s for s in on("chats_conversation", queued) if s.startswith("SELECT")]) == 1
    assert not on("chats_turn", queued)  # the running reply is seen with the chat's row
    assert not on("gateway_gatewayconfig", queued)  # the version rides on the session's row
    assert len(on("chats_eventstream", queued)) == 1  # numbered once


def test_a_message_that_starts_a_reply_in_a_live_session_costs_a_bounded_count(
    client, warm, django_capture_on_commit_callbacks
):
    """The gateway's own part is the token, the session's row and the receipt; the rest
    is starting the reply (chats.runtime) and its event's watchers."""
    started = counted(client, warm, django_capture_on_commit_callbacks, text="again")
    assert Turn.objects.count() == 3
    assert len(started) <= 13, "\n".join(started)  # 12, and the inbound rate's count
    assert len([s for s in on("chats_conversation", started) if s.startswith("SELECT")]) == 1
    assert len(on("gateway_gatewaytoken", started)) == 1
    # The rate's count, and the receipt, written once.
    assert len(on("gateway_inboundrecord", started)) == 2
    assert not on("gateway_gatewayconfig", started)  # the version rides on the session's row
    assert not on("gateway_resetpolicy", started)  # read once an index
    assert not on("gateway_sessionorigin", started)  # unchanged: no write
    assert not on("gateway_owneridentity", started)  # read with the session's row


def test_a_first_message_makes_its_session_in_a_bounded_count(
    client, gateway_token, agent, django_capture_on_commit_callbacks
):
    counted(client, gateway_token, django_capture_on_commit_callbacks, peer="warmup")
    first = counted(client, gateway_token, django_capture_on_commit_callbacks, peer="newcomer")
    # 21, the inbound rate's count, and the rise of a stranger's chat's taint, written down
    assert len(first) <= 23, "\n".join(first)


def test_a_binding_changed_in_another_process_is_seen_by_the_next_message_in_place(
    client, warm, personas, django_capture_on_commit_callbacks
):
    index = routing.route_index()
    # Another process saved a binding: it is stamped with the version it bumped.
    version = index.version + 1
    Binding.objects.bulk_create(
        [
            Binding(
                agent=personas["work"],
                channel="telegram",
                peer="alice",
                peer_kind="direct",
                routing_version=version,
            )
        ]
    )
    GatewayConfig.objects.filter(pk=1).update(routing_version=version)

    counted(client, warm, django_capture_on_commit_callbacks, text="who answers?")
    record = InboundRecord.objects.latest("pk")
    assert record.agent_slug == "work"
    assert routing.route_index() is index  # taken in place, not loaded afresh
    assert index.version == version
