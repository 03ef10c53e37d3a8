"""The trust timeline's record: every rise of a chat's taint is written down where it
happens (``chats.taint.taint_raise``), with its cause, in the rise's transaction.

Each cause here is made to happen as it does for the person: a page read with
fetch_page from a server on loopback, the same page read by a command that could reach
the network (and not by one in the sandbox without it), a task's result read with
task_status, a task started by a chat that was careful. The causes of the gateway's doors are in
tests/gateway/test_taint_rises.py, and those of chats working together in
tests/together/test_taint_rises.py.
"""

from __future__ import annotations

import pytest
from django.db import close_old_connections

from chats import events
from chats.models import Conversation, Step, Taint, TaintCause, TaintRise, Task
from chats.runtime.runner import drain
from chats.runtime.turns import message_send, turn_start
from chats.taint import Cause, taint_raise
from chats.timeline import chat_timeline
from chats.tools import sandbox
from chats.tools.registry import ToolContext, get_tool
from tests.commands import command_fetching
from tests.factories import ChatFactory
from tests.rises import rises, shape, step_of

PAGE = "<html><head><title>Release notes</title></head><body><p>Sync is faster.</p></body></html>"


@pytest.fixture
def site(outside_site):
    outside_site.page("/notes", PAGE)
    return outside_site


def fetch(url: str) -> dict:
    return {"tool": "fetch_page", "args": {"url": url}}


def say(words: str) -> dict:
    return {"say": words}


def command_ok() -> dict:
    return {"tool": "run_command", "args": {"command": "true"}}


# ---------------------------------------------------------------------------
# Each cause, made to happen


def test_a_page_read_is_written_down_with_its_address_its_reply_and_its_step(
    owner, agent, site, django_capture_on_commit_callbacks, published
):
    url = site.url("/notes")
    chat = ChatFactory(owner=owner, title="Read the notes", script=[[fetch(url), say("Read.")]])
    with django_capture_on_commit_callbacks(execute=True):
        message_send(conversation=chat, text="read the release notes")
        drain()

    (rise,) = rises(chat)
    step = step_of(chat, "fetch_page")
    assert shape(rise) == {
        "before": Taint.NONE,
        "after": Taint.UNTRUSTED,
        "cause": TaintCause.PAGE,
        "url": url,
        "path": "",
        "source": None,
        "source_taint": "",
        "source_rise": None,
        "turn": step.turn_id,
        "step": step.pk,
        "detail": {},
    }
    # The chat's page hears why in Conch's words: the cause's kind, never the address.
    (raised,) = [e for e in published if e.data.get("taint") == Taint.UNTRUSTED]
    assert raised.data["why"] == "read a web page"


def test_a_second_page_in_a_careful_chat_writes_nothing_more(owner, agent, site):
    url = site.url("/notes")
    chat = ChatFactory(
        owner=owner,
        title="Read twice",
        script=[[fetch(url), fetch(site.url("/notes?again")), say("ok")]],
    )
    message_send(conversation=chat, text="read it twice")
    drain()
    assert len(site.requests) == 2  # both pages were read
    (rise,) = rises(chat)  # the first made it careful; the second raised nothing
    assert rise.url == url


def test_a_tasks_result_read_with_task_status_names_the_task_and_why_it_was_careful(
    owner, agent, site
):
    url = site.url("/notes")
    chat = ChatFactory(
        owner=owner,
        title="Release",
        script=[
            [
                {
                    "tool": "start_background_task",
                    "args": {"title": "Read the notes", "script": [[fetch(url), say("Faster.")]]},
                }
            ],
            [{"tool": "task_status", "args": {}}],
        ],
    )
    message_send(conversation=chat, text="read the notes in a task")
    drain()
    task = Task.objects.get(parent=chat)
    assert rises(chat) == []  # the task read the page, not this chat
    message_send(conversation=chat, text="how did it go?")
    drain()

    (task_rise,) = rises(task.chat)
    (rise,) = rises(chat)
    step = step_of(chat, "task_status")
    assert shape(rise) == {
        "before": Taint.NONE,
        "after": Taint.UNTRUSTED,
        "cause": TaintCause.TASK,
        "url": "",
        "path": "",
        "source": task.chat_id,
        "source_taint": Taint.UNTRUSTED,
        "source_rise": task_rise.pk,  # the task's own rise: it read the page
        "turn": step.turn_id,
        "step": step.pk,
        "detail": {"task": task.public_id},
    }
    assert (task_rise.cause, task_rise.url) == (TaintCause.PAGE, url)


def test_a_task_started_by_a_careful_chat_is_careful_from_its_start_and_says_whose(
    owner, agent, site
):
    url = site.url("/notes")
    chat = ChatFactory(
        owner=owner,
        title="Release",
        script=[
            [
                fetch(url),
                {
                    "tool": "start_background_task",
                    "args": {"title": "Go on", "script": [[say("ok")]]},
                },
            ]
        ],
    )
    message_send(conversation=chat, text="read, then hand it on")
    drain()

    (page_rise,) = rises(chat)
    task = Task.objects.get(parent=chat)
    (rise,) = rises(task.chat)
    assert shape(rise) == {
        "before": Taint.NONE,
        "after": Taint.UNTRUSTED,
        "cause": TaintCause.PARENT,
        "url": "",
        "path": "",
        "source": chat.pk,
        "source_taint": Taint.UNTRUSTED,
        "source_rise": page_rise.pk,
        "turn": None,
        "step": None,
        "detail": {},
    }
    assert rise.at <= Task.objects.get(pk=task.pk).created_at  # written as it was made


def test_a_task_of_a_chat_that_is_not_careful_has_no_timeline(owner, agent):
    chat = ChatFactory(
        owner=owner,
        title="Release",
        script=[
            [{"tool": "start_background_task", "args": {"title": "Go on", "script": [[say("ok")]]}}]
        ],
    )
    message_send(conversation=chat, text="hand it on")
    drain()
    assert not TaintRise.objects.exists()


# ---------------------------------------------------------------------------
# A command that could reach the network: it may fetch a page, as fetch_page does


@pytest.fixture
def commands(settings):
    """Whether bwrap works is asked afresh for each test here, and forgotten after it."""
    sandbox.sandbox_probe_forget()
    yield settings
    sandbox.sandbox_probe_forget()


def taint_as_it_reads(site, chat: Conversation) -> None:
    """Each request the site answers notes the chat's taint as the request came."""

    def taint_now() -> dict:
        try:
            return {"taint": Conversation.objects.get(pk=chat.pk).taint}
        finally:
            close_old_connections()

    site.on_request = taint_now


def run_command_in(chat: Conversation, command: dict) -> Step:
    """Play ``chat``'s reply, which runs ``command``, and give its step."""
    Conversation.objects.filter(pk=chat.pk).update(script=[[command, say("Done.")]])
    message_send(conversation=chat, text="check the notes")
    drain()
    return step_of(chat, "run_command")


def timeline_words(chat: Conversation) -> list[str]:
    return [row.did.text for row in chat_timeline(chat, viewer_id=chat.owner_id).rows]


@pytest.mark.django_db(transaction=True)
def test_a_command_in_the_sandbox_with_the_network_is_written_down_before_it_runs(
    owner, agent, site, commands, published
):
    commands.CONCH_SANDBOX = sandbox.SANDBOX_REQUIRED  # fails, not passes, where bwrap can't
    agent.engine_config = {"command_network": True}
    agent.save()
    chat = ChatFactory(owner=owner, title="Check the notes")
    taint_as_it_reads(site, chat)

    step = run_command_in(chat, command_fetching(site.url("/notes")))

    assert step.sandboxed and "Sync is faster." in step.result  # it did read the page
    assert [r["taint"] for r in site.requests] == [Taint.UNTRUSTED]  # marked before it read
    (rise,) = rises(chat)
    assert shape(rise) == {
        "before": Taint.NONE,
        "after": Taint.UNTRUSTED,
        "cause": TaintCause.COMMAND_NETWORK,
        "url": "",
        "path": "",
        "source": None,
        "source_taint": "",
        "source_rise": None,
        "turn": step.turn_id,
        "step": step.pk,
        "detail": {"sandboxed": True},
    }
    assert timeline_words(chat) == [
        "ran a command that could reach the network "
        "(in the sandbox, with the network its persona allows)"
    ]
    (raised,) = [e for e in published if e.data.get("taint") == Taint.UNTRUSTED]
    assert raised.data["why"] == "ran a command that could reach the network"


@pytest.mark.django_db(transaction=True)
def test_a_command_in_the_sandbox_without_the_network_raises_nothing(owner, agent, site, commands):
    commands.CONCH_SANDBOX = sandbox.SANDBOX_REQUIRED
    chat = ChatFactory(owner=owner, title="Check the notes")

    step = run_command_in(chat, command_fetching(site.url("/notes")))

    assert step.sandboxed and "Sync is faster." not in step.result  # it tried, and couldn't
    assert step.result.startswith("exit status 1")
    assert site.requests == []
    assert rises(chat) == [] and Conversation.objects.get(pk=chat.pk).taint == Taint.NONE


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("way", ["off", "auto where bwrap fails"])
def test_a_command_without_the_sandbox_is_written_down_before_it_runs(
    owner, agent, site, commands, broken_bwrap, way
):
    commands.CONCH_SANDBOX = sandbox.SANDBOX_OFF if way == "off" else sandbox.SANDBOX_AUTO
    chat = ChatFactory(owner=owner, title="Check the notes")
    taint_as_it_reads(site, chat)

    step = run_command_in(chat, command_fetching(site.url("/notes")))

    assert not step.sandboxed and "Sync is faster." in step.result
    assert [r["taint"] for r in site.requests] == [Taint.UNTRUSTED]
    (rise,) = rises(chat)
    assert (rise.cause, rise.after, rise.step_id, rise.detail) == (
        TaintCause.COMMAND_NETWORK,
        Taint.UNTRUSTED,
        step.pk,
        {"sandboxed": False},
    )
    assert timeline_words(chat) == [
        "ran a command that could reach the network (without the sandbox)"
    ]


def test_a_command_whose_mark_cannot_be_written_does_not_run(
    owner, agent, workspace, commands, monkeypatch
):
    from chats import taint as taint_module

    commands.CONCH_SANDBOX = sandbox.SANDBOX_OFF
    chat = ChatFactory(owner=owner, title="Touch")

    def broken(**kwargs):
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(taint_module, "taint_rise_record", broken)
    turn = turn_start(conversation=chat, started_by="person", text="go")
    ctx = ToolContext(conversation=chat, turn=turn, folder=str(workspace))
    with pytest.raises(RuntimeError):
        get_tool("run_command").run(ctx, {"command": "touch ran.txt"})
    assert not (workspace / "ran.txt").exists()
    assert Conversation.objects.get(pk=chat.pk).taint == Taint.NONE


def test_a_second_command_in_a_careful_chat_writes_nothing_more(owner, agent, site, commands):
    commands.CONCH_SANDBOX = sandbox.SANDBOX_OFF
    chat = ChatFactory(owner=owner, title="Twice", script=[[command_ok(), command_ok(), say("ok")]])
    message_send(conversation=chat, text="go")
    drain()
    (rise,) = rises(chat)
    assert rise.step_id == step_of(chat, "run_command").pk  # the first one's


def test_a_chat_with_someone_elses_words_stays_as_careful_as_it_is(owner, agent, commands):
    """Taint only grows: a command with the network in a chat with someone else's words
    (in the sandbox, as commands always are there) runs, and writes no rise."""
    commands.CONCH_SANDBOX = sandbox.SANDBOX_REQUIRED
    agent.engine_config = {"command_network": True}
    agent.save()
    chat = ChatFactory(owner=owner, outsider=True, title="A stranger's chat")
    before = rises(chat)
    turn = turn_start(conversation=chat, started_by="person", text="go")
    tool = get_tool("run_command")
    ctx = ToolContext(conversation=chat, turn=turn, folder=agent.workspace, sandbox_required=True)

    assert tool.run(ctx, {"command": "true"}).text == "exit status 0"
    assert Conversation.objects.get(pk=chat.pk).taint == Taint.PERSON
    assert rises(chat) == before


# ---------------------------------------------------------------------------
# The rules of the record


def test_a_chat_made_careful_without_its_cause_is_refused(owner, agent):
    from chats.runtime.chats import conversation_create

    with pytest.raises(ValueError, match="needs the cause"):
        conversation_create(owner=owner, agent=agent, title="Careful", taint=Taint.UNTRUSTED)
    assert not Conversation.objects.filter(title="Careful").exists()


def test_a_rise_is_never_changed(owner, agent):
    chat = ChatFactory(owner=owner, title="Read")
    taint_raise(conversation=chat, taint=Taint.UNTRUSTED, cause=Cause.page("https://example.com/a"))
    (rise,) = rises(chat)
    rise.url = "https://example.com/something-else"
    with pytest.raises(TypeError, match="append-only"):
        rise.save()
    with pytest.raises(TypeError, match="append-only"):
        TaintRise.objects.filter(pk=rise.pk).update(url="https://example.com/b")
    with pytest.raises(TypeError, match="append-only"):
        chat.taint_rises.update(after=Taint.NONE)
    assert TaintRise.objects.get(pk=rise.pk).url == "https://example.com/a"


def test_taint_never_falls_and_a_rise_that_does_not_happen_writes_nothing(owner, agent):
    chat = ChatFactory(owner=owner, title="Group")
    stranger = Cause.stranger(channel="telegram", sender="mallory")
    assert taint_raise(conversation=chat, taint=Taint.PERSON, cause=stranger)
    for level in (Taint.PERSON, Taint.UNTRUSTED, Taint.NONE):
        assert not taint_raise(conversation=chat, taint=level, cause=Cause.page("https://x.test/"))
    assert Conversation.objects.get(pk=chat.pk).taint == Taint.PERSON
    assert [(r.before, r.after, r.cause) for r in rises(chat)] == [
        (Taint.NONE, Taint.PERSON, TaintCause.STRANGER)
    ]


def test_a_copy_of_the_chat_read_before_another_raised_it_writes_nothing(owner, agent):
    """Two raisers at once: the second holds a copy read before the first raised the chat.
    It looks again under the chat's row lock, and neither lowers the taint nor writes a
    rise that never happened."""
    chat = ChatFactory(owner=owner, title="Read")
    stale = Conversation.objects.get(pk=chat.pk)
    taint_raise(
        conversation=chat, taint=Taint.PERSON, cause=Cause.stranger(channel="t", sender="m")
    )

    assert not taint_raise(
        conversation=stale, taint=Taint.UNTRUSTED, cause=Cause.page("https://x.test/")
    )
    assert stale.taint == Taint.PERSON  # the copy learns what the chat is now
    assert Conversation.objects.get(pk=chat.pk).taint == Taint.PERSON
    assert [r.cause for r in rises(chat)] == [TaintCause.STRANGER]


def test_each_rise_carries_on_from_where_the_one_before_it_ended(owner, agent):
    chat = ChatFactory(owner=owner, title="Read, then a group")
    taint_raise(conversation=chat, taint=Taint.UNTRUSTED, cause=Cause.page("https://x.test/"))
    taint_raise(
        conversation=chat, taint=Taint.PERSON, cause=Cause.stranger(channel="t", sender="m")
    )
    assert [(r.before, r.after) for r in rises(chat)] == [
        (Taint.NONE, Taint.UNTRUSTED),
        (Taint.UNTRUSTED, Taint.PERSON),
    ]


def test_the_rise_and_its_record_are_one_transaction(owner, agent, monkeypatch):
    """A record that can't be written takes the rise back with it: never a rise without its cause."""
    from chats import taint as taint_module

    chat = ChatFactory(owner=owner, title="Read")

    def broken(**kwargs):
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(taint_module, "taint_rise_record", broken)
    with pytest.raises(RuntimeError):
        taint_raise(conversation=chat, taint=Taint.UNTRUSTED, cause=Cause.page("https://x.test/"))
    assert Conversation.objects.get(pk=chat.pk).taint == Taint.NONE


def test_a_rise_goes_with_its_chat_and_a_source_chat_deleted_leaves_the_rise(owner, agent):
    source = ChatFactory(owner=owner, title="Read the page")
    taint_raise(conversation=source, taint=Taint.UNTRUSTED, cause=Cause.page("https://x.test/"))
    reader = ChatFactory(owner=owner, title="Reader")
    taint_raise(
        conversation=reader,
        taint=Taint.UNTRUSTED,
        cause=Cause.message(source, message_id="m_1"),
    )
    source.delete()
    (rise,) = rises(reader)
    assert (rise.source_id, rise.source_rise_id, rise.source_taint) == (
        None,
        None,
        Taint.UNTRUSTED,  # what it was then stays: "a chat that is gone" was careful
    )
    reader.delete()
    assert not TaintRise.objects.exists()


def test_the_event_of_a_rise_goes_to_the_chats_owner_only(
    owner, second_owner, agent, django_capture_on_commit_callbacks, published
):
    chat = ChatFactory(owner=owner, title="Read")
    with django_capture_on_commit_callbacks(execute=True):
        taint_raise(conversation=chat, taint=Taint.UNTRUSTED, cause=Cause.page("https://x.test/"))
    raised = [e for e in published if "taint" in e.data]
    assert [(e.type, e.owner_id, e.conversation_id) for e in raised] == [
        (events.CONVERSATION_UPDATED, owner.pk, chat.public_id)
    ]
