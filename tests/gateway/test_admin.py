"""The gateway in the admin: agents, bindings, sessions, the outbox, policies and identities."""

from __future__ import annotations

import pytest
from django.urls import reverse

from chats.gateway.models import (
    Binding,
    ChannelAccount,
    GatewayConfig,
    GatewayToken,
    IdentityLink,
    InboundRecord,
    OutboxMessage,
    OutboxState,
    OwnerIdentity,
    ResetPolicy,
    Session,
)
from chats.gateway.outbox import outbox_enqueue
from chats.models import Agent, Conversation
from chats.runtime.runner import drain
from tests.factories import ChatFactory, agent_admin_form


@pytest.fixture
def admin_client(client, owner):
    client.force_login(owner)
    return client


@pytest.fixture
def populated(owner, personas, receive, gateway_token):
    receive(peer="alice", text="hi")
    drain()
    ChannelAccount.objects.create(
        owner=owner, channel="telegram", account_id="mybot", secret="123:very-secret-bot-token"
    )
    OwnerIdentity.objects.create(owner=owner, channel="telegram", peer="me")
    IdentityLink.objects.create(name="alice", channel="telegram", peer="alice")
    ResetPolicy.objects.create(chat_type="group", mode="idle", idle_minutes=60)
    outbox_enqueue(
        conversation=None, channel="telegram", account_id="mybot", target={"chat_id": 1}, text="x"
    )
    Binding.objects.create(agent=personas["work"], channel="slack", peer="bob", peer_kind="direct")


@pytest.mark.parametrize(
    "model",
    [
        Session,
        OutboxMessage,
        InboundRecord,
        GatewayConfig,
        GatewayToken,
        ChannelAccount,
        OwnerIdentity,
        IdentityLink,
        ResetPolicy,
        Binding,
        Agent,
    ],
)
def test_every_gateway_model_has_a_working_changelist_and_change_page(
    admin_client, populated, model
):
    if model is GatewayConfig:
        GatewayConfig.objects.get_or_create(pk=1)
    opts = model._meta
    assert (
        admin_client.get(
            reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        ).status_code
        == 200
    )
    obj = model.objects.first()
    page = admin_client.get(
        reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
    )
    assert page.status_code == 200


def test_a_bot_token_never_shows_in_the_admin(admin_client, populated):
    account = ChannelAccount.objects.get()
    for url in (
        reverse("admin:gateway_channelaccount_changelist"),
        reverse("admin:gateway_channelaccount_change", args=[account.pk]),
    ):
        body = admin_client.get(url).content.decode()
        assert "very-secret-bot-token" not in body
    assert (
        "•" in admin_client.get(reverse("admin:gateway_channelaccount_changelist")).content.decode()
    )


def test_the_sessions_list_shows_gateway_sessions_only(admin_client, owner, populated, workspace):
    own = ChatFactory(owner=owner, title="My own", folder=str(workspace))
    body = admin_client.get(reverse("admin:gateway_session_changelist")).content.decode()
    assert "agent:main:dm:telegram:alice" in body
    assert own.title not in body


def test_start_fresh_from_the_admin_archives_and_keeps_everything(admin_client, populated):
    chat = Conversation.objects.get(session_key="agent:main:dm:telegram:alice")
    count = chat.entries.count()
    response = admin_client.post(
        reverse("admin:gateway_session_changelist"),
        {"action": "start_fresh", "_selected_action": [chat.pk]},
    )
    assert response.status_code == 302
    chat.refresh_from_db()
    assert chat.archived and chat.entries.count() == count


def test_retry_now_puts_a_failed_message_back_in_line(admin_client, populated):
    message = OutboxMessage.objects.get()
    OutboxMessage.objects.filter(pk=message.pk).update(state=OutboxState.FAILED)
    admin_client.post(
        reverse("admin:gateway_outboxmessage_changelist"),
        {"action": "retry_now", "_selected_action": [message.pk]},
    )
    message.refresh_from_db()
    assert message.state == OutboxState.PENDING


def binding_form(agent, **fields):
    data = {
        "agent": agent.pk,
        "channel": "slack",
        "account_id": "",
        "peer": "",
        "peer_kind": "direct" if fields.get("peer") else "",
        "parent_peer": "",
        "guild_id": "",
        "roles": "[]",
        "team_id": "",
        "created_at_0": "2025-01-01",
        "created_at_1": "00:00:00",
    }
    data.update(fields)
    return data


def test_the_admin_refuses_a_binding_that_would_tie_naming_both(admin_client, populated, personas):
    response = admin_client.post(
        reverse("admin:gateway_binding_add"), binding_form(personas["home"], peer="bob")
    )
    assert response.status_code == 200  # the form again, with the error
    body = response.content.decode()
    assert "would tie" in body and "→ work" in body and "→ home" in body
    assert Binding.objects.filter(peer="bob").count() == 1


def test_the_admin_saves_a_binding_that_ties_with_nothing(admin_client, populated, personas):
    response = admin_client.post(
        reverse("admin:gateway_binding_add"), binding_form(personas["home"], peer="carol")
    )
    assert response.status_code == 302
    assert Binding.objects.get(peer="carol").agent == personas["home"]


def test_making_another_agent_the_default_leaves_exactly_one(admin_client, personas):
    work = personas["work"]
    response = admin_client.post(
        reverse("admin:chats_agent_change", args=[work.pk]), agent_admin_form(work, is_default="on")
    )
    assert response.status_code == 302
    assert list(Agent.objects.filter(is_default=True).values_list("slug", flat=True)) == ["work"]


def test_the_only_default_agent_cannot_be_unmade_or_deleted(admin_client, personas):
    main = personas["main"]
    response = admin_client.post(
        reverse("admin:chats_agent_change", args=[main.pk]), agent_admin_form(main, is_default=None)
    )
    assert response.status_code == 200
    assert "exactly one default agent" in response.content.decode()
    main.refresh_from_db()
    assert main.is_default
    delete = admin_client.get(reverse("admin:chats_agent_delete", args=[main.pk]))
    assert delete.status_code == 403


def test_two_new_rows_that_tie_on_one_agent_page_are_refused(admin_client, personas):
    work = personas["work"]
    rows = {
        "bindings-TOTAL_FORMS": "2",
        "bindings-0-channel": "slack",
        "bindings-0-peer": "zed",
        "bindings-0-peer_kind": "direct",
        "bindings-0-roles": "[]",
        "bindings-1-channel": "slack",
        "bindings-1-peer": "zed",
        "bindings-1-peer_kind": "direct",
        "bindings-1-account_id": "Default",  # an empty account is the default one
        "bindings-1-roles": "[]",
    }
    response = admin_client.post(
        reverse("admin:chats_agent_change", args=[work.pk]), agent_admin_form(work, **rows)
    )
    assert response.status_code == 200
    assert "would tie" in response.content.decode()
    assert not Binding.objects.filter(peer="zed").exists()
