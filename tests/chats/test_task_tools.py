"""start_background_task and task_status: room for tasks (ADR 0129, as ADR 0134 extends it)."""

from __future__ import annotations

import json

from chats.models import Step, TaskState, Turn
from chats.runtime.runner import drain
from chats.runtime.stepping import system_text_for, turn_advance
from chats.runtime.turns import message_send, task_start
from tests.factories import ChatFactory


def _status(chat):
    return json.loads(
        Step.objects.filter(turn__conversation=chat, tool="task_status").last().result
    )


def test_task_status_answers_capacity_and_tasks(owner, agent, workspace, settings):
    settings.CONCH_SUBAGENT_LANE = 1
    other = ChatFactory(owner=owner, title="Other", folder=str(workspace))
    task_start(parent=other, title="Someone else's", script=[[{"tool": "list_files", "args": {}}]])
    chat = ChatFactory(
        owner=owner,
        title="Mine",
        folder=str(workspace),
        script=[
            [
                {
                    "tool": "start_background_task",
                    "args": {"title": "Crawl", "script": [[{"say": "crawled"}]]},
                },
                {"tool": "task_status", "args": {}},
            ]
        ],
    )
    message_send(conversation=chat, text="go")
    # Play only the parent's reply, so the tasks are still where they were.
    turn = Turn.objects.get(conversation=chat)
    Turn.objects.filter(pk=turn.pk).update(claimed_by="t")
    turn_advance(turn_id=turn.pk, worker="t", honour_delays=False)
    turn_advance(turn_id=turn.pk, worker="t", honour_delays=False)
    answer = _status(chat)
    assert set(answer) == {"capacity", "tasks"}
    assert answer["capacity"]["at_once"] == 1
    assert answer["capacity"]["working"] == 1
    assert answer["capacity"]["waiting"] == 1
    assert answer["capacity"]["held_back_by"] == ["1 waiting for room: 1 of 1 places are taken"]
    assert [t["title"] for t in answer["tasks"]] == ["Crawl"]  # only this chat's tasks
    assert answer["tasks"][0]["state"] == TaskState.WAITING_FOR_ROOM


def test_the_tasks_prompt_says_to_wait_for_a_task_instead_of_checking(owner, agent, workspace):
    chat = ChatFactory(owner=owner, title="Mine", folder=str(workspace))
    text = system_text_for(chat)
    assert "To carry on once a task is done, wait for it" in text
    from chats.tools.registry import get_tool

    assert (
        "wait for it with wait_for instead of checking on it"
        in get_tool("start_background_task").description
    )


def test_a_bad_task_script_is_a_clear_tool_error(owner, agent, workspace):
    chat = ChatFactory(
        owner=owner,
        title="Mine",
        folder=str(workspace),
        script=[
            [
                {
                    "tool": "start_background_task",
                    "args": {"title": "Bad", "script": [[{"tool": "nope"}]]},
                }
            ]
        ],
    )
    message_send(conversation=chat, text="go")
    drain()
    step = Step.objects.get(tool="start_background_task")
    assert "There is no tool called 'nope'." in step.error
