"""Run in a child process with its own CONCH_HOME (a file SQLite database) by test_lanes.py.

A real Runner with threads drives the gateway: two slow tasks fill the
subagent lane while a quick message through the gateway is answered; then a
Telegram message is answered and delivered by the runner's outbox sweep to a
fake Bot API on loopback. Every wait is on an event or a condition, with a
timeout. Prints one JSON object of what it saw.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import django

sys.path.insert(0, os.environ["CONCH_REPO"])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conch.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402

from chats import events  # noqa: E402
from chats.engines import register_engine  # noqa: E402
from chats.gateway.models import ChannelAccount, OutboxMessage, OwnerIdentity  # noqa: E402
from chats.gateway.services import inbound_receive  # noqa: E402
from chats.gateway.telegram import telegram_inbound  # noqa: E402
from chats.models import Agent, Conversation, Task, TaskState, Turn  # noqa: E402
from chats.runtime.runner import Runner  # noqa: E402
from chats.runtime.turns import task_start  # noqa: E402
from chats.tools.registry import Tool, ToolResult, register  # noqa: E402
from tests.gateway.botapi import FakeBotApi  # noqa: E402
from tests.gateway.conftest import EchoEngine, message  # noqa: E402

TIMEOUT = 60.0
changed = threading.Condition()


def on_event(event) -> None:
    with changed:
        changed.notify_all()


def wait_until(predicate, what: str) -> None:
    """Re-check ``predicate`` whenever an event is published; fail after TIMEOUT."""
    deadline = time.monotonic() + TIMEOUT
    with changed:
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                raise SystemExit(f"timed out waiting for {what}")
            changed.wait(min(left, 1.0))  # re-check at least each second: events are hints


release = threading.Event()
holding = threading.Semaphore(0)


def hold(ctx, args):
    holding.release()
    if not release.wait(TIMEOUT):
        return ToolResult("gave up waiting")
    return ToolResult("crawled every page")


def main() -> None:
    call_command("migrate", verbosity=0)
    register(
        Tool(
            name="slow_crawl",
            description="Crawls until the test lets it go.",
            schema={"type": "object", "properties": {}},
            family="reading a web page",
            effect="read",
            run=hold,
        )
    )
    register_engine(EchoEngine())
    events.subscribe(on_event)
    owner = get_user_model().objects.create(username="owner", is_superuser=True, is_staff=True)
    workspace = os.path.join(os.environ["CONCH_HOME"], "ws")
    agent = Agent.objects.create(slug="main", name="Conch", workspace=workspace, is_default=True)

    # alice is the owner on Slack: her session gets the persona's tools for its owner.
    OwnerIdentity.objects.create(owner=owner, channel="slack", peer="alice")
    # A gateway session whose first reply will start two slow background crawls.
    first = inbound_receive(
        owner=owner, inbound=message(channel="slack", peer="alice", text="crawl the docs")
    )
    chat = Conversation.objects.get(public_id=first.chat)
    Conversation.objects.filter(pk=chat.pk).update(
        script=[[{"say": "On it."}], [{"say": "Yes, here. The crawl is still going."}]]
    )
    crawl = [[{"tool": "slow_crawl", "args": {}}, {"say": "Done crawling."}]]
    tasks = [task_start(parent=chat, title=f"Crawl part {n}", script=crawl) for n in (1, 2)]

    runner = Runner(name="live", threads=4, honour_delays=False, poll=0.05).start()
    try:
        for _ in tasks:  # both crawls are running and holding their threads
            if not holding.acquire(timeout=TIMEOUT):
                raise SystemExit("the crawls never started")
        wait_until(
            lambda: Turn.objects.filter(conversation=chat, ended_at__isnull=False).exists(),
            "the first reply",
        )
        quick = inbound_receive(
            owner=owner, inbound=message(channel="slack", peer="alice", text="are you there?")
        )
        wait_until(
            lambda: Turn.objects.filter(conversation=chat, ended_at__isnull=False).count() == 2,
            "the quick reply",
        )
        states_during = sorted(Task.objects.values_list("state", flat=True))
        quick_answer = chat.entries.order_by("-seq").first().text
        lanes = sorted(set(Turn.objects.values_list("lane", flat=True)))
        release.set()
        wait_until(
            lambda: Task.objects.filter(state=TaskState.DONE).count() == 2, "the crawls to end"
        )

        # Telegram: the reply goes out by the runner's outbox sweep, over loopback.
        with FakeBotApi() as api:
            settings.CONCH_TELEGRAM_API_BASE = api.base
            ChannelAccount.objects.create(
                owner=owner, channel="telegram", account_id="bot", secret="42:token"
            )
            Agent.objects.filter(pk=agent.pk).update(engine="echo")
            update = {
                "update_id": 1,
                "message": {
                    "message_id": 5,
                    "from": {"id": 7},
                    "chat": {"id": 7, "type": "private"},
                    "text": "ping",
                },
            }
            taken = telegram_inbound(update, account_id="bot")
            inbound_receive(owner=owner, inbound=taken.inbound, reply_to=taken.reply_to)
            runner.nudge()
            if not api.called.wait(TIMEOUT):
                raise SystemExit("the outbox sweep never called the Bot API")
            wait_until(
                lambda: OutboxMessage.objects.filter(state="sent").exists(), "the outbox row sent"
            )
            telegram = api.calls
    finally:
        release.set()
        runner.stop()
    print(
        json.dumps(
            {
                "quick_outcome": quick.outcome,
                "tasks_while_quick_reply_ended": states_during,
                "quick_answer": quick_answer,
                "lanes": lanes,
                "tasks_after": sorted(Task.objects.values_list("state", flat=True)),
                "telegram": telegram,
            }
        )
    )


if __name__ == "__main__":
    main()
