"""Ids keep the case their platform gives them, at the door.

Matrix room ids are ``!opaque:server`` and thread roots are event ids ``$opaque``, both
case-sensitive (Matrix spec, appendices "Room IDs" and "Event IDs"); an iMessage
handle is an e-mail address or a phone number, which a person may type in any case.
"""

from __future__ import annotations

import pytest

from chats.gateway.models import IdentityLink
from chats.models import Conversation

pytestmark = pytest.mark.django_db

ROOM = "!MixedRoomAbCdEf:example.org"


def test_two_matrix_rooms_that_differ_only_by_case_are_two_sessions(receive):
    one = receive(channel="matrix", chat_type="group", peer="@ann:example.org", group_id=ROOM)
    other = receive(
        channel="matrix", chat_type="group", peer="@bob:example.org", group_id=ROOM.lower()
    )

    assert one.chat != other.chat
    assert one.session_key == "agent:main:group:matrix:!MixedRoomAbCdEf%3Aexample.org"
    assert other.session_key == "agent:main:group:matrix:!mixedroomabcdef%3Aexample.org"
    assert Conversation.objects.count() == 2


def test_two_matrix_threads_that_differ_only_by_case_are_two_sessions(receive):
    thread = {"channel": "matrix", "chat_type": "thread", "peer": "@ann:example.org"}
    one = receive(**thread, group_id=ROOM, thread_id="$EvAbCdEf")
    other = receive(**thread, group_id=ROOM, thread_id="$evabcdef")

    assert one.chat != other.chat


def test_one_imessage_person_in_two_cases_is_one_session(receive):
    one = receive(channel="imessage", peer="Alice@Example.com")
    again = receive(channel="imessage", peer="alice@example.com")

    assert one.chat == again.chat
    assert again.session_key == "agent:main:dm:imessage:alice@example.com"


def test_an_identity_link_matches_the_peer_in_any_case(receive):
    IdentityLink.objects.create(name="alice", channel="imessage", peer="Alice@Example.com")
    IdentityLink.objects.create(name="alice", channel="telegram", peer="111111111")

    on_imessage = receive(channel="imessage", peer="alice@example.com")
    on_telegram = receive(channel="telegram", peer="111111111")

    assert on_imessage.session_key == "agent:main:dm:imessage:linked:alice"
    assert on_telegram.session_key == "agent:main:dm:telegram:linked:alice"


def test_the_admin_refuses_a_second_link_for_one_peer_in_another_case(client, owner):
    IdentityLink.objects.create(name="alice", channel="imessage", peer="Alice@Example.com")
    client.force_login(owner)

    added = client.post(
        "/admin/gateway/identitylink/add/",
        {"name": "mallory", "channel": "iMessage", "peer": "ALICE@example.com"},
    )

    assert added.status_code == 200  # the form again, with the error beside the peer
    assert "is linked already, to alice" in added.content.decode()
    assert list(IdentityLink.objects.values_list("name", flat=True)) == ["alice"]
    kept = client.post(
        "/admin/gateway/identitylink/add/",
        {"name": "bob", "channel": "imessage", "peer": "bob@example.com"},
    )
    assert kept.status_code == 302
