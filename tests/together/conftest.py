from __future__ import annotations

import pytest

from chats.models import Entry, EntryKind, Turn
from chats.runtime import services


class Stage:
    """Plays chats' scripted replies one action at a time, in the order a test says.

    The chats are made with ``tests.factories.ChatFactory``.
    """

    def __init__(self, owner, folder):
        self.owner = owner
        self.folder = folder

    def start(self, chat, text="go"):
        return services.message_send(conversation=chat, text=text)

    def step(self, chat, times=1):
        """Play ``times`` actions of the chat's open reply."""
        turn = Turn.objects.get(conversation=chat, ended_at__isnull=True)
        Turn.objects.filter(pk=turn.pk, claimed_by="").update(claimed_by="stage")
        for _ in range(times):
            advance = services.turn_advance(turn_id=turn.pk, worker="stage", honour_delays=False)
            if not advance.more:
                break
        Turn.objects.filter(pk=turn.pk, claimed_by="stage").update(claimed_by="")
        return turn

    def notes(self, chat):
        return list(
            Entry.objects.filter(conversation=chat, kind=EntryKind.NOTE, data__at__isnull=False)
            .order_by("seq")
            .values_list("text", flat=True)
        )


@pytest.fixture
def stage(owner, agent, workspace):
    return Stage(owner, workspace)


def edit(path, old, new):
    return {"tool": "edit_file", "args": {"path": path, "old": old, "new": new}}


def write(path, content="x"):
    return {"tool": "write_file", "args": {"path": path, "content": content}}


def look():
    return {"tool": "list_files", "args": {}}


def command(cmd="true"):
    return {"tool": "run_command", "args": {"command": cmd}}


@pytest.fixture
def live(transactional_db, owner, agent, workspace):
    """A stage whose commits really commit, so on-commit work (events, waking, starting replies) runs."""
    return Stage(owner, workspace)


def message(chat, text, start_reply=False):
    return {
        "tool": "message_chat",
        "args": {"chat": chat.public_id, "text": text, "start_reply": start_reply},
    }


def wait_chat(chat):
    return {"tool": "wait_for", "args": {"kind": "chat", "id": chat.public_id}}
