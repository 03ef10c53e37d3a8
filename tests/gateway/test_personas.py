"""Agents are personas: own workspace, auth, tools and sessions, never reaching another's."""

from __future__ import annotations

import json

import pytest

from chats.gateway.interop import sessions_export
from chats.gateway.models import Binding
from chats.gateway.selectors import auth_profile_for, auth_profiles_for, session_active
from chats.models import AuthProfile, Conversation
from chats.runtime.stepping import system_text_for
from chats.tools.registry import tools_offered


@pytest.fixture
def two_bots(personas):
    """Alice writes to two bot accounts; each account is bound to its own persona."""
    Binding.objects.create(agent=personas["work"], channel="telegram", account_id="workbot")
    Binding.objects.create(agent=personas["home"], channel="telegram", account_id="homebot")
    AuthProfile.objects.create(agent=personas["work"], name="openai", secret="sk-work-11112222")
    AuthProfile.objects.create(agent=personas["work"], name="github", secret="ghp-work-33334444")
    AuthProfile.objects.create(agent=personas["home"], name="openai", secret="sk-home-55556666")
    return personas


def chats_of_alice(receive):
    work = receive(account_id="workbot", peer="alice", text="deploy status?")
    home = receive(account_id="homebot", peer="alice", text="dinner ideas?")
    return (
        Conversation.objects.get(public_id=work.chat),
        Conversation.objects.get(public_id=home.chat),
    )


def test_the_same_person_talking_to_two_personas_has_two_sessions(two_bots, receive):
    work, home = chats_of_alice(receive)
    assert work.pk != home.pk
    assert (work.agent.slug, home.agent.slug) == ("work", "home")
    assert work.session_key == "agent:work:dm:telegram:alice"
    assert home.session_key == "agent:home:dm:telegram:alice"
    assert work.folder == two_bots["work"].workspace
    assert home.folder == two_bots["home"].workspace
    assert list(work.entries.values_list("text", flat=True)) == ["deploy status?"]
    assert list(home.entries.values_list("text", flat=True)) == ["dinner ideas?"]


def test_a_session_is_only_ever_found_with_its_own_agent(two_bots, receive):
    work, home = chats_of_alice(receive)
    assert session_active(agent_id=two_bots["work"].id, session_key=work.session_key) == work
    assert session_active(agent_id=two_bots["home"].id, session_key=work.session_key) is None


def test_a_chat_reaches_only_its_own_personas_auth_profiles(two_bots, receive):
    work, home = chats_of_alice(receive)
    assert auth_profile_for(conversation=work, name="openai").secret == "sk-work-11112222"
    assert auth_profile_for(conversation=home, name="openai").secret == "sk-home-55556666"
    with pytest.raises(AuthProfile.DoesNotExist):
        auth_profile_for(conversation=home, name="github")  # only work has it
    assert [p.secret for p in auth_profiles_for(agent=two_bots["home"])] == ["sk-home-55556666"]


def test_no_personas_secret_is_in_any_chats_system_text_or_transcript(two_bots, receive):
    for chat in chats_of_alice(receive):
        said = system_text_for(chat) + " ".join(chat.entries.values_list("text", flat=True))
        for secret in AuthProfile.objects.values_list("secret", flat=True):
            assert secret not in said


def test_each_persona_offers_its_own_tools(two_bots, receive):
    # alice is not the owner: her chats get each persona's set for other people.
    two_bots["work"].stranger_tools = ["read_file", "list_files"]
    two_bots["work"].save()
    work, home = chats_of_alice(receive)
    assert {t.name for t in tools_offered(work)} == {"read_file", "list_files"}
    assert tools_offered(home) == []  # the default for other people: words only


def test_each_persona_has_its_own_session_store_on_export(two_bots, receive, tmp_path):
    work, home = chats_of_alice(receive)
    sessions_export(root=tmp_path)
    work_index = json.loads((tmp_path / "agents/work/sessions/sessions.json").read_text())
    home_index = json.loads((tmp_path / "agents/home/sessions/sessions.json").read_text())
    assert [v["sessionId"] for v in work_index.values()] == [work.public_id]
    assert [v["sessionId"] for v in home_index.values()] == [home.public_id]
    assert not (tmp_path / "agents/home/sessions" / f"{work.public_id}.jsonl").exists()
