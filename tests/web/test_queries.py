"""The chat list stays cheap: its queries don't grow with the number of chats."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chats.runtime.turns import message_send
from tests.factories import ConversationFactory

pytestmark = pytest.mark.django_db

# session, user, the number the list is read at, the chats, their open replies, what each
# holds for you
LIST_QUERIES = 6


def list_queries(client) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get("/chats/")
    assert response.status_code == 200
    return len(captured)


def make_chats(owner, agent, count: int) -> None:
    chats = ConversationFactory.create_batch(count, owner=owner, agent=agent)
    for chat in chats[: count // 4]:
        message_send(conversation=chat, text="go")  # some working, with a reply open


def test_the_chat_list_fragment_costs_the_same_for_200_chats_as_for_2(
    htmx, owner, agent, django_assert_max_num_queries
):
    make_chats(owner, agent, 2)
    few = list_queries(htmx)
    make_chats(owner, agent, 198)

    with django_assert_max_num_queries(LIST_QUERIES):
        response = htmx.get("/chats/")

    assert response.content.decode().count('class="chat-row') == 200
    assert list_queries(htmx) == few


def test_a_chat_page_costs_the_same_for_200_chats_as_for_2(htmx, signed_in, owner, agent):
    make_chats(owner, agent, 2)
    chat = ConversationFactory(owner=owner, agent=agent)
    url = f"/c/{chat.public_id}/"

    def page_queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert signed_in.get(url).status_code == 200
        return len(captured)

    few = page_queries()
    make_chats(owner, agent, 198)

    assert page_queries() == few
