"""The reply runtime: starting, stepping, stopping and ending replies; Ask and Plan; queues; tasks."""

from __future__ import annotations

import os

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction

from chats import events
from chats.models import (
    Conversation,
    Entry,
    EntryKind,
    EntryRole,
    Lane,
    Mode,
    Origin,
    QueuedInput,
    StartedBy,
    Status,
    Step,
    TaskState,
    Turn,
    TurnState,
)
from chats.runtime.chats import ConchError
from chats.runtime.claims import turn_claim
from chats.runtime.runner import Runner, drain
from chats.runtime.selectors import chats_snapshot
from chats.runtime.stepping import turn_advance
from chats.runtime.turns import (
    ERR_NOTHING_TO_APPROVE,
    conversation_stop,
    message_send,
    task_start,
    turn_approve,
    turn_deny,
)
from chats.tools import registry
from chats.tools.registry import (
    EDITING_FILES,
    READING_FILES,
    RUNNING_A_COMMAND,
    Tool,
    ToolResult,
    tools_offered,
)
from tests.factories import ChatFactory, ConversationFactory

WRITE_TOOLS = ("edit_file", "write_file", "run_command")


def say(text):
    return {"say": text}


def tool(name, **args):
    return {"tool": name, "args": args}


def play(chat, text="go"):
    """The person's message, and the reply run to its end; the reply, fresh from the database."""
    turn = message_send(conversation=chat, text=text)
    drain()
    turn.refresh_from_db()
    return turn


def real(path) -> str:
    return os.path.realpath(path)


def status_events(seen, chat):
    return [e for e in seen if e.type == events.STATUS and e.conversation_id == chat.public_id]


# ---------------------------------------------------------------------------
# A person's message starts a reply; steps are recorded


def test_a_persons_message_starts_a_reply(agent):
    chat = ChatFactory(reply=[say("Hello.")])

    turn = message_send(conversation=chat, text="Hi there")

    assert isinstance(turn, Turn)
    assert turn.number == 1
    assert turn.state == TurnState.RUNNING
    assert turn.started_by == StartedBy.PERSON
    assert turn.lane == Lane.FOREGROUND
    assert turn.folder == chat.folder
    chat.refresh_from_db()
    assert chat.status == Status.WORKING
    first = chat.entries.get()
    assert (first.role, first.text, first.turn_id) == (EntryRole.PERSON, "Hi there", turn.pk)


def test_an_empty_message_is_refused_and_starts_nothing(agent):
    chat = ChatFactory(reply=[say("Hello.")])

    with pytest.raises(ConchError, match="needs some words"):
        message_send(conversation=chat, text="   ")

    assert not chat.turns.exists()


def test_each_step_is_recorded_with_its_tool_family_effect_and_args(agent, workspace):
    (workspace / "a.txt").write_text("hello\n")
    chat = ChatFactory(
        reply=[
            tool("read_file", path="a.txt"),
            tool("edit_file", path="a.txt", old="hello", new="bye"),
            tool("run_command", command="echo ran"),
            say("Done."),
        ]
    )

    turn = play(chat)

    steps = list(turn.steps.order_by("number"))
    assert [(s.number, s.tool, s.family, s.effect) for s in steps] == [
        (1, "read_file", READING_FILES, "read"),
        (2, "edit_file", EDITING_FILES, "write"),
        (3, "run_command", RUNNING_A_COMMAND, "write"),
    ]
    assert steps[0].args == {"path": "a.txt"}
    assert steps[1].args == {"path": "a.txt", "old": "hello", "new": "bye"}
    assert steps[2].args == {"command": "echo ran"}
    assert steps[0].result == "hello\n"
    assert "ran" in steps[2].result
    assert all(s.error == "" and s.ended_at is not None for s in steps)
    assert turn.step_family == ""  # nothing is running once the reply is over


def test_files_a_step_changed_are_added_to_the_reply_as_full_resolved_paths_in_first_changed_order(
    agent, workspace, tmp_path
):
    (workspace / "a.txt").write_text("one\n")
    link = tmp_path / "via-link"
    link.symlink_to(workspace, target_is_directory=True)  # the chat's folder is a link
    chat = ChatFactory(
        reply=[
            tool("write_file", path="b.txt", content="b\n"),
            tool("edit_file", path="a.txt", old="one", new="two"),
            tool("edit_file", path="./b.txt", old="b", new="bb"),
            tool("write_file", path="sub/c.txt", content="c\n"),
            tool("read_file", path="a.txt"),
        ],
        folder=link,
    )

    turn = play(chat)

    a, b, c = (real(workspace / name) for name in ("a.txt", "b.txt", "sub/c.txt"))
    assert turn.files_changed == [b, a, c]
    assert [s.files for s in turn.steps.order_by("number")] == [[b], [a], [b], [c], []]
    assert (workspace / "sub" / "c.txt").read_text() == "c\n"


def test_a_finished_reply_leaves_the_chat_idle(agent):
    chat = ChatFactory(reply=[say("All done.")])

    turn = play(chat)

    chat.refresh_from_db()
    assert turn.state == TurnState.COMPLETED
    assert turn.ended_at is not None
    assert chat.status == Status.IDLE
    assert chat.entries.last().text == "All done."


def test_a_chat_with_no_script_left_says_no_model_is_connected_and_finishes(agent):
    chat = ChatFactory()

    turn = play(chat)

    assert turn.state == TurnState.COMPLETED
    said = chat.entries.last()
    assert said.text.startswith("No model is connected, so nothing can answer you here yet")
    assert said.data == {"connect_model": True}  # the page shows the link to Connect a model


def test_a_reply_that_fails_leaves_the_chat_idle_with_the_reason(agent):
    chat = ChatFactory(reply=[{"fail": "The model went away."}])

    turn = play(chat)

    chat.refresh_from_db()
    assert turn.state == TurnState.FAILED
    assert turn.end_reason == "The model went away."
    assert chat.status == Status.IDLE


def test_events_go_out_after_commit_with_increasing_numbers(
    agent, published, django_capture_on_commit_callbacks
):
    chat = ChatFactory(reply=[tool("list_files"), say("Looked.")])
    published.clear()

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        play(chat)
        assert published == []  # nothing is sent before the transaction commits
    assert callbacks

    seqs = [e.seq for e in published]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert {e.owner_id for e in published} == {chat.owner_id}
    statuses = [(e.data["status"], e.data.get("ended")) for e in status_events(published, chat)]
    assert statuses == [(Status.WORKING, None), (Status.IDLE, TurnState.COMPLETED)]
    assert events.current_seq(chat.owner_id) == seqs[-1]


@pytest.mark.django_db(transaction=True)
def test_an_event_from_a_write_that_rolled_back_never_goes_out(agent, published):
    chat = ChatFactory(reply=[say("Hi.")])
    published.clear()

    with pytest.raises(RuntimeError), transaction.atomic():
        message_send(conversation=chat, text="go")
        assert published == []
        raise RuntimeError("the request failed after the write")

    assert published == []
    assert not chat.turns.exists()

    with transaction.atomic():
        message_send(conversation=chat, text="go")
        assert published == []
    assert [e.type for e in published] == [events.STATUS]


@pytest.mark.django_db(transaction=True)
def test_a_runner_takes_a_new_reply_when_its_status_is_published_not_at_its_next_look():
    """No event of its own tells the runners a reply can run: its chat's status does."""
    import threading

    chat = ChatFactory(reply=[say("Hello.")])
    ended = threading.Event()
    unsubscribe = events.subscribe(
        lambda event: ended.set() if event.data.get("ended") == TurnState.COMPLETED else None
    )
    runner = Runner(name="woken", poll=600).start()  # its own look: in ten minutes
    try:
        message_send(conversation=chat, text="hi")
        assert ended.wait(30), "the runner slept through the reply's status"
    finally:
        runner.stop(timeout=30)
        unsubscribe()


# ---------------------------------------------------------------------------
# Stop


def test_stopping_a_running_reply_ends_it_stopped_and_the_runner_does_nothing_more(
    agent, workspace, published, django_capture_on_commit_callbacks
):
    (workspace / "a.txt").write_text("a\n")
    chat = ChatFactory(
        reply=[
            tool("read_file", path="a.txt"),
            tool("write_file", path="b.txt", content="b"),
            say("x"),
        ]
    )
    turn = message_send(conversation=chat, text="go")
    assert turn_claim(worker="runner-1", limit=1) == [turn.pk]
    assert turn_advance(turn_id=turn.pk, worker="runner-1").more
    published.clear()

    with django_capture_on_commit_callbacks(execute=True):
        stopped = conversation_stop(conversation=chat, by="person")

    assert stopped.pk == turn.pk
    turn.refresh_from_db()
    chat.refresh_from_db()
    assert turn.state == TurnState.STOPPED
    assert turn.ended_at is not None
    assert chat.status == Status.STOPPED
    assert chat.entries.filter(role=EntryRole.CONCH, text="Stopped: You stopped it.").exists()
    [event] = status_events(published, chat)
    assert (event.data["status"], event.data["ended"]) == (Status.STOPPED, TurnState.STOPPED)

    advance = turn_advance(turn_id=turn.pk, worker="runner-1")
    Runner(name="runner-1").drive(turn.pk)
    drain()

    assert not advance.more
    assert turn.steps.count() == 1
    assert not (workspace / "b.txt").exists()
    assert chat.entries.filter(role=EntryRole.ASSISTANT).count() == 0


def test_stopping_a_chat_with_nothing_running_does_nothing(agent):
    chat = ChatFactory(reply=[say("Hi.")])
    play(chat)

    assert conversation_stop(conversation=chat) is None
    chat.refresh_from_db()
    assert chat.status == Status.IDLE


@pytest.fixture
def stop_midway(workspace):
    """A tool that writes a file and, while it runs, the person presses Stop."""

    def run(ctx, args):
        conversation_stop(conversation=ctx.conversation)
        target = os.path.realpath(os.path.join(ctx.folder, "midway.txt"))
        with open(target, "w") as fh:
            fh.write("written while stopping\n")
        ctx.files_changed.append(target)
        return ToolResult("wrote midway.txt")

    made = registry.register(
        Tool(
            name="stop_midway",
            description="Test tool: stops its own chat while it writes.",
            schema={"type": "object", "properties": {}},
            family=EDITING_FILES,
            effect="write",
            run=run,
        )
    )
    yield made
    registry._tools.pop(made.name, None)


def test_a_step_running_when_the_chat_is_stopped_is_recorded_and_nothing_runs_after_it(
    agent, workspace, stop_midway
):
    chat = ChatFactory(
        reply=[tool("stop_midway"), tool("write_file", path="after.txt", content="no"), say("x")]
    )

    turn = play(chat)

    step = turn.steps.get()
    midway = real(workspace / "midway.txt")
    assert turn.state == TurnState.STOPPED
    assert (step.tool, step.result, step.files) == ("stop_midway", "wrote midway.txt", [midway])
    assert step.ended_at is not None
    assert turn.files_changed == [midway]  # its file really changed
    assert not (workspace / "after.txt").exists()


# ---------------------------------------------------------------------------
# Ask mode and Plan mode


@pytest.mark.parametrize(
    ("call", "untouched"),
    [
        (tool("edit_file", path="a.txt", old="hello", new="bye"), "a.txt"),
        (tool("write_file", path="a.txt", content="replaced"), "a.txt"),
        (tool("run_command", command="echo ran > a.txt"), "a.txt"),
    ],
    ids=WRITE_TOOLS,
)
def test_in_ask_mode_a_write_waits_for_the_persons_ok_and_changes_nothing_yet(
    agent, workspace, published, django_capture_on_commit_callbacks, call, untouched
):
    (workspace / "a.txt").write_text("hello\n")
    chat = ChatFactory(reply=[call, say("Done.")], mode=Mode.ASK)

    with django_capture_on_commit_callbacks(execute=True):
        turn = play(chat)

    chat.refresh_from_db()
    assert turn.state == TurnState.NEEDS_YOU
    assert turn.ended_at is None  # the reply is still open, waiting
    assert turn.pending_action["tool"] == call["tool"]
    assert turn.pending_action["args"] == call["args"]
    assert chat.status == Status.NEEDS_YOU
    assert (workspace / untouched).read_text() == "hello\n"
    assert not turn.steps.exists()
    assert status_events(published, chat)[-1].data["asks"] == call["tool"]


def test_in_ask_mode_reading_goes_ahead_without_asking(agent, workspace):
    (workspace / "a.txt").write_text("hello\n")
    chat = ChatFactory(reply=[tool("read_file", path="a.txt"), say("Read it.")], mode=Mode.ASK)

    turn = play(chat)

    assert turn.state == TurnState.COMPLETED
    assert turn.steps.get().result == "hello\n"


def test_approving_runs_the_waiting_write_and_the_reply_carries_on(agent, workspace):
    (workspace / "a.txt").write_text("hello\n")
    chat = ChatFactory(
        reply=[tool("edit_file", path="a.txt", old="hello", new="bye"), say("Edited.")],
        mode=Mode.ASK,
    )
    turn = play(chat)

    approved = turn_approve(turn=turn)
    chat.refresh_from_db()
    assert approved.state == TurnState.RUNNING
    assert chat.status == Status.WORKING
    drain()

    turn.refresh_from_db()
    chat.refresh_from_db()
    assert (workspace / "a.txt").read_text() == "bye\n"
    step = turn.steps.get()
    assert (step.tool, step.error, step.files) == ("edit_file", "", [real(workspace / "a.txt")])
    assert turn.files_changed == [real(workspace / "a.txt")]
    assert turn.state == TurnState.COMPLETED
    assert turn.pending_action is None
    assert chat.entries.last().text == "Edited."
    assert chat.status == Status.IDLE


def test_denying_records_a_refused_step_and_leaves_the_file_alone(agent, workspace):
    (workspace / "a.txt").write_text("hello\n")
    chat = ChatFactory(
        reply=[tool("edit_file", path="a.txt", old="hello", new="bye"), say("Left it.")],
        mode=Mode.ASK,
    )
    turn = play(chat)

    turn_deny(turn=turn)
    drain()

    turn.refresh_from_db()
    assert (workspace / "a.txt").read_text() == "hello\n"
    step = turn.steps.get()
    assert (step.tool, step.error, step.files) == ("edit_file", "The person said no to this.", [])
    assert turn.files_changed == []
    assert turn.state == TurnState.COMPLETED
    assert turn.pending_action is None
    assert chat.entries.last().text == "Left it."


def test_approving_a_reply_that_is_not_waiting_is_refused(agent, workspace):
    chat = ChatFactory(reply=[tool("list_files"), say("Looked.")], mode=Mode.ASK)
    running = message_send(conversation=chat, text="go")

    with pytest.raises(ConchError, match=ERR_NOTHING_TO_APPROVE):
        turn_approve(turn=running)
    with pytest.raises(ConchError, match=ERR_NOTHING_TO_APPROVE):
        turn_deny(turn=running)

    drain()
    running.refresh_from_db()
    assert running.state == TurnState.COMPLETED
    with pytest.raises(ConchError, match=ERR_NOTHING_TO_APPROVE):
        turn_approve(turn=running)


def test_a_stopped_request_cannot_be_approved_afterwards(agent, workspace):
    chat = ChatFactory(reply=[tool("write_file", path="a.txt", content="x")], mode=Mode.ASK)
    turn = play(chat)
    conversation_stop(conversation=chat)

    with pytest.raises(ConchError, match=ERR_NOTHING_TO_APPROVE):
        turn_approve(turn=turn)
    drain()

    assert not (workspace / "a.txt").exists()


def test_plan_mode_offers_no_write_tools(agent):
    planning = ChatFactory(mode=Mode.PLAN)
    auto = ChatFactory(mode=Mode.AUTO)

    offered = {t.name for t in tools_offered(planning)}

    assert not offered & set(WRITE_TOOLS)
    assert {"read_file", "list_files"} <= offered
    assert set(WRITE_TOOLS) <= {t.name for t in tools_offered(auto)}
    assert all(t.effect == "read" for t in tools_offered(planning))


@pytest.mark.parametrize(
    "call",
    [
        tool("edit_file", path="a.txt", old="hello", new="bye"),
        tool("write_file", path="a.txt", content="replaced"),
        tool("run_command", command="echo ran > a.txt"),
    ],
    ids=WRITE_TOOLS,
)
def test_a_write_in_plan_mode_is_refused_and_nothing_is_written(agent, workspace, call):
    (workspace / "a.txt").write_text("hello\n")
    chat = ChatFactory(reply=[call, say("Planned.")], mode=Mode.PLAN)

    turn = play(chat)

    step = turn.steps.get()
    assert step.tool == call["tool"]
    assert step.error == f"The tool {call['tool']!r} isn't offered to this chat."
    assert step.files == []
    assert (workspace / "a.txt").read_text() == "hello\n"
    assert turn.state == TurnState.COMPLETED  # the reply carries on
    assert chat.entries.last().text == "Planned."


# ---------------------------------------------------------------------------
# Messages during a reply are queued, never lost


@pytest.mark.django_db(transaction=True)
def test_a_message_during_a_reply_is_queued_and_starts_the_next_reply(agent):
    chat = ChatFactory(script=[[say("First answer.")], [say("Second answer.")]])
    first = message_send(conversation=chat, text="first")

    queued = message_send(conversation=chat, text="second")

    assert isinstance(queued, QueuedInput)
    assert chat.turns.count() == 1
    drain()
    queued.refresh_from_db()
    assert queued.taken_at is not None
    second = chat.turns.get(number=2)
    assert second.started_by == StartedBy.PERSON
    assert second.state == TurnState.COMPLETED
    assert second.entries.get(role=EntryRole.PERSON).text == "second"
    first.refresh_from_db()
    assert first.state == TurnState.COMPLETED
    assert [e.text for e in chat.entries.all()] == [
        "first",
        "First answer.",
        "second",
        "Second answer.",
    ]


@pytest.mark.django_db(transaction=True)
def test_several_messages_queued_during_a_reply_start_one_reply_in_the_order_sent(agent):
    chat = ChatFactory(script=[[say("One.")], [say("Two.")]])
    message_send(conversation=chat, text="first")
    message_send(conversation=chat, text="second")
    message_send(conversation=chat, text="third")

    drain()

    assert chat.turns.count() == 2
    assert chat.turns.get(number=2).entries.get(role=EntryRole.PERSON).text == "second\n\nthird"
    assert not chat.queued_inputs.filter(taken_at__isnull=True).exists()


@pytest.mark.django_db(transaction=True)
def test_a_message_queued_before_a_stop_is_kept_and_taken_by_the_persons_next_message(
    agent,
):
    chat = ChatFactory(script=[[tool("list_files"), say("One.")], [say("Two.")]])
    message_send(conversation=chat, text="first")
    queued = message_send(conversation=chat, text="also this")

    conversation_stop(conversation=chat)
    drain()

    queued.refresh_from_db()
    assert queued.taken_at is None  # a stop doesn't start anything, and doesn't lose it
    assert chat.turns.count() == 1
    chat.refresh_from_db()
    assert chat.status == Status.STOPPED

    second = message_send(conversation=chat, text="now go on")

    queued.refresh_from_db()
    assert queued.taken_at is not None
    assert second.entries.get(role=EntryRole.PERSON).text == "also this\n\nnow go on"
    drain()
    second.refresh_from_db()
    assert second.state == TurnState.COMPLETED


@pytest.mark.django_db(transaction=True)
def test_a_message_while_a_write_waits_for_the_persons_ok_is_queued(agent, workspace):
    chat = ChatFactory(
        script=[[tool("write_file", path="a.txt", content="x")], [say("Next.")]], mode=Mode.ASK
    )
    turn = play(chat)

    queued = message_send(conversation=chat, text="and then this")

    assert isinstance(queued, QueuedInput)
    turn_approve(turn=turn)
    drain()
    assert (workspace / "a.txt").read_text() == "x"
    assert chat.turns.get(number=2).entries.get(role=EntryRole.PERSON).text == "and then this"


# ---------------------------------------------------------------------------
# A question to the person


def test_a_question_ends_the_reply_needing_you_and_the_answer_starts_the_next(agent):
    chat = ChatFactory(script=[[{"ask": "Which file should I fix?"}], [say("Fixing a.txt.")]])

    asked = play(chat)

    chat.refresh_from_db()
    assert asked.state == TurnState.NEEDS_YOU
    assert asked.ended_at is not None
    assert chat.status == Status.NEEDS_YOU
    question = chat.entries.get(role=EntryRole.ASSISTANT)
    assert (question.text, question.data) == ("Which file should I fix?", {"question": True})
    with pytest.raises(ConchError, match=ERR_NOTHING_TO_APPROVE):
        turn_approve(turn=asked)

    answered = play(chat, "a.txt")

    chat.refresh_from_db()
    assert isinstance(answered, Turn)
    assert answered.number == 2
    assert answered.state == TurnState.COMPLETED
    assert chat.status == Status.IDLE
    assert [e.text for e in chat.entries.filter(kind=EntryKind.MESSAGE)] == [
        "go",
        "Which file should I fix?",
        "a.txt",
        "Fixing a.txt.",
    ]


# ---------------------------------------------------------------------------
# Tasks


def test_a_task_runs_as_a_chat_of_its_own_on_the_subagent_lane(agent):
    parent = ChatFactory(reply=[say("Started a task.")])
    play(parent)

    task = task_start(
        parent=parent, title="Read the logs", prompt="Find the error.", script=[[say("Found it.")]]
    )

    assert task.state == TaskState.RUNNING
    assert task.started_at is not None
    chat = task.chat
    assert (chat.origin, chat.parent_id, chat.folder) == (Origin.TASK, parent.pk, parent.folder)
    turn = chat.turns.get()
    assert (turn.lane, turn.started_by) == (Lane.SUBAGENT, StartedBy.TASK)
    assert turn.chain_id == parent.turns.get().chain_id
    prompt = chat.entries.get()
    assert (prompt.role, prompt.text) == (EntryRole.CONCH, "Find the error.")


def test_a_done_tasks_result_is_its_last_assistant_message(agent):
    parent = ChatFactory()
    task = task_start(
        parent=parent,
        title="Count",
        script=[[say("Counting…"), tool("list_files"), say("There are 3 files.")]],
    )

    drain()

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert task.result == "There are 3 files."
    assert task.ended_at is not None


def test_a_task_in_a_planning_chat_asks_before_it_writes(agent):
    parent = ChatFactory(mode=Mode.PLAN)

    task = task_start(parent=parent, title="Try", script=[[say("ok")]])

    assert task.chat.mode == Mode.ASK


@pytest.mark.django_db(transaction=True)
def test_with_one_subagent_slot_a_second_task_waits_for_room_and_starts_when_the_first_is_done(
    agent, settings
):
    settings.CONCH_SUBAGENT_LANE = 1
    parent = ChatFactory()
    first = task_start(parent=parent, title="First", script=[[say("First done.")]])

    second = task_start(parent=parent, title="Second", script=[[say("Second done.")]])

    assert first.state == TaskState.RUNNING
    assert second.state == TaskState.WAITING_FOR_ROOM
    assert second.is_going
    assert not second.chat.turns.exists()

    # Play only the first task's reply; the second starts as the first ends.
    [claimed] = turn_claim(worker="w", limit=5)
    assert claimed == first.chat.turns.get().pk
    while turn_advance(turn_id=claimed, worker="w").more:
        pass

    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == TaskState.DONE
    assert second.state == TaskState.RUNNING
    assert second.chat.turns.get().state == TurnState.RUNNING
    drain()
    second.refresh_from_db()
    assert (second.state, second.result) == (TaskState.DONE, "Second done.")


@pytest.mark.django_db(transaction=True)
def test_a_task_whose_chat_is_busy_does_not_hold_up_the_other_tasks(agent, settings):
    settings.CONCH_SUBAGENT_LANE = 1
    parent = ChatFactory()
    first = task_start(parent=parent, title="First", script=[[say("1")]])
    second = task_start(parent=parent, title="Second", script=[[say("hi")], [say("2")]])
    third = task_start(parent=parent, title="Third", script=[[say("3")]])
    # The person opens the second task's chat and talks to it while it waits for room.
    message_send(conversation=second.chat, text="are you there?")

    drain()

    for task in (first, second, third):
        task.refresh_from_db()
    assert [t.state for t in (first, second, third)] == [TaskState.DONE] * 3
    assert [first.result, second.result, third.result] == ["1", "2", "3"]
    assert list(second.chat.turns.values_list("started_by", flat=True)) == [
        StartedBy.PERSON,
        StartedBy.TASK,
    ]


# ---------------------------------------------------------------------------
# The snapshot the chat list and the tools read


def test_the_snapshot_reads_a_thousand_chats_in_at_most_two_queries(
    owner, agent, second_owner, django_assert_max_num_queries
):
    chats = Conversation.objects.bulk_create(
        Conversation(owner=owner, agent=agent, title=f"Chat {n}", folder=f"/work/{n}")
        for n in range(1000)
    )
    ConversationFactory(owner=second_owner, agent=agent, title="Not yours", folder="/x")
    busy = chats[::100]
    Turn.objects.bulk_create(
        Turn(
            conversation=chat,
            number=1,
            folder=chat.folder,
            step_family=EDITING_FILES,
            files_changed=[f"{chat.folder}/a.py", f"{chat.folder}/b.py"],
        )
        for chat in busy
    )
    Conversation.objects.filter(pk__in=[c.pk for c in busy]).update(status=Status.WORKING)

    with django_assert_max_num_queries(2):
        every = chats_snapshot(owner_id=owner.pk)
    with django_assert_max_num_queries(2):
        working = chats_snapshot(owner_id=owner.pk, working=True)

    assert len(every) == 1000
    assert sum(1 for s in every if s.reply is not None) == len(busy)
    assert {s.pk for s in working} == {c.pk for c in busy}
    assert all(s.working for s in working)
    sample = next(s for s in working if s.pk == busy[3].pk)
    assert sample.reply.folder == busy[3].folder
    assert sample.reply.family == EDITING_FILES
    assert sample.reply.files_changed == (f"{busy[3].folder}/a.py", f"{busy[3].folder}/b.py")


def test_the_snapshot_shows_the_running_replys_folder_family_and_files(agent, workspace, owner):
    chat = ChatFactory(reply=[tool("write_file", path="a.txt", content="a"), tool("list_files")])
    idle = ChatFactory(title="Idle")
    turn = message_send(conversation=chat, text="go")
    turn_claim(worker="w", limit=1)
    turn_advance(turn_id=turn.pk, worker="w")
    # As if the next step had begun: the family is set while a step runs.
    Turn.objects.filter(pk=turn.pk).update(step_family=READING_FILES)

    [working] = chats_snapshot(owner_id=owner.pk, working=True)
    every = {s.pk: s for s in chats_snapshot(owner_id=owner.pk)}

    assert working.pk == chat.pk
    assert working.reply.folder == str(workspace)
    assert working.reply.family == READING_FILES
    assert working.reply.files_changed == (real(workspace / "a.txt"),)
    assert every[chat.pk].reply == working.reply
    assert every[idle.pk].reply is None


def test_the_snapshot_never_shows_another_owners_chats(agent, second_owner, owner):
    ChatFactory(reply=[say("hi")])
    message_send(conversation=Conversation.objects.get(), text="go")
    stranger = get_user_model().objects.get(pk=second_owner.pk)

    assert chats_snapshot(owner_id=stranger.pk) == []
    assert chats_snapshot(owner_id=stranger.pk, working=True) == []
    assert len(chats_snapshot(owner_id=owner.pk, working=True)) == 1


def test_steps_and_entries_of_a_reply_belong_to_it(agent):
    chat = ChatFactory(script=[[tool("list_files"), say("a")], [tool("list_files"), say("b")]])
    one = play(chat, "one")
    two = play(chat, "two")

    assert list(Step.objects.filter(turn=one).values_list("number", flat=True)) == [1]
    assert list(Step.objects.filter(turn=two).values_list("number", flat=True)) == [1]
    assert [e.text for e in Entry.objects.filter(turn=two)] == ["two", "b"]


def test_a_steps_stored_arguments_have_keys_and_passwords_taken_out(agent):
    from chats.models import Step
    from chats.runtime.runner import drain

    chat = ChatFactory(
        reply=[
            {
                "tool": "write_file",
                "args": {
                    "path": "env.txt",
                    "content": "API_KEY=sk-live-ABCDEFGHIJKLMNOPQRSTUV\npassword: hunter22\n",
                },
            }
        ]
    )
    message_send(conversation=chat, text="go")
    drain()
    step = Step.objects.get(turn__conversation=chat)
    assert "sk-live-ABCDEFGHIJKLMNOPQRSTUV" not in step.args["content"]
    assert "hunter22" not in step.args["content"]
    assert step.args["path"] == "env.txt"
