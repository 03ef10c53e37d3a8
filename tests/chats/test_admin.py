import re

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


# ---------------------------------------------------------------------------
# The trust timeline: each rise of a chat's taint, read-only


@pytest.fixture
def careful_chats(owner, agent):
    """'Release notes' read a page; 'Changelog' took in its message; 'Announce' waited on
    'Changelog', which was then deleted."""
    from chats.taint import Cause, taint_raise

    notes = ChatFactory(owner=owner, title="Release notes")
    taint_raise(
        conversation=notes,
        taint="untrusted",
        cause=Cause.page("https://example.com/release-2.4?ref=feed"),
    )
    changelog = ChatFactory(owner=owner, title="Changelog")
    taint_raise(
        conversation=changelog, taint="untrusted", cause=Cause.message(notes, message_id="m_1")
    )
    announce = ChatFactory(owner=owner, title="Announce")
    taint_raise(conversation=announce, taint="untrusted", cause=Cause.wait(changelog))
    return notes, changelog, announce


def test_a_chats_admin_page_shows_its_timeline_with_the_chat_it_came_from_linked(
    client, owner, careful_chats
):
    notes, changelog, _ = careful_chats
    client.force_login(owner)
    page = client.get(reverse("admin:chats_conversation_change", args=[changelog.pk]))
    body = page.content.decode()
    assert page.status_code == 200
    assert "Trust timeline" in body
    notes_page = reverse("admin:chats_conversation_change", args=[notes.pk])
    assert f'<a href="{notes_page}">Release notes ({notes.public_id})</a>' in body
    assert "a message from another chat" in body and "m_1" in body

    body = client.get(notes_page).content.decode()
    assert "https://example.com/release-2.4?ref=feed" in body  # the address the chat used
    assert "read a web page" in body


def test_a_rise_from_a_chat_since_deleted_says_a_chat_that_is_gone(client, owner, careful_chats):
    _, changelog, announce = careful_chats
    changelog.delete()
    client.force_login(owner)
    body = client.get(reverse("admin:chats_conversation_change", args=[announce.pk])).content
    assert "a chat that is gone" in body.decode()
    assert "Changelog" not in body.decode()


def test_the_timeline_can_be_neither_added_to_changed_nor_deleted_in_the_admin(
    client, owner, careful_chats
):
    from django.contrib import admin as django_admin
    from django.test import RequestFactory

    from chats.admin import TaintRiseInline
    from chats.models import TaintRise

    _, changelog, _ = careful_chats
    request = RequestFactory().get("/admin/")
    request.user = owner
    inline = TaintRiseInline(Conversation, django_admin.site)
    assert not inline.has_add_permission(request, changelog)
    assert not inline.has_change_permission(request, changelog)
    assert not inline.has_delete_permission(request, changelog)
    assert set(inline.get_fields(request, changelog)) <= set(
        inline.get_readonly_fields(request, changelog)
    )
    assert TaintRise not in django_admin.site._registry  # no page of its own to change it on

    client.force_login(owner)
    body = client.get(reverse("admin:chats_conversation_change", args=[changelog.pk])).content
    fields = re.findall(rb'<(?:input|textarea|select)\b[^>]*name="taint_rises-0-[^>]*>', body)
    editable = [field for field in fields if b'type="hidden"' not in field]
    assert fields and editable == []  # the row is there, with not one field to change
    assert b"taint_rises-empty" not in body  # and no row to add one


@pytest.mark.parametrize(
    "page",
    ["admin:index", "admin:chats_conversation_changelist", "admin:chats_agent_add", "admin:login"],
)
def test_every_admin_page_says_conch_and_leads_back_to_the_chat_list(client, owner, page):
    if page != "admin:login":
        client.force_login(owner)
    body = client.get(reverse(page)).content.decode()

    title = re.search(r"<title>(.*?)</title>", body, re.S).group(1)
    assert title.strip().endswith("| Conch admin"), title
    assert '<a href="/admin/">Conch admin</a>' in body
    assert "Django" not in title and "Django administration" not in body
    assert (
        f'<a class="conch-back" href="{reverse("chats:chat-list")}">Back to your chats</a>' in body
    )
