"""A chat's taint on the real PostgreSQL: two raisers at once neither lower it nor write a
rise that never happened (``chats.taint.taint_raise`` looks again under the chat's row lock)."""

from __future__ import annotations

import json

import pytest

from tests.scaleout.processes import manage_ok

pytestmark = pytest.mark.scaleout

# For each of 20 chats, two threads, each with its own connection and its own copy of the
# chat read while it was clean: one raises it to untrusted (a page), the other to person
# (someone else's words), released together by a barrier.
RAISERS_AT_ONCE = """
import json, threading
from django.contrib.auth import get_user_model
from django.db import connection
from chats.models import Agent, Conversation, TaintRise
from chats.runtime.chats import conversation_create
from chats.taint import Cause, taint_raise

owner = get_user_model().objects.create(username="scaleout", is_superuser=True, is_staff=True)
agent = Agent.objects.create(slug="main", name="Conch", workspace="/tmp", is_default=True)
chats = [conversation_create(owner=owner, agent=agent, title=f"C{n}", folder="/tmp") for n in range(20)]
barrier = threading.Barrier(40)
raised = {}

def raise_it(n, level, cause):
    copy = Conversation.objects.get(pk=chats[n].pk)  # read clean, before the other raises
    try:
        barrier.wait(timeout=30)
        raised[(n, level)] = taint_raise(conversation=copy, taint=level, cause=cause)
    finally:
        connection.close()

threads = []
for n in range(20):
    threads.append(threading.Thread(target=raise_it, args=(n, "untrusted", Cause.page("https://x.test/"))))
    threads.append(threading.Thread(target=raise_it, args=(n, "person", Cause.stranger(channel="t", sender="m"))))
for t in threads: t.start()
for t in threads: t.join(timeout=60)
out = []
for n, chat in enumerate(chats):
    rises = TaintRise.objects.filter(conversation=chat).order_by("at", "id")
    out.append({
        "taint": Conversation.objects.get(pk=chat.pk).taint,
        "rises": [[r.before, r.after, r.cause] for r in rises],
        "raised": [raised.get((n, "untrusted")), raised.get((n, "person"))],
    })
print(json.dumps(out))
"""


def test_two_raisers_at_once_leave_the_highest_taint_and_one_rise_for_each_step_up(scaleout):
    done = manage_ok("shell", "-c", RAISERS_AT_ONCE, env=scaleout.env, timeout=120)
    chats = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(chats) == 20
    for chat in chats:
        assert chat["taint"] == "person", chat  # never lowered by the one that came second
        rises = chat["rises"]
        # Each rise starts where the one before it ended, from clean to what the chat is.
        assert rises[0][0] == "none" and rises[-1][1] == "person", chat
        assert all(a[1] == b[0] for a, b in zip(rises, rises[1:], strict=False)), chat
        # Whichever came first: the page then the stranger, or the stranger alone.
        assert rises in (
            [["none", "untrusted", "page"], ["untrusted", "person", "stranger"]],
            [["none", "person", "stranger"]],
        ), chat
        assert sum(chat["raised"]) == len(rises), chat  # True exactly for the rises written
