"""The task tools: ``start_background_task`` and ``task_status`` (ADR 0129).

A task starts, or waits for room, in ``chats.runtime.turns``; the tool asks the
runtime for it through ``ToolContext.start_task``.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

from chats.limits import LIMITS
from chats.models import Effect, Origin, Taint, Task, TaskState
from chats.taint import Cause, taint_raise
from chats.tools.registry import Tool, ToolContext, ToolError, ToolResult, family_add, register

STARTING_A_TASK = "starting a task"
CHECKING_TASKS = "checking on tasks"

ERR_NO_REPLY = "start_background_task: a task is started from a running reply."

TASKS_PROMPT = """\
Tasks. start_background_task starts work that runs on its own while you carry on. \
To carry on once a task is done, wait for it (wait_for with kind "task") instead of checking on it; \
task_status tells you how much room there is for tasks and what each of yours is doing."""


def capacity() -> dict[str, Any]:
    """How many tasks run at once now, how many work and wait across every chat, and what holds the rest."""
    at_once = settings.CONCH_SUBAGENT_LANE
    working = Task.objects.filter(state=TaskState.RUNNING).count()
    waiting_for_room = Task.objects.filter(
        state__in=[TaskState.QUEUED, TaskState.WAITING_FOR_ROOM]
    ).count()
    waiting_for_ok = Task.objects.filter(state=TaskState.WAITING_FOR_OK).count()
    held_back = []
    if waiting_for_room:
        held_back.append(
            f"{waiting_for_room} waiting for room: {working} of {at_once} places are taken"
        )
    if waiting_for_ok:
        held_back.append(f"{waiting_for_ok} waiting for the person's OK")
    return {
        "at_once": at_once,
        "working": working,
        "waiting": waiting_for_room + waiting_for_ok,
        "held_back_by": held_back or ["nothing"],
    }


def _task_row(task: Task) -> dict[str, Any]:
    row = {"id": task.public_id, "title": task.title, "state": task.state}
    if task.state == TaskState.DONE and task.result:
        row["result"] = task.result[-800:]
    if task.reason and task.state not in (TaskState.DONE, TaskState.RUNNING):
        row["reason"] = task.reason
    return row


def _task_status(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    tasks = list(
        Task.objects.filter(parent=ctx.conversation).select_related("chat").order_by("created_at")
    )
    rows = [_task_row(t) for t in tasks]
    # A task's words are an intake: a task that read something from outside taints the
    # chat that reads its result, before that chat chooses its next action.
    for task, row in zip(tasks, rows, strict=True):
        if ("result" in row or "reason" in row) and task.chat and task.chat.taint != Taint.NONE:
            taint_raise(
                conversation=ctx.conversation,
                taint=Taint.UNTRUSTED,
                cause=Cause.task(
                    task.chat, task_id=task.public_id, turn=ctx.turn, step=ctx.step_id
                ),
            )
    answer = {"capacity": capacity(), "tasks": rows}
    return ToolResult(json.dumps(answer, ensure_ascii=False, indent=1))


def _start_background_task(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    if ctx.start_task is None:
        raise ToolError(ERR_NO_REPLY)
    try:
        task = ctx.start_task(
            title=args["title"], prompt=args.get("prompt", ""), script=args.get("script")
        )
    except ValueError as exc:  # the scripted engine's ScriptError names the bad action
        raise ToolError(f"start_background_task: {exc}") from None
    where = (
        "It is running."
        if task.state == TaskState.RUNNING
        else "It is waiting for room, and starts when there is."
    )
    return ToolResult(
        f"Started the task “{task.title}” ({task.public_id}). {where} "
        f"To carry on once it's done, wait for it: wait_for kind task, id {task.public_id}."
    )


def _may_start_tasks(conversation) -> bool:
    return conversation.origin not in (Origin.PEER, Origin.CLIENT, Origin.ARTIFACT)


def register_tools() -> None:
    family_add(STARTING_A_TASK, can="start tasks")
    family_add(CHECKING_TASKS, can="check on its tasks")
    register(
        Tool(
            name="start_background_task",
            description=(
                "Start a task that works in the background, as a chat of its own, while this reply carries on. "
                "To carry on once it's done, wait for it with wait_for instead of checking on it."
            ),
            schema={
                "type": "object",
                "properties": {
                    "title": {"type": "string", "minLength": 1, "maxLength": LIMITS.title_chars},
                    "prompt": {"type": "string"},
                    "script": {
                        "type": "array",
                        "description": "For scripted personas only: the task's replies.",
                    },
                },
                "required": ["title"],
                "additionalProperties": False,
            },
            family=STARTING_A_TASK,
            effect=Effect.WRITE,
            run=_start_background_task,
            offered=_may_start_tasks,
        )
    )
    register(
        Tool(
            name="task_status",
            description="How much room there is for tasks, and what each task this chat started is doing.",
            schema={"type": "object", "properties": {}, "additionalProperties": False},
            family=CHECKING_TASKS,
            effect=Effect.READ,
            run=_task_status,
        )
    )
