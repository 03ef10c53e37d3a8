"""The file tools never open Conch's own home, nor another install's.

A chat working in ``~`` holds ``~/.conch``: its keys and database are in the chat's folder.
The sandbox hides the home from commands; the file tools refuse it too, by any road (a
relative path, an absolute one, a link), and the keys' values are scrubbed wherever else
they turn up.
"""

from __future__ import annotations

import os

import pytest
from cryptography.fernet import Fernet

from chats.models import Step
from chats.quoting import REDACTED, known_secrets
from chats.runtime.runner import drain
from chats.runtime.turns import message_send
from chats.tools.registry import ToolContext, ToolError, get_tool, validate_args
from chats.tools.workspace import ERR_CONCH_HOME
from tests.factories import ChatFactory, ConversationFactory, TurnFactory

KEY = Fernet.generate_key().decode()


@pytest.fixture
def home_inside(settings, workspace):
    """Conch's home inside the chat's folder, as ~/.conch is inside ~, with its keys."""
    home = workspace / ".conch"
    (home / "workspaces" / "default").mkdir(parents=True)
    (home / "secrets.key").write_text(KEY + "\n")
    (home / "secret_key").write_text("django-insecure-only-for-this-test\n")
    (home / "conch.sqlite3").write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    settings.CONCH_HOME = home
    settings.CONCH_SECRETS_KEYS = ()
    return home


def context(owner, agent, folder):
    chat = ConversationFactory(owner=owner, agent=agent, folder=str(folder))
    return ToolContext(conversation=chat, turn=TurnFactory(conversation=chat), folder=str(folder))


def run(name, ctx, **args):
    return get_tool(name).run(ctx, validate_args(get_tool(name), args))


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("read_file", {"path": ".conch/secrets.key"}),
        ("read_file", {"path": "./.conch/../.conch/secret_key"}),
        ("list_files", {"path": ".conch"}),
        ("write_file", {"path": ".conch/secrets.key", "content": "mine now"}),
        ("edit_file", {"path": ".conch/secret_key", "old": "django", "new": "x"}),
        ("write_file", {"path": ".conch/logs/new.txt", "content": "x"}),
    ],
)
def test_a_chat_whose_folder_holds_conchs_home_cannot_open_it(
    owner, agent, workspace, home_inside, tool, args
):
    ctx = context(owner, agent, workspace)
    with pytest.raises(ToolError) as refused:
        run(tool, ctx, **args)
    assert str(refused.value) == ERR_CONCH_HOME.format(
        path=args["path"], home=os.path.realpath(home_inside)
    )
    assert (home_inside / "secrets.key").read_text() == KEY + "\n"
    assert not (home_inside / "logs").exists()


def test_nor_by_an_absolute_path_or_a_link(owner, agent, workspace, home_inside):
    (workspace / "notes").symlink_to(home_inside, target_is_directory=True)
    (workspace / "key.txt").symlink_to(home_inside / "secrets.key")
    ctx = context(owner, agent, workspace)
    for path in (str(home_inside / "secrets.key"), "notes/secrets.key", "key.txt", "notes"):
        with pytest.raises(ToolError, match="inside Conch's own home"):
            run("read_file" if path != "notes" else "list_files", ctx, path=path)


def test_another_installs_home_is_known_by_what_is_in_it(owner, agent, workspace, home_inside):
    other = workspace / "old-conch"
    other.mkdir()
    (other / "secret_key").write_text("another install's key\n")
    (other / "conch.sqlite3").write_bytes(b"SQLite format 3\x00")
    ctx = context(owner, agent, workspace)
    with pytest.raises(ToolError, match="inside Conch's own home"):
        run("read_file", ctx, path="old-conch/secret_key")
    # One file named like a key is no home: a project may well have one.
    lone = workspace / "project"
    lone.mkdir()
    (lone / "secrets.key").write_text("the project's own fixture\n")
    assert "the project's own fixture" in run("read_file", ctx, path="project/secrets.key").text


def test_a_chat_working_in_the_homes_workspaces_works_as_ever(owner, agent, home_inside):
    folder = home_inside / "workspaces" / "default"
    (folder / "README.md").write_text("hello\n")
    ctx = context(owner, agent, folder)
    assert "hello" in run("read_file", ctx, path="README.md").text
    run("write_file", ctx, path="notes.txt", content="written")
    assert (folder / "notes.txt").read_text() == "written"
    with pytest.raises(ToolError):  # and the way up is still outside its folder
        run("read_file", ctx, path="../../secrets.key")


def test_a_chat_whose_folder_is_the_home_itself_opens_nothing_in_it(owner, agent, home_inside):
    ctx = context(owner, agent, home_inside)
    with pytest.raises(ToolError, match="inside Conch's own home"):
        run("list_files", ctx)


def test_the_secrets_key_is_scrubbed_wherever_else_it_turns_up(
    owner, agent, workspace, home_inside
):
    assert KEY in known_secrets(agent)
    (workspace / "backup.txt").write_text(f"the old key was {KEY}, keep it safe\n")
    chat = ChatFactory(
        title="Backup", script=[[{"tool": "read_file", "args": {"path": "backup.txt"}}]]
    )
    message_send(conversation=chat, text="read the backup")
    drain()
    result = Step.objects.get(turn__conversation=chat, tool="read_file").result
    assert KEY not in result and REDACTED in result
