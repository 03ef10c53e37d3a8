"""The trust timeline's record when chats work together (ADR 0134's ways taint travels):
a message from a careful chat taken in, a wait's answer, a task's result waited for, and
another chat's words read with read_chat or search_chats.

Each is played through the tools a chat's model calls, starting from a page read for real
with fetch_page (or by a command that could reach the network), and each record says where the care came from: the chat, its taint then,
and that chat's own rise, so the timeline can follow the path back to the page.
"""

from __future__ import annotations

import pytest

from chats.models import Conversation, Taint, TaintCause, Task, Turn, counted_ids
from chats.runtime.runner import drain
from chats.timeline import chat_timeline
from chats.tools import sandbox
from tests.commands import command_fetching
from tests.factories import ChatFactory
from tests.rises import only_rise, rises, shape, step_of
from tests.together.conftest import look, message, wait_chat
from together.models import ChatMessage

PAGE = (
    "<html><head><title>Release 2.4</title></head><body><p>Sync is twice as fast.</p></body></html>"
)


@pytest.fixture
def site(outside_site):
    outside_site.page("/release.html", PAGE)
    return outside_site


def fetch(url: str) -> dict:
    return {"tool": "fetch_page", "args": {"url": url}}


def page_reader(site, **fields) -> Conversation:
    """Chat A: it reads the release page and says what it read; its reply is played here."""
    script = fields.pop("script", [])
    a = ChatFactory(
        title="Read the release page",
        script=[[fetch(site.url("/release.html")), *script, {"say": "Sync is twice as fast."}]],
        **fields,
    )
    return a


def test_a_message_from_a_careful_chat_is_written_down_when_it_is_taken_in(live, site):
    b = ChatFactory(title="Write the changelog", script=[[look(), {"say": "ok"}]])
    a = page_reader(site, script=[message(b, "The page says sync is twice as fast.")])
    live.start(a)
    drain()
    assert rises(b) == []  # not yet: it hasn't read it
    live.start(b, text="next")
    drain()

    msg = ChatMessage.objects.get()
    page_rise = only_rise(a)
    assert shape(only_rise(b)) == {
        "before": Taint.NONE,
        "after": Taint.UNTRUSTED,
        "cause": TaintCause.MESSAGE,
        "url": "",
        "path": "",
        "source": a.pk,
        "source_taint": Taint.UNTRUSTED,
        "source_rise": page_rise.pk,
        "turn": msg.read_in_turn_id,  # the reply that took it in
        "step": None,
        "detail": {"message": msg.message_id},
    }
    assert (page_rise.cause, page_rise.url) == (TaintCause.PAGE, site.url("/release.html"))


def test_a_message_from_a_chat_that_ran_a_command_with_the_network_carries_its_care(
    live, site, settings
):
    """A fetched the page with a command, not fetch_page, and messaged B: B is as careful
    as a page's reader's message makes it, and its timeline names the command."""
    settings.CONCH_SANDBOX = sandbox.SANDBOX_OFF  # the command could reach the network
    b = ChatFactory(title="Write the changelog", script=[[look(), {"say": "ok"}]])
    a = ChatFactory(
        title="Curl the release page",
        script=[
            [
                command_fetching(site.url("/release.html")),
                message(b, "The page says sync is twice as fast."),
                {"say": "Sent."},
            ]
        ],
    )
    live.start(a)
    drain()
    assert "Sync is twice as fast." in step_of(a, "run_command").result
    assert rises(b) == []  # not yet: it hasn't read it
    live.start(b, text="next")
    drain()

    command_rise = only_rise(a)
    assert (command_rise.cause, command_rise.detail) == (
        TaintCause.COMMAND_NETWORK,
        {"sandboxed": False},
    )
    msg = ChatMessage.objects.get()
    assert shape(only_rise(b)) == {
        "before": Taint.NONE,
        "after": Taint.UNTRUSTED,
        "cause": TaintCause.MESSAGE,
        "url": "",
        "path": "",
        "source": a.pk,
        "source_taint": Taint.UNTRUSTED,
        "source_rise": command_rise.pk,
        "turn": msg.read_in_turn_id,
        "step": None,
        "detail": {"message": msg.message_id},
    }
    (row,) = chat_timeline(b, viewer_id=b.owner_id).rows
    assert [(hop.chat.title, hop.had.text) for hop in row.path] == [
        (
            "Curl the release page",
            "had run a command that could reach the network (without the sandbox)",
        )
    ]


def test_a_wait_that_wakes_on_a_careful_chat_is_written_down_with_the_path_behind_it(live, site):
    """A read the page, messaged B; C waits on B: C's rise names B, and B's names A."""
    b = ChatFactory(title="Write the changelog", script=[[look(), {"say": "Changelog written."}]])
    a = page_reader(site, script=[message(b, "Sync is twice as fast.")])
    live.start(a)
    drain()
    live.start(b)  # B's reply is open: C will wait for it
    c = ChatFactory(title="Announce the release", script=[[wait_chat(b)], [look()]])
    live.start(c)
    live.step(c, 2)
    assert rises(c) == []  # waiting is not reading
    drain()  # B takes in A's message, ends, and C wakes

    b_rise = only_rise(b)
    assert (b_rise.cause, b_rise.source_id, b_rise.source_rise_id) == (
        TaintCause.MESSAGE,
        a.pk,
        only_rise(a).pk,
    )
    assert shape(only_rise(c)) == {
        "before": Taint.NONE,
        "after": Taint.UNTRUSTED,
        "cause": TaintCause.WAIT,
        "url": "",
        "path": "",
        "source": b.pk,
        "source_taint": Taint.UNTRUSTED,
        "source_rise": b_rise.pk,
        "turn": None,
        "step": None,
        "detail": {},
    }
    woken = Turn.objects.get(conversation=c, number=2)
    assert only_rise(c).at <= woken.started_at  # before the reply it woke


def test_a_wait_on_a_careful_chat_that_is_already_done_is_written_down_with_its_step(live, site):
    a = page_reader(site)
    live.start(a)
    drain()
    c = ChatFactory(title="Announce the release", script=[[wait_chat(a), look()]])
    live.start(c)
    drain()
    step = step_of(c, "wait_for")
    assert "finished its reply" in step.result  # answered at once, in this reply
    assert shape(only_rise(c)) == {
        "before": Taint.NONE,
        "after": Taint.UNTRUSTED,
        "cause": TaintCause.WAIT,
        "url": "",
        "path": "",
        "source": a.pk,
        "source_taint": Taint.UNTRUSTED,
        "source_rise": only_rise(a).pk,
        "turn": step.turn_id,
        "step": step.pk,
        "detail": {},
    }


def test_a_task_done_already_when_waited_for_is_written_down_with_the_waits_step(live, site):
    parent = ChatFactory(
        title="Release",
        script=[
            [
                {
                    "tool": "start_background_task",
                    "args": {
                        "title": "Read the release page",
                        "script": [[fetch(site.url("/release.html")), {"say": "Faster sync."}]],
                    },
                }
            ],
            [{"tool": "wait_for", "args": {"kind": "task", "id": "t_1"}}],
        ],
    )
    with counted_ids():
        live.start(parent)
        drain()
        assert Task.objects.get().chat.taint == Taint.UNTRUSTED and rises(parent) == []
        live.start(parent, text="and the task?")
        drain()
    step = step_of(parent, "wait_for")
    assert shape(only_rise(parent)) == {
        "before": Taint.NONE,
        "after": Taint.UNTRUSTED,
        "cause": TaintCause.TASK,
        "url": "",
        "path": "",
        "source": Task.objects.get().chat_id,
        "source_taint": Taint.UNTRUSTED,
        "source_rise": only_rise(Task.objects.get().chat).pk,
        "turn": step.turn_id,
        "step": step.pk,
        "detail": {"task": "t_1"},
    }


def test_a_wait_on_a_chat_that_read_nothing_outside_writes_nothing(live):
    b = ChatFactory(title="Tidy up", script=[[look(), {"say": "Tidied."}]])
    live.start(b)
    c = ChatFactory(title="Then announce", script=[[wait_chat(b)], [look()]])
    live.start(c)
    live.step(c, 2)
    drain()
    assert Turn.objects.filter(conversation=c).count() == 2  # it woke
    assert rises(c) == [] and rises(b) == []


def test_a_tasks_result_waited_for_is_written_down_with_the_tasks_own_rise(live, site):
    parent = ChatFactory(
        title="Release",
        script=[
            [
                {
                    "tool": "start_background_task",
                    "args": {
                        "title": "Read the release page",
                        "script": [[fetch(site.url("/release.html")), {"say": "Faster sync."}]],
                    },
                },
                {"tool": "wait_for", "args": {"kind": "task", "id": "t_1"}},
            ],
            [{"say": "The task read the page."}],
        ],
    )
    with counted_ids():
        live.start(parent)
        drain()
    task = Task.objects.get()
    task_rise = only_rise(task.chat)
    assert shape(only_rise(parent)) == {
        "before": Taint.NONE,
        "after": Taint.UNTRUSTED,
        "cause": TaintCause.TASK,
        "url": "",
        "path": "",
        "source": task.chat_id,
        "source_taint": Taint.UNTRUSTED,
        "source_rise": task_rise.pk,
        "turn": None,
        "step": None,
        "detail": {"task": "t_1"},
    }
    assert task_rise.cause == TaintCause.PAGE


def test_read_chat_of_a_careful_chat_is_written_down_with_the_step_that_read_it(live, site):
    a = page_reader(site)
    live.start(a)
    drain()
    reader = ChatFactory(
        title="Catch up", script=[[{"tool": "read_chat", "args": {"chat": a.public_id}}]]
    )
    live.start(reader)
    drain()

    step = step_of(reader, "read_chat")
    assert step.error == "" and "Sync is twice as fast." in step.result
    assert shape(only_rise(reader)) == {
        "before": Taint.NONE,
        "after": Taint.UNTRUSTED,
        "cause": TaintCause.CHAT_READ,
        "url": "",
        "path": "",
        "source": a.pk,
        "source_taint": Taint.UNTRUSTED,
        "source_rise": only_rise(a).pk,
        "turn": step.turn_id,
        "step": step.pk,
        "detail": {"chat": a.public_id},
    }


def test_search_chats_finding_a_careful_chat_is_written_down_naming_the_chat_found(live, site):
    clean = ChatFactory(title="Notes", script=[[{"say": "Sync settings live in config.toml."}]])
    live.start(clean)
    a = page_reader(site)
    live.start(a)
    drain()
    reader = ChatFactory(
        title="Catch up", script=[[{"tool": "search_chats", "args": {"query": "sync"}}]]
    )
    live.start(reader)
    drain()

    step = step_of(reader, "search_chats")
    assert a.public_id in step.result and clean.public_id in step.result
    assert shape(only_rise(reader)) == {
        "before": Taint.NONE,
        "after": Taint.UNTRUSTED,
        "cause": TaintCause.CHAT_READ,
        "url": "",
        "path": "",
        "source": a.pk,  # the careful one of the two found
        "source_taint": Taint.UNTRUSTED,
        "source_rise": only_rise(a).pk,
        "turn": step.turn_id,
        "step": step.pk,
        "detail": {"chat": a.public_id},
    }


def test_reading_a_chat_that_read_nothing_outside_writes_nothing(live):
    clean = ChatFactory(title="Notes", script=[[{"say": "Sync settings live in config.toml."}]])
    live.start(clean)
    drain()
    reader = ChatFactory(
        title="Catch up",
        script=[
            [
                {"tool": "read_chat", "args": {"chat": clean.public_id}},
                {"tool": "search_chats", "args": {"query": "sync"}},
            ]
        ],
    )
    live.start(reader)
    drain()
    assert step_of(reader, "search_chats").error == ""
    assert rises(reader) == []
