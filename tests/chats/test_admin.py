import pytest
from django.urls import reverse

from chats.models import AuthProfile, Conversation, Entry, Step, Task, Turn
from chats.runtime.runner import drain
from chats.runtime.turns import message_send, task_start
from tests.factories import ChatFactory


@pytest.fixture
def played_chat(owner, agent, workspace):
    chat = ChatFactory(
        owner=owner,
        title="Fix the login",
        folder=str(workspace),
        script=[
            [{"tool": "write_file", "args": {"path": "a.txt", "content": "x"}}, {"say": "Done."}]
        ],
    )
    message_send(conversation=chat, text="go")
    task_start(parent=chat, title="Check the build")
    drain()
    return chat


@pytest.mark.parametrize("model", [Conversation, Turn, Step, Entry, Task, AuthProfile])
def test_every_model_has_a_working_changelist(client, owner, played_chat, model):
    AuthProfile.objects.create(
        agent=played_chat.agent, name="openai", secret="sk-live-abcdefghijkl1234"
    )
    client.force_login(owner)
    opts = model._meta
    response = client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
    assert response.status_code == 200
    obj = model.objects.first()
    response = client.get(
        reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
    )
    assert response.status_code == 200


def test_a_chat_shows_its_turns_and_entries_inline(client, owner, played_chat):
    client.force_login(owner)
    response = client.get(reverse("admin:chats_conversation_change", args=[played_chat.pk]))
    body = response.content.decode()
    assert "Done." in body
    assert "a.txt" in body  # the turn's files changed


def test_history_is_read_only(client, owner, played_chat):
    client.force_login(owner)
    step = Step.objects.first()
    url = reverse("admin:chats_step_change", args=[step.pk])
    response = client.post(url, {"tool": "run_command"})
    assert response.status_code == 403
    step.refresh_from_db()
    assert step.tool == "write_file"
    assert client.get(reverse("admin:chats_entry_add")).status_code == 403


def test_the_admin_never_shows_an_auth_profile_secret(client, owner, agent):
    profile = AuthProfile.objects.create(
        agent=agent, name="openai", secret="sk-live-abcdefghijkl1234"
    )
    client.force_login(owner)
    for url in (
        reverse("admin:chats_authprofile_changelist"),
        reverse("admin:chats_authprofile_change", args=[profile.pk]),
        reverse("admin:chats_agent_change", args=[agent.pk]),
    ):
        body = client.get(url).content.decode()
        assert "sk-live-abcdefghijkl1234" not in body
        assert "1234" in body  # the masked tail


def test_saving_an_auth_profile_with_an_empty_secret_keeps_it(client, owner, agent):
    profile = AuthProfile.objects.create(
        agent=agent, name="openai", secret="sk-live-abcdefghijkl1234"
    )
    client.force_login(owner)
    url = reverse("admin:chats_authprofile_change", args=[profile.pk])
    response = client.post(
        url, {"agent": agent.pk, "name": "openai", "provider": "openai", "secret": ""}
    )
    assert response.status_code == 302
    profile.refresh_from_db()
    assert profile.secret == "sk-live-abcdefghijkl1234"
