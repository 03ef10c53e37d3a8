"""A second account controls nothing of the owner's.

The admin can make more accounts. None but the owner (a superuser) and staff sees or
changes the model the personas answer with, and each account's chats work only beneath
the folders the owner set for it (chats/roots.py): by default its own folder in Conch's
home, never the owner's files or Conch's own home.
"""

from __future__ import annotations

import html
import os

import pytest
from django.test import Client

from chats.gateway.forms import ERR_ROUTINE_NOT_YOUR_ACCOUNT
from chats.gateway.models import ChannelAccount, Routine
from chats.models import Agent, AuthProfile, Conversation, FolderRoot, Step, TurnState
from chats.personas import ERR_NO_PERSONA
from chats.roots import ERR_OUTSIDE_ROOTS, own_folder
from chats.runtime.chats import ConchError, conversation_create, default_agent
from chats.runtime.runner import drain
from chats.runtime.turns import message_send
from chats.views import ERR_NOT_YOURS_TO_CONNECT
from tests.factories import AgentFactory, ChatFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def home(settings, tmp_path):
    home = tmp_path / "conch-home"
    home.mkdir()
    (home / "secrets.key").write_text("not really a key\n")
    settings.CONCH_HOME = home
    return home


def new_chat(client, folder, title="Mine", agent=None):
    agent = agent or Agent.objects.filter(slug__in=["theirs", "main"]).order_by("-slug").first()
    data = {"title": title, "folder": str(folder), "mode": "auto", "agent": agent.pk}
    return client.post("/chats/new/", data)


@pytest.fixture
def theirs(second_owner, agent, tmp_path):
    """The persona the owner gave the second account in the admin."""
    return AgentFactory(slug="theirs", name="Theirs", owner=second_owner, workspace=str(tmp_path))


@pytest.fixture
def second(second_owner, agent, theirs):
    client = Client()
    client.force_login(second_owner)
    return client


def test_a_second_account_neither_sees_nor_sets_the_model(second, agent):
    agent.engine = "openai"
    agent.engine_config = {"base_url": "http://127.0.0.1:9/v1", "model": "owners-model"}
    agent.save()
    page = second.get("/connect/")
    assert page.status_code == 403 and page.content.decode() == ERR_NOT_YOURS_TO_CONNECT
    assert "127.0.0.1:9" not in page.content.decode()
    saved = second.post(
        "/connect/try/",
        {"base_url": "http://127.0.0.1:1/v1", "model": "theirs", "key": "k", "action": "save"},
    )
    assert saved.status_code == 403
    agent = default_agent()
    assert agent.engine_config["base_url"] == "http://127.0.0.1:9/v1"
    assert not AuthProfile.objects.exists()


def test_the_owner_still_reaches_connect(owner, agent):
    client = Client()
    client.force_login(owner)
    assert client.get("/connect/").status_code == 200


@pytest.mark.parametrize("where", ["conch home", "owners workspace", "root"])
def test_a_second_account_cannot_point_a_chat_at_the_owners_files(
    second, second_owner, home, workspace, where
):
    folder = {"conch home": home, "owners workspace": workspace, "root": "/"}[where]
    made = new_chat(second, folder)
    assert made.status_code == 400
    roots = os.path.realpath(own_folder(second_owner))
    assert ERR_OUTSIDE_ROOTS.format(folder=folder, roots=roots) in html.unescape(made.text)
    assert not Conversation.objects.filter(owner=second_owner).exists()


def test_a_second_accounts_chat_works_in_its_own_folder_by_default(second, second_owner, home):
    made = new_chat(second, "")
    assert made.status_code == 302
    chat = Conversation.objects.get(owner=second_owner)
    assert chat.folder == os.path.realpath(own_folder(second_owner))
    assert os.path.isdir(chat.folder) and (os.stat(chat.folder).st_mode & 0o777) == 0o700


def test_a_root_the_owner_sets_in_the_admin_is_where_it_may_work(second, second_owner, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    FolderRoot.objects.create(account=second_owner, path=str(shared))
    made = new_chat(second, shared)
    assert made.status_code == 302


def test_a_root_taken_away_later_refuses_the_next_step(second_owner, theirs, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "notes.txt").write_text("the owner's notes\n")
    root = FolderRoot.objects.create(account=second_owner, path=str(shared))
    chat = ChatFactory(
        owner=second_owner,
        agent=theirs,
        folder=str(shared),
        script=[[{"tool": "read_file", "args": {"path": "notes.txt"}}]],
    )
    root.delete()
    message_send(conversation=chat, text="read the notes")
    drain()
    step = Step.objects.get(turn__conversation=chat, tool="read_file")
    assert (
        step.result == "" and "outside the folders this account's chats may work in" in step.error
    )


def test_the_owner_with_no_roots_set_works_anywhere(owner, agent, tmp_path):
    client = Client()
    client.force_login(owner)
    made = new_chat(client, tmp_path)
    assert made.status_code == 302


# ---------------------------------------------------------------------------
# Every persona belongs to an owner (chats/personas.py)


def test_a_second_account_never_answers_with_the_owners_persona(second_owner, agent):
    client = Client()
    client.force_login(second_owner)

    page = client.get("/").content.decode()
    made = new_chat(client, "", agent=agent)

    assert html.unescape(ERR_NO_PERSONA) in html.unescape(page)
    assert f'value="{agent.pk}"' not in page  # the owner's persona isn't offered
    assert made.status_code == 400
    assert "That persona isn't this account's to use." in html.unescape(made.text)
    with pytest.raises(ConchError, match="No persona is this account's yet"):
        conversation_create(owner=second_owner, title="x")
    with pytest.raises(ConchError, match="isn't this account's to use"):
        conversation_create(owner=second_owner, title="x", agent=agent)
    assert not Conversation.objects.filter(owner=second_owner).exists()


def test_a_persona_given_to_the_second_account_is_what_its_chats_answer_with(second, theirs):
    made = new_chat(second, "")

    assert made.status_code == 302
    assert Conversation.objects.get(title="Mine").agent == theirs


def test_a_persona_taken_away_later_answers_no_more(second_owner, theirs, agent):
    chat = ChatFactory(owner=second_owner, agent=theirs, script=[[{"say": "hello"}]])
    theirs.owner = None  # the owner took it back: the install's own again
    theirs.save()

    message_send(conversation=chat, text="hi")
    drain()

    turn = chat.turns.get()
    assert turn.state == TurnState.FAILED
    assert "isn't this account's to use" in turn.end_reason
    assert not chat.entries.filter(role="assistant").exists()


def test_the_owners_chats_still_answer_with_the_installs_personas(owner, agent):
    chat = ChatFactory(owner=owner, script=[[{"say": "hello"}]])
    message_send(conversation=chat, text="hi")
    drain()
    assert chat.turns.get().state == TurnState.COMPLETED


def test_a_second_accounts_routine_never_sends_through_the_owners_bot(
    second, second_owner, owner, theirs
):
    ChannelAccount.objects.create(owner=owner, channel="telegram", account_id="ownersbot")
    form = {
        "name": "Spam",
        "schedule": "* * * * *",
        "time_zone": "UTC",
        "agent": theirs.pk,
        "mode": "auto",
        "text": "say hello",
        "missed": "skip",
        "deliver": "peer",
        "channel": "telegram",
        "account_id": "ownersbot",
        "peer": "12345",
    }

    made = second.post("/gateway/routines/new/", form)

    assert made.status_code == 400
    said = html.unescape(made.content.decode())
    assert ERR_ROUTINE_NOT_YOUR_ACCOUNT.format(channel="telegram", account="ownersbot") in said
    assert not Routine.objects.filter(owner=second_owner).exists()
    ChannelAccount.objects.create(owner=second_owner, channel="telegram", account_id="theirbot")
    assert second.post("/gateway/routines/new/", form | {"account_id": "theirbot"}).status_code in (
        200,
        302,
    )
    assert Routine.objects.filter(owner=second_owner).exists()
