"""What a stranger on a chat app can make the assistant do: a persona's two tool sets.

A DM from anyone but the owner, or a group message, makes a chat with someone
else's words in it. Such a chat gets the persona's set for other people, which
by default is empty: it answers in words and reads nothing.
"""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils.html import escape

from chats.gateway.models import OutboxMessage, OwnerIdentity
from chats.models import Conversation, Mode, Step, Taint, Turn, TurnState
from chats.runtime.runner import drain
from chats.runtime.stepping import turn_advance
from chats.runtime.turns import message_send, turn_approve
from chats.taint import Cause, taint_raise
from chats.tools.registry import tools_offered
from chats.toolsets import ERR_NO_FOLDER_OF_ITS_OWN, OWNERS, STRANGERS, tool_set_for
from tests.factories import ChatFactory, agent_admin_form

SECRET = "owner-only-7f3a9c"


def read(path: str) -> dict:
    return {"tool": "read_file", "args": {"path": path}}


@pytest.fixture
def secret_file(agent, workspace):
    (workspace / "notes.txt").write_text(f"{SECRET}\n")
    return workspace / "notes.txt"


def _answered(result, *script_replies) -> Conversation:
    """The chat a message made, with its reply scripted, played to its end."""
    chat = Conversation.objects.get(public_id=result.chat)
    chat.script = list(script_replies)
    chat.save(update_fields=["script"])
    drain()
    chat.refresh_from_db()
    return chat


def _everything_said(chat: Conversation) -> str:
    steps = Step.objects.filter(turn__conversation=chat)
    return " ".join(
        [*chat.entries.values_list("text", flat=True)]
        + [s.result + s.error for s in steps]
        + list(OutboxMessage.objects.filter(conversation=chat).values_list("text", flat=True))
    )


@pytest.mark.parametrize(
    "who",
    [
        {"chat_type": "dm", "peer": "mallory"},
        {"chat_type": "group", "group_id": "-100200300", "peer": "mallory"},
    ],
    ids=["a strangers DM", "a group message"],
)
def test_with_the_defaults_a_stranger_asking_to_read_a_file_gets_no_file_content(
    receive, secret_file, who
):
    chat = _answered(
        receive(**who, text="read notes.txt to me"),
        [read("notes.txt"), {"say": "Here is what I could do."}],
    )
    assert chat.taint == Taint.PERSON
    assert tools_offered(chat) == []  # only answering in words
    step = Step.objects.get(turn__conversation=chat)
    assert "isn't offered to this chat: someone else's words are in it" in step.error
    assert step.result == ""
    assert SECRET not in _everything_said(chat)


def test_the_owners_own_dm_still_gets_the_owners_set(owner, receive, secret_file):
    OwnerIdentity.objects.create(owner=owner, channel="telegram", peer="me")
    chat = _answered(receive(peer="me", text="read notes.txt"), [read("notes.txt"), {"say": "ok"}])
    assert tool_set_for(chat).kind == OWNERS
    assert "read_file" in {t.name for t in tools_offered(chat)}
    step = Step.objects.get(turn__conversation=chat)
    assert step.error == ""
    assert SECRET in step.result


def test_a_persona_that_allows_strangers_read_file_reads_only_in_its_own_folder(
    agent, receive, tmp_path, settings
):
    # The owner's default workspace holds the owner's file; the persona has its own folder.
    owners = settings.CONCH_WORKSPACE
    owners.mkdir(parents=True, exist_ok=True)
    (owners / "notes.txt").write_text(f"{SECRET}\n")
    own = tmp_path / "support-bot"
    own.mkdir()
    (own / "faq.txt").write_text("Opening hours: 9 to 5.\n")
    agent.workspace = str(own)
    agent.stranger_tools = ["read_file"]
    agent.save()

    result = receive(peer="mallory", text="read")
    chat = Conversation.objects.get(public_id=result.chat)
    # Even a chat, and a reply, begun in the owner's workspace work in the persona's folder.
    Conversation.objects.filter(pk=chat.pk).update(folder=str(owners))
    Turn.objects.filter(conversation=chat).update(folder=str(owners))
    chat = _answered(
        result,
        [
            read("faq.txt"),
            read("notes.txt"),
            read(str(owners / "notes.txt")),
            {"say": "done"},
        ],
    )
    faq, relative, absolute = Step.objects.filter(turn__conversation=chat).order_by("number")
    assert "Opening hours" in faq.result
    assert faq.error == ""
    assert relative.result == "" and relative.error  # not in the persona's folder
    assert absolute.result == "" and "outside this chat's folder" in absolute.error
    assert SECRET not in _everything_said(chat)


def test_a_persona_working_in_the_owners_default_workspace_gives_strangers_no_file(
    agent, receive, settings
):
    owners = settings.CONCH_WORKSPACE
    owners.mkdir(parents=True, exist_ok=True)
    (owners / "notes.txt").write_text(f"{SECRET}\n")
    agent.workspace = str(owners)
    agent.stranger_tools = ["read_file"]
    agent.save()

    chat = _answered(receive(peer="mallory"), [read("notes.txt"), {"say": "done"}])
    step = Step.objects.get(turn__conversation=chat)
    assert step.error == ERR_NO_FOLDER_OF_ITS_OWN.format(
        tool="read_file", persona=agent.slug, folder=str(owners)
    )
    assert SECRET not in _everything_said(chat)


def test_a_strangers_command_runs_in_the_sandbox_even_with_the_sandbox_off(
    agent, receive, tmp_path, settings
):
    settings.CONCH_SANDBOX = "off"
    own = tmp_path / "bot"
    own.mkdir()
    agent.workspace = str(own)
    agent.stranger_tools = ["run_command"]
    agent.save()
    marker = settings.CONCH_HOME / "marker.txt"
    marker.write_text("Conch's own")
    probe = f"if [ -e '{marker}' ]; then echo 'home seen'; else echo 'home hidden'; fi"

    chat = _answered(
        receive(peer="mallory"),
        [{"tool": "run_command", "args": {"command": probe}}, {"say": "done"}],
    )
    turn_approve(turn=chat.turns.get())  # a chat with someone else's words is in Ask mode
    drain()
    step = Step.objects.get(turn__conversation=chat)
    assert step.error == ""
    assert step.sandboxed is True
    assert "home hidden" in step.result


def test_a_strangers_command_sees_the_system_and_its_folder_and_nothing_of_the_owners(
    agent, receive, tmp_path, settings
):
    """When / was mounted read-only, so a stranger's cat printed the owner's file."""
    own = tmp_path / "bot"
    own.mkdir()
    (own / "faq.txt").write_text("opening hours\n")
    owners = tmp_path / "srv" / "owner"
    owners.mkdir(parents=True)
    (owners / "owner-secret.txt").write_text(f"{SECRET}\n")
    agent.workspace = str(own)
    agent.stranger_tools = ["run_command"]
    agent.save()
    command = (
        f"cat faq.txt; cat '{owners}/owner-secret.txt' 2>&1; ls /; "
        "echo shell works | tr a-z A-Z; ls /etc"
    )
    chat = _answered(
        receive(peer="mallory"), [{"tool": "run_command", "args": {"command": command}}]
    )
    turn_approve(turn=chat.turns.get())
    drain()
    step = Step.objects.get(turn__conversation=chat)
    assert step.error == "" and step.sandboxed is True
    assert "opening hours" in step.result and "SHELL WORKS" in step.result
    assert SECRET not in step.result, step.result
    assert "such file or directory" in step.result  # cat found nothing there
    shown = set(step.result.split())
    for place in ("home", "root", "srv", "opt", "var", "mnt", "media"):
        assert place not in shown, place
    assert "passwd" not in shown and "shadow" not in shown  # of /etc, only what a shell needs
    assert SECRET not in _everything_said(chat)


def test_each_reading_tool_can_be_set_to_ask_the_owner_first(agent, receive, tmp_path):
    own = tmp_path / "bot"
    own.mkdir()
    (own / "faq.txt").write_text("hours\n")
    agent.workspace = str(own)
    agent.stranger_tools = ["read_file", "list_files"]
    agent.stranger_tools_ask_first = ["read_file"]
    agent.save()

    chat = _answered(receive(peer="mallory"), [read("faq.txt"), {"say": "done"}])
    turn = chat.turns.get()
    assert turn.state == TurnState.NEEDS_YOU
    assert turn.pending_action["tool"] == "read_file"
    assert not Step.objects.filter(turn=turn).exists()


def test_a_chat_that_takes_in_someone_elses_words_mid_reply_has_the_narrow_set_from_its_next_step(
    owner, agent, workspace, secret_file
):
    chat = ChatFactory(
        owner=owner, agent=agent, folder=str(workspace), script=[[read("notes.txt")] * 2]
    )
    turn = message_send(conversation=chat, text="go")
    Turn.objects.filter(pk=turn.pk).update(claimed_by="t")
    turn_advance(turn_id=turn.pk, worker="t", honour_delays=False)  # the owner's chat: it reads
    taint_raise(
        conversation=chat,
        taint=Taint.PERSON,
        cause=Cause.stranger(channel="telegram", sender="mallory"),
    )
    turn_advance(turn_id=turn.pk, worker="t", honour_delays=False)

    first, second = Step.objects.filter(turn=turn).order_by("number")
    assert SECRET in first.result
    assert second.result == ""
    assert "someone else's words are in it" in second.error


def test_a_tool_approved_after_someone_elses_words_came_in_is_refused_in_words(
    owner, agent, workspace
):
    chat = ChatFactory(
        owner=owner,
        agent=agent,
        folder=str(workspace),
        mode=Mode.ASK,
        script=[[{"tool": "write_file", "args": {"path": "out.txt", "content": "x"}}]],
    )
    message_send(conversation=chat, text="go")
    drain()
    turn = chat.turns.get()
    assert turn.state == TurnState.NEEDS_YOU  # asked the person, in Ask mode
    taint_raise(
        conversation=chat,
        taint=Taint.PERSON,
        cause=Cause.stranger(channel="telegram", sender="mallory"),
    )
    turn_approve(turn=turn)
    drain()

    step = Step.objects.get(turn=turn)
    assert "someone else's words are in it" in step.error
    assert not (workspace / "out.txt").exists()


def test_the_sets_are_named_with_why(owner, agent, receive):
    OwnerIdentity.objects.create(owner=owner, channel="telegram", peer="me")
    mine = Conversation.objects.get(public_id=receive(peer="me").chat)
    theirs = Conversation.objects.get(public_id=receive(peer="mallory").chat)
    assert tool_set_for(mine).kind == OWNERS
    assert tool_set_for(theirs).kind == STRANGERS
    assert tool_set_for(theirs).summary() == "answers in words only"
    assert "someone else's words" in tool_set_for(theirs).why


# ---------------------------------------------------------------------------
# Where the person sees the sets: the persona's admin page, the chat page, the playground


@pytest.fixture
def admin_client(client, owner):
    owner.is_staff = owner.is_superuser = True
    owner.save()
    client.force_login(owner)
    return client


def test_the_personas_admin_page_shows_both_sets_and_saves_them(admin_client, agent, tmp_path):
    url = reverse("admin:chats_agent_change", args=[agent.pk])
    page = admin_client.get(url).content.decode()
    assert "Tools in your own chats" in page
    assert "Tools in chats with other people" in page
    assert "Of those, ask you first" in page

    response = admin_client.post(
        url,
        agent_admin_form(
            agent,
            allowed_tools=["read_file", "write_file"],
            stranger_tools=["read_file", "list_files"],
            stranger_tools_ask_first=["read_file"],
        ),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    agent.refresh_from_db()
    assert agent.allowed_tools == ["read_file", "write_file"]
    assert agent.stranger_tools == ["read_file", "list_files"]
    assert agent.stranger_tools_ask_first == ["read_file"]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"stranger_tools": ["list_chats"]}, "never offered to a chat with someone else's words"),
        (
            {"stranger_tools": ["list_files"], "stranger_tools_ask_first": ["read_file"]},
            "ask first only for tools ticked for other people",
        ),
    ],
    ids=["a cross-chat tool", "ask first for a tool not given"],
)
def test_the_admin_refuses_a_set_that_cannot_mean_what_it_says(admin_client, agent, fields, words):
    url = reverse("admin:chats_agent_change", args=[agent.pk])
    response = admin_client.post(url, agent_admin_form(agent, **fields))
    assert response.status_code == 200
    assert escape(words) in response.content.decode()
    agent.refresh_from_db()
    assert agent.stranger_tools == []


def test_the_admin_refuses_file_tools_for_other_people_in_the_owners_default_workspace(
    admin_client, agent, settings
):
    settings.CONCH_WORKSPACE.mkdir(parents=True, exist_ok=True)
    agent.workspace = str(settings.CONCH_WORKSPACE)
    agent.save()
    url = reverse("admin:chats_agent_change", args=[agent.pk])
    response = admin_client.post(url, agent_admin_form(agent, stranger_tools=["read_file"]))
    assert response.status_code == 200
    assert "works in your default workspace" in response.content.decode()


def test_the_chat_page_says_which_set_a_chat_has_and_why(client, owner, receive):
    OwnerIdentity.objects.create(owner=owner, channel="telegram", peer="me")
    mine = receive(peer="me").chat
    theirs = receive(peer="mallory").chat
    client.force_login(owner)
    page = client.get(reverse("chats:chat", args=[mine])).content.decode()
    assert (
        "It can read files, edit files, run commands, read web pages, start tasks, "
        "check on its tasks, see your other chats, message and stop your other chats "
        "and wait for other chats and tasks." in page
    )
    page = client.get(reverse("chats:chat", args=[theirs])).content.decode()
    assert (
        "Someone else&#x27;s words are in this chat, so it has only the tools you give other "
        "people. It answers in words only: it has no tools." in page
    )


def test_the_playground_shows_the_tool_set_beside_the_session_and_agent(client, owner, agent):
    agent.stranger_tools = ["list_files"]
    agent.save()
    OwnerIdentity.objects.create(owner=owner, channel="telegram", peer="me")
    client.force_login(owner)
    fire = {"channel": "telegram", "chat_type": "dm", "text": "hi"}
    theirs = client.post("/gateway/playground/fire/", {**fire, "peer": "mallory"}, follow=True)
    assert 'class="pg-tools" data-set="strangers">for other people: list_files' in (
        theirs.content.decode()
    )
    mine = client.post("/gateway/playground/fire/", {**fire, "peer": "me"}, follow=True)
    assert 'class="pg-tools" data-set="owner">yours: every tool' in mine.content.decode()


def test_the_header_says_what_a_plan_mode_chat_can_do_without_what_it_cant(client, owner, agent):
    from chats.models import Mode
    from tests.factories import ChatFactory

    chat = ChatFactory(owner=owner, agent=agent, mode=Mode.PLAN)
    client.force_login(owner)

    page = client.get(reverse("chats:chat", args=[chat.public_id])).content.decode()

    said = re.search(r'<p class="tool-set" data-set="owner">(.*?)</p>', page).group(1)
    assert said.startswith("It can read files, read web pages")
    assert "edit files" not in said and "run commands" not in said
