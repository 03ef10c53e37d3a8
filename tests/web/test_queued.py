"""A message sent while a reply runs shows as queued under it, with Cancel."""

from __future__ import annotations

import pytest

from chats.models import QueuedInput, TurnState
from chats.runtime.turns import (
    ERR_QUEUED_GONE,
    ERR_QUEUED_TAKEN,
    conversation_stop,
    message_send,
    turn_end,
)
from tests.factories import ChatFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued(chat):
    message_send(conversation=chat, text="first")
    return message_send(conversation=chat, text="and <b>then</b> this")


def cancel(client, chat, queued_id):
    return client.post(f"/c/{chat.public_id}/queued/{queued_id}/cancel/")


def test_a_queued_message_shows_under_the_running_reply(signed_in, chat, queued):
    html = signed_in.get(f"/c/{chat.public_id}/").content.decode()

    reply = html.index('id="reply-1"')
    shown = html.index(f'<li class="queued" id="queued-{queued.pk}">')
    assert reply < shown < html.index("</ol>", reply)
    assert "and &lt;b&gt;then&lt;/b&gt; this</div>" in html
    assert "Sent when this reply ends." in html
    assert f'action="/c/{chat.public_id}/queued/{queued.pk}/cancel/"' in html


def test_cancel_takes_back_a_message_still_queued(
    htmx, chat, queued, django_capture_on_commit_callbacks
):
    response = cancel(htmx, chat, queued.pk)

    assert response.status_code == 200
    assert not QueuedInput.objects.filter(pk=queued.pk).exists()
    assert f'id="queued-{queued.pk}"' not in response.content.decode()
    # The reply ends and starts nothing: the message was cancelled.
    with django_capture_on_commit_callbacks(execute=True):
        turn_end(turn=chat.turns.get(), state=TurnState.COMPLETED)
    assert chat.turns.count() == 1


def test_cancel_too_late_says_the_reply_took_it(
    htmx, chat, queued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):  # the next reply takes it
        turn_end(turn=chat.turns.get(), state=TurnState.COMPLETED)
    assert chat.turns.count() == 2

    response = cancel(htmx, chat, queued.pk)

    assert response.status_code == 409
    html = response.content.decode()
    assert ERR_QUEUED_TAKEN in html and 'id="flash"' in html
    assert f'id="queued-{queued.pk}"' not in html  # the fresh page shows it taken, not queued
    assert QueuedInput.objects.get(pk=queued.pk).taken_at is not None
    assert chat.turns.order_by("number").last().entries.first().text == "and <b>then</b> this"


def test_cancel_twice_says_it_is_no_longer_queued(htmx, chat, queued):
    cancel(htmx, chat, queued.pk)

    response = cancel(htmx, chat, queued.pk)

    assert response.status_code == 409 and ERR_QUEUED_GONE in response.content.decode()


def test_only_the_owner_can_cancel_and_only_in_its_own_chat(
    client, second_owner, owner, agent, htmx, chat, queued
):
    client.force_login(second_owner)
    assert cancel(client, chat, queued.pk).status_code == 404
    other = ChatFactory(owner=owner, title="Another")
    assert cancel(htmx, other, queued.pk).status_code == 409
    assert QueuedInput.objects.filter(pk=queued.pk, taken_at__isnull=True).exists()


def test_cancel_needs_the_csrf_token(owner, chat, queued):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(owner)

    assert cancel(strict, chat, queued.pk).status_code == 403
    assert strict.get(f"/c/{chat.public_id}/queued/{queued.pk}/cancel/").status_code == 405
    assert QueuedInput.objects.filter(pk=queued.pk).exists()


def test_after_stop_a_queued_message_waits_for_the_next_one(signed_in, chat, queued):
    conversation_stop(conversation=chat)

    html = signed_in.get(f"/c/{chat.public_id}/").content.decode()

    assert f'id="queued-{queued.pk}"' in html and "Sent with your next message." in html
