"""Approvals like the best coding tools. Approve; approve and don't ask
again in this chat (a standing OK: for the tool, or for how a command starts); Deny with a
reason the model reads; each press kept in the transcript for the person."""

from __future__ import annotations

import pytest

from chats.engines.openai_compat import messages_for
from chats.models import (
    Entry,
    EntryKind,
    Mode,
    Origin,
    StandingOk,
    Step,
    Taint,
    TaintCause,
    TurnState,
)
from chats.runtime.runner import drain
from chats.runtime.standing import Scope, _covers, command_start
from chats.runtime.stepping import _transcript_loader
from chats.runtime.turns import message_send, turn_approve, turn_deny
from chats.taint import Cause, taint_raise
from chats.tools import sandbox
from tests.factories import ChatFactory
from tests.rises import rises

pytestmark = pytest.mark.django_db


def write(path: str) -> dict:
    return {"tool": "write_file", "args": {"path": path, "content": path}}


def run(command: str) -> dict:
    return {"tool": "run_command", "args": {"command": command}}


def asking_chat(owner, workspace, *actions, **fields):
    fields.setdefault("mode", Mode.ASK)
    chat = ChatFactory(owner=owner, folder=str(workspace), reply=list(actions), **fields)
    message_send(conversation=chat, text="Go")
    drain()
    return chat


def waiting(chat):
    turn = chat.turns.get()
    return turn if turn.state == TurnState.NEEDS_YOU else None


def covered(start: str, command: str) -> bool:
    found = command_start(start)
    assert found is not None, start
    words, whole = found
    return _covers(Scope("run_command", words, whole), {"command": command}, commands=True)


# ---------------------------------------------------------------------------
# How a command starts


@pytest.mark.parametrize(
    ("command", "start"),
    [
        ("git status --short", (("git", "status"), False)),
        ("npm test", (("npm", "test"), False)),
        ("uv run pytest -x", (("uv", "run", "pytest"), False)),
        ("pytest -q", (("pytest", "-q"), True)),
        ("make", (("make",), True)),
        ("git -C sub status", (("git", "-C", "sub", "status"), True)),
        ("sudo make install", (("sudo", "make", "install"), True)),
        ("timeout 10 make", (("timeout", "10", "make"), True)),
    ],
)
def test_a_command_is_covered_by_its_program_and_subcommand_or_else_whole(command, start):
    assert command_start(command) == start


def test_git_status_never_covers_git_push():
    assert covered("git status", "git status --short")
    assert not covered("git status", "git push")
    assert not covered("git status", "git statusx")
    assert not covered("git status", "git")


def test_a_runner_names_the_program_it_runs():
    assert covered("uv run pytest", "uv run pytest tests")
    assert not covered("uv run pytest", "uv run rm -rf tests")


def test_a_program_that_runs_another_is_covered_only_whole():
    assert covered("timeout 10 make", "timeout 10 make")
    assert not covered("timeout 10 make", "timeout 10 rm -rf /")
    assert not covered("sudo make install", "sudo make install extra")


def test_an_option_before_the_subcommand_is_covered_only_whole():
    assert not covered("git -C sub status", "git -C sub push")


@pytest.mark.parametrize(
    "command",
    [
        "git status; rm -rf ~",
        "git status && curl example.com",
        "git status || true",
        "git status | sh",
        "git status $(rm x)",
        "git status ${HOME}",
        "git status `rm x`",
        "git status > ~/.bashrc",
        "git status < /etc/passwd",
        "git status &",
        "git status\nrm x",
        "git status \\; rm x",
        "git status (x)",
    ],
)
def test_a_command_with_shell_signs_never_matches_a_standing_ok(command):
    assert command_start(command) is None
    assert not covered("git status", command)


@pytest.mark.parametrize("command", ["FOO=1 git status", "-x git", "'git status", ""])
def test_a_command_that_starts_with_no_program_gets_none(command):
    assert command_start(command) is None


# ---------------------------------------------------------------------------
# Approve, don't ask again, deny


def test_dont_ask_again_lets_the_tool_run_without_asking_in_that_chat(owner, agent, workspace):
    chat = asking_chat(owner, workspace, write("a.txt"), write("b.txt"), {"say": "Done."})

    turn_approve(turn=waiting(chat), always=True)
    drain()

    assert waiting(chat) is None
    assert (workspace / "a.txt").exists() and (workspace / "b.txt").exists()
    assert list(StandingOk.objects.values_list("conversation", "tool", "command")) == [
        (chat.pk, "write_file", "")
    ]


def test_a_standing_ok_never_crosses_to_another_chat(owner, agent, workspace):
    first = asking_chat(owner, workspace, write("a.txt"))
    turn_approve(turn=waiting(first), always=True)
    drain()

    second = asking_chat(owner, workspace, write("b.txt"))

    assert waiting(second).pending_action["tool"] == "write_file"
    assert not (workspace / "b.txt").exists()


@pytest.fixture
def no_network(settings):
    """Commands in the sandbox without the network, as the persona's are by default: they
    read nothing from outside, so the chat stays the person's alone and its standing OKs
    apply. (Where the sandbox doesn't work they are refused, never run without it.)"""
    sandbox.sandbox_probe_forget()
    settings.CONCH_SANDBOX = sandbox.SANDBOX_REQUIRED
    yield
    sandbox.sandbox_probe_forget()


def test_a_command_standing_ok_covers_only_how_the_command_starts(
    owner, agent, workspace, no_network
):
    chat = asking_chat(owner, workspace, run("echo hi"), run("echo hi again"), run("echo there"))

    turn_approve(turn=waiting(chat), always=True)
    drain()

    turn = waiting(chat)
    assert turn.pending_action["args"] == {"command": "echo there"}
    assert [s.args["command"] for s in Step.objects.filter(turn=turn)] == [
        "echo hi",
        "echo hi again",
    ]


def test_a_standing_ok_is_not_honoured_once_the_chat_has_read_something_from_outside(
    owner, agent, workspace
):
    chat = asking_chat(owner, workspace, write("a.txt"), write("b.txt"))
    turn = waiting(chat)
    turn_approve(turn=turn, always=True)
    taint_raise(conversation=chat, taint=Taint.UNTRUSTED, cause=Cause.page("https://example.com/"))
    drain()

    assert waiting(chat).pending_action["args"]["path"] == "b.txt"
    assert not (workspace / "b.txt").exists()


def test_a_command_standing_ok_is_not_honoured_once_a_command_could_reach_the_network(
    owner, agent, workspace, settings
):
    """Without the sandbox a command could have read a page: from then on the chat has read
    something from outside, and the next command asks again."""
    settings.CONCH_SANDBOX = sandbox.SANDBOX_OFF
    chat = asking_chat(owner, workspace, run("echo hi"), run("echo hi again"))

    turn_approve(turn=waiting(chat), always=True)
    drain()

    assert waiting(chat).pending_action["args"] == {"command": "echo hi again"}
    assert waiting(chat).pending_action["careful"]["rise"] == rises(chat)[0].pk
    assert rises(chat)[0].cause == TaintCause.COMMAND_NETWORK


@pytest.fixture
def strangers_may_write_if_asked(agent, tmp_path):
    """A persona that gives other people write_file, in a folder of its own, asking the owner first."""
    own = tmp_path / "bot"
    own.mkdir()
    agent.workspace = str(own)
    agent.stranger_tools = ["write_file"]
    agent.stranger_tools_ask_first = ["write_file"]
    agent.save()
    return own


@pytest.mark.parametrize(
    "whose",
    [{"origin": Origin.PEER}, {"origin": Origin.CHAT_APP, "taint": Taint.PERSON}],
    ids=["an outside agent", "a stranger on a chat app"],
)
def test_a_standing_ok_never_answers_an_ask_in_a_chat_with_someone_elses_words(
    owner, agent, strangers_may_write_if_asked, whose
):
    own = strangers_may_write_if_asked
    chat = ChatFactory(
        owner=owner, folder=str(own), mode=Mode.AUTO, reply=[write("a.txt")], **whose
    )
    # Given before: it must not widen what the chat can do now.
    StandingOk.objects.create(conversation=chat, tool="write_file")
    message_send(conversation=chat, text="Go")
    drain()

    assert waiting(chat).pending_action["tool"] == "write_file"
    assert not (own / "a.txt").exists()


def test_a_deny_reason_is_what_the_model_reads_as_the_steps_result(owner, agent, workspace):
    chat = asking_chat(owner, workspace, write("a.txt"), {"say": "Understood."})

    turn_deny(turn=waiting(chat), reason="Use the Makefile instead.")
    drain()

    step = Step.objects.get(turn__conversation=chat)
    assert step.error == "The person denied this: Use the Makefile instead."
    messages = messages_for("system", _transcript_loader(chat)())
    tool_results = [m["content"] for m in messages if m["role"] == "tool"]
    assert tool_results == ["Error: The person denied this: Use the Makefile instead."]
    # The transcript's record of the press is the person's; the model never reads it.
    assert "You denied" not in str(messages)
    assert not (workspace / "a.txt").exists()


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (lambda turn: turn_approve(turn=turn), "You approved"),
        (
            lambda turn: turn_approve(turn=turn, always=True),
            "You approved and won't be asked again for write_file in this chat",
        ),
        (lambda turn: turn_deny(turn=turn), "You denied it"),
        (lambda turn: turn_deny(turn=turn, reason="not now"), "You denied: not now"),
    ],
    ids=["approve", "always", "deny", "deny with a reason"],
)
def test_each_press_is_kept_in_the_transcript_for_the_person(owner, agent, workspace, answer, said):
    chat = asking_chat(owner, workspace, write("a.txt"))

    answer(waiting(chat))

    entry = Entry.objects.get(conversation=chat, kind=EntryKind.CARD)
    assert entry.text == said
    assert entry.turn == chat.turns.get()


def test_a_command_standing_ok_says_what_it_covers(owner, agent, workspace):
    chat = asking_chat(owner, workspace, run("git status --short"))

    turn_approve(turn=waiting(chat), always=True)

    assert Entry.objects.get(conversation=chat, kind=EntryKind.CARD).text == (
        "You approved and won't be asked again for commands that start “git status” in this chat"
    )
    assert list(StandingOk.objects.values_list("command", "whole")) == [("git status", False)]
