from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from chats.models import Entry, EntryKind, Turn
from chats.runtime.stepping import turn_advance
from chats.runtime.turns import message_send
from tests.once import made_once


class Stage:
    """Plays chats' scripted replies one action at a time, in the order a test says.

    The chats are made with ``tests.factories.ChatFactory``.
    """

    def __init__(self, owner, folder):
        self.owner = owner
        self.folder = folder

    def start(self, chat, text="go"):
        return message_send(conversation=chat, text=text)

    def step(self, chat, times=1):
        """Play ``times`` actions of the chat's open reply."""
        turn = Turn.objects.get(conversation=chat, ended_at__isnull=True)
        Turn.objects.filter(pk=turn.pk, claimed_by="").update(claimed_by="stage")
        for _ in range(times):
            advance = turn_advance(turn_id=turn.pk, worker="stage", honour_delays=False)
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


@pytest.fixture(scope="session")
def play_template(tmp_path_factory) -> Path:
    """A migrated SQLite file the tests' plays copy (``conch_play --template``), made by one
    play, once for the whole run (``made_once``).

    Migrating costs more than most plays; each play copies this file instead.
    """

    def make(folder: Path) -> Path:
        empty = folder / "empty.json"
        empty.write_text(
            json.dumps({"chats": [{"name": "a", "title": "A", "folder": ".", "script": []}]})
        )
        template = folder / "conch.sqlite3"
        made = subprocess.run(
            [sys.executable, "manage.py", "conch_play", str(empty), "--template", str(template)],
            cwd=settings.BASE_DIR,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert made.returncode == 0, made.stderr
        assert template.is_file()
        return template

    return made_once(tmp_path_factory, "play-template", make)


@pytest.fixture
def strangers_get_every_tool(agent):
    """The persona gives chats with other people every tool (the gateway's whole set), so that what
    refuses a cross-chat tool in such a chat is ADR 0134's own rule, ``offers_together``."""
    from chats.tools.registry import all_tools

    agent.stranger_tools = [tool.name for tool in all_tools()]
    agent.save(update_fields=["stranger_tools"])
    return agent
