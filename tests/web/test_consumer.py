"""The workspace socket pushes the same partials the views render, numbered."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from chats import events, regions
from chats.runtime.chats import conversation_archive, conversation_create, conversation_rename
from chats.runtime.turns import conversation_delete, message_send
from tests.factories import ChatFactory
from tests.web.sockets import seq_of, session_cookie, socket

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 5
# A row pushed alone goes through the list, which every page has (chats/regions.py).
ROW_PUSH = '<ul class="row-push" hidden hx-swap-oob="beforeend:#chat-rows">'


def pushed_row(pushed: str) -> str:
    """The one row a push carries, as the page would have it."""
    assert pushed.count(ROW_PUSH) == 1, pushed[:300]
    return pushed.split(ROW_PUSH, 1)[1].split("</ul>", 1)[0].strip()


@pytest.fixture
def cookie(owner):
    return session_cookie(owner)


@pytest.fixture
def two_chats(owner, agent, workspace):
    one = ChatFactory(owner=owner, title="Fix the login bug", folder=str(workspace))
    two = ChatFactory(owner=owner, title="Release notes", folder=str(workspace))
    return one, two


async def open_socket(cookie, chat=None):
    path = f"/ws/?chat={chat.public_id}" if chat else "/ws/"
    communicator = socket(cookie=cookie, path=path)
    connected, _ = await communicator.connect(timeout=TIMEOUT)
    assert connected
    hello = await communicator.receive_from(timeout=TIMEOUT)
    return communicator, hello


async def test_the_socket_says_hello_with_the_owners_current_number(owner, cookie, two_chats):
    current = await database_sync_to_async(events.current_seq)(owner.pk)

    communicator, hello = await open_socket(cookie)
    try:
        assert seq_of(hello) == (current, "hello")
        assert 'hx-swap-oob="true"' in hello
    finally:
        await communicator.disconnect()


async def test_a_reply_starting_pushes_the_row_and_the_shown_chats_regions(
    owner, cookie, two_chats
):
    one, _ = two_chats
    communicator, hello = await open_socket(cookie, chat=one)
    try:
        before, _ = seq_of(hello)
        await database_sync_to_async(message_send)(conversation=one, text="Please fix")

        status = await communicator.receive_from(timeout=TIMEOUT)

        assert seq_of(status) == (before + 1, "event")
        assert pushed_row(status).startswith(
            f'<li id="row-{one.public_id}" class="chat-row is-working"'
        )
        assert 'id="chat-list"' not in status
        for element_id in ("chat-title", "chat-settings", "chat-controls", "transcript"):
            assert f'id="{element_id}"' in status
        assert "Please fix" in status and "/stop/" in status
        # The same row goes to every tab: conch.js marks the one this tab shows.
        assert "aria-current" not in status
        # One event: the runner wakes on the status too, with nothing of its own to number.
        assert await communicator.receive_nothing(timeout=0.2)
        assert await database_sync_to_async(events.current_seq)(one.owner_id) == before + 1
    finally:
        await communicator.disconnect()


async def test_a_change_to_another_chat_pushes_only_its_row(owner, cookie, two_chats):
    one, two = two_chats
    communicator, _ = await open_socket(cookie, chat=one)
    try:
        await database_sync_to_async(conversation_rename)(
            conversation=two, title="Release notes, v2"
        )

        pushed = await communicator.receive_from(timeout=TIMEOUT)

        assert pushed_row(pushed).startswith(
            f'<li id="row-{two.public_id}" class="chat-row is-idle"'
        )
        assert "Release notes, v2" in pushed
        assert 'id="transcript"' not in pushed and 'id="chat-list"' not in pushed
    finally:
        await communicator.disconnect()


async def test_the_pushed_row_is_the_row_the_page_renders(owner, cookie, two_chats, client):
    one, two = two_chats
    await database_sync_to_async(client.force_login)(owner)
    communicator, _ = await open_socket(cookie)
    try:
        await database_sync_to_async(conversation_rename)(conversation=two, title="Notes")
        pushed = await communicator.receive_from(timeout=TIMEOUT)
        page = (await database_sync_to_async(client.get)("/")).content.decode()

        row = pushed_row(pushed)
        assert f'id="row-{two.public_id}"' in row and "Notes" in row
        assert row in page
    finally:
        await communicator.disconnect()


async def test_an_archived_chat_leaves_the_list(owner, cookie, two_chats):
    _, two = two_chats
    communicator, _ = await open_socket(cookie)
    try:
        await database_sync_to_async(conversation_archive)(conversation=two)

        pushed = await communicator.receive_from(timeout=TIMEOUT)

        # Its row, marked gone, through the list, which every page has: conch.js takes
        # it away if the page has it, and a page that never had it misses nothing
        # (htmx logs a swap that misses its target as an error).
        assert pushed_row(pushed) == f'<li id="row-{two.public_id}" data-gone hidden></li>'
        assert 'id="chat-list"' not in pushed and 'hx-swap-oob="delete"' not in pushed

        # It changes again while archived: it is still gone.
        await database_sync_to_async(conversation_rename)(conversation=two, title="Old notes")
        pushed = await communicator.receive_from(timeout=TIMEOUT)
        assert pushed_row(pushed) == f'<li id="row-{two.public_id}" data-gone hidden></li>'
        assert "Old notes" not in pushed

        # Brought back, it comes back, row and all.
        await database_sync_to_async(conversation_archive)(conversation=two, archived=False)
        pushed = await communicator.receive_from(timeout=TIMEOUT)
        assert pushed_row(pushed).startswith(f'<li id="row-{two.public_id}" class="chat-row')
        assert "Old notes" in pushed
    finally:
        await communicator.disconnect()


async def test_a_new_chat_pushes_its_row_not_the_whole_list(owner, agent, cookie, two_chats):
    communicator, _ = await open_socket(cookie)
    try:
        chat = await database_sync_to_async(conversation_create)(owner=owner, title="Brand new")

        pushed = await communicator.receive_from(timeout=TIMEOUT)

        assert pushed_row(pushed).startswith(f'<li id="row-{chat.public_id}" class="chat-row')
        assert 'id="chat-list"' not in pushed
        assert all(f"row-{other.public_id}" not in pushed for other in two_chats)
    finally:
        await communicator.disconnect()


async def test_a_deleted_chat_leaves_the_list_and_its_page_says_so(owner, cookie, two_chats):
    one, two = two_chats
    communicator, _ = await open_socket(cookie, chat=one)
    try:
        await database_sync_to_async(conversation_delete)(conversation=one)

        pushed = await communicator.receive_from(timeout=TIMEOUT)

        assert pushed_row(pushed) == f'<li id="row-{one.public_id}" data-gone hidden></li>'
        assert f"row-{two.public_id}" not in pushed
        assert '<section id="chat" class="chat gone" hx-swap-oob="true">' in pushed
    finally:
        await communicator.disconnect()


async def test_someone_elses_events_never_reach_this_socket(owner, second_owner, agent, two_chats):
    one, _ = two_chats
    theirs = await database_sync_to_async(ChatFactory)(owner=second_owner, title="Their chat")
    cookie = await database_sync_to_async(session_cookie)(second_owner)
    communicator, _ = await open_socket(cookie, chat=one)
    try:
        await database_sync_to_async(message_send)(conversation=one, text="secret plan")
        await database_sync_to_async(conversation_rename)(
            conversation=theirs, title="Their chat, renamed"
        )

        # The owner's events went out first; the first this socket gets is its own.
        pushed = await communicator.receive_from(timeout=TIMEOUT)

        assert "Their chat, renamed" in pushed
        assert "secret plan" not in pushed and one.public_id not in pushed
    finally:
        await communicator.disconnect()


def test_a_tab_naming_someone_elses_chat_is_shown_nothing_of_it(owner, second_owner, two_chats):
    one, _ = two_chats

    html = regions.render_event(
        owner_id=second_owner.pk,
        event=events.STATUS,
        seq=7,
        conversation_id=one.public_id,
        showing=one.public_id,
    )

    assert "Fix the login bug" not in html
    assert 'id="transcript"' not in html
