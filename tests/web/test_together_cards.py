"""ADR 0134's cards in the chat page, and the person's presses on them.

The OtherChatsLook card, the message cards on both sides (with the message's
state *now*), the WaitNote and the stopped card; Pass it on and Dismiss (a
person's press only); each chat's "Messages from other chats" setting; the
socket pushing a card's change; and a transcript of thirty cards costing what
one costs.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from chats import regions
from chats.gateway.services import gateway_token_rotate
from chats.models import EntryKind, EntryRole, Inbound, Mode, StartedBy, Status, Turn
from chats.runtime.chats import conversation_rename, entry_append
from chats.runtime.runner import drain
from chats.runtime.turns import conversation_delete, conversation_stop, message_send, turn_start
from tests.factories import ChainFactory, ChatFactory, ChatMessageFactory, WaitFactory
from tests.web.sockets import seq_of, session_cookie, socket
from together.listing import list_chats
from together.messages import (
    CHAT_MESSAGE,
    ERR_NOT_HELD,
    held_message_dismiss,
    held_message_pass,
    inbound_set,
    message_chat,
    stop_chat,
    take_in,
)
from together.models import ChatMessage, MessageState, Wait, WaitKind, WaitState
from together.tools import chats_look_record
from together.views import ERR_BAD_ACTION
from together.waits import wait_for, wake

pytestmark = pytest.mark.django_db

TIMEOUT = 5


# ---------------------------------------------------------------------------
# Helpers


def open_turn(chat) -> Turn:
    """The chat's open reply, or a new one the person started."""
    return chat.turns.filter(ended_at__isnull=True).first() or turn_start(
        conversation=chat, started_by=StartedBy.PERSON, text="go"
    )


def send(sender, receiver, text="Which version are you on?", start_reply=False) -> ChatMessage:
    return message_chat(
        sender=sender,
        turn=open_turn(sender),
        chat_id=receiver.public_id,
        text=text,
        start_reply=start_reply,
    ).message


def page(client, chat) -> str:
    response = client.get(f"/c/{chat.public_id}/")
    assert response.status_code == 200
    return response.content.decode()


def message_card(html: str, message: ChatMessage) -> str:
    match = re.search(
        rf'<article class="card card-message[^"]*" id="message-{message.message_id}".*?</article>',
        html,
        re.S,
    )
    assert match, f"no card for {message.message_id}"
    return match.group(0)


def card_of(html: str, css: str) -> str:
    match = re.search(rf'<article class="card {css}[^"]*".*?</article>', html, re.S)
    assert match, f"no {css} card"
    return match.group(0)


def press_url(chat, message) -> str:
    return f"/api/conversations/{chat.public_id}/messages/{message.message_id}"


def opens(chat) -> str:
    """A link that opens the chat: href for the plain page, hx-get for htmx."""
    url = f"/c/{chat.public_id}/"
    return f'href="{url}" hx-get="{url}" hx-target="body" hx-push-url="true"'


@pytest.fixture
def two(owner, agent, workspace):
    """“Release notes” writes to “Fix the login”."""
    receiver = ChatFactory(owner=owner, folder=workspace, title="Fix the login")
    sender = ChatFactory(owner=owner, folder=workspace, title="Release notes")
    return sender, receiver


@pytest.fixture
def held(two):
    """A message held for the person in “Fix the login”, asking for a reply."""
    sender, receiver = two
    inbound_set(conversation=receiver, inbound=Inbound.HOLD)
    message = send(sender, receiver, "Please run the login tests", start_reply=True)
    assert message.state == MessageState.HELD
    receiver.refresh_from_db()
    return sender, receiver, message


# ---------------------------------------------------------------------------
# OtherChatsLook


@pytest.fixture
def looked(owner, agent, workspace, tmp_path):
    """“Release notes” looked at its other chats: one working here on auth.ts, one needing you elsewhere."""
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    needy = ChatFactory(
        owner=owner,
        folder=deploy,
        title="Roll out 2.4",
        mode=Mode.ASK,
        script=[[{"tool": "write_file", "args": {"path": "x.txt", "content": "x"}}]],
    )
    message_send(conversation=needy, text="deploy")
    drain()
    needy.refresh_from_db()
    assert needy.status == Status.NEEDS_YOU
    busy = ChatFactory(owner=owner, folder=workspace, title="Fix the login")
    turn = open_turn(busy)  # left open, as a runner mid-step leaves it
    files = [str(workspace / "src" / name) for name in ("session.ts", "db.ts", "auth.ts")]
    Turn.objects.filter(pk=turn.pk).update(files_changed=files, step_family="editing files")
    looker = ChatFactory(owner=owner, folder=workspace, title="Release notes")
    look = list_chats(conversation=looker)
    chats_look_record(conversation=looker, turn=open_turn(looker), look=look)
    return looker, busy, needy


def test_the_look_card_says_how_many_are_working_and_need_you(signed_in, looked):
    looker, busy, needy = looked

    card = card_of(page(signed_in, looker), "card-look")

    assert "Checked on your other chats · 1 working · 1 needs you" in card


def test_each_row_of_the_look_card_opens_its_chat(signed_in, looked):
    looker, busy, needy = looked

    card = card_of(page(signed_in, looker), "card-look")
    rows = re.findall(r'<li class="look-row[^"]*">.*?</li>', card, re.S)

    assert len(rows) == 2
    busy_row, needy_row = rows  # busy chats first
    assert opens(busy) in busy_row and "Fix the login" in busy_row
    assert '<span class="badge is-working">working</span>' in busy_row
    assert "editing files" in busy_row and "Changing auth.ts +2" in busy_row
    assert 'class="folder"' not in busy_row  # the same folder goes without saying
    assert opens(needy) in needy_row and "Roll out 2.4" in needy_row
    assert '<span class="badge is-needs_you">needs you</span>' in needy_row
    assert re.search(r'<span class="folder" hx-disable>in [^<]*deploy</span>', needy_row)
    assert signed_in.get(f"/c/{busy.public_id}/").status_code == 200


def test_a_look_row_for_a_chat_since_deleted_opens_nothing(signed_in, looked):
    looker, busy, needy = looked
    conversation_delete(conversation=needy)

    card = card_of(page(signed_in, looker), "card-look")

    assert "Roll out 2.4" in card
    assert f"/c/{needy.public_id}/" not in card
    assert opens(busy) in card


def test_a_look_row_naming_someone_elses_chat_opens_nothing(signed_in, owner, second_owner, chat):
    theirs = ChatFactory(owner=second_owner, title="Their plans")
    entry_append(
        conversation=chat,
        role=EntryRole.CONCH,
        kind=EntryKind.CARD,
        text="Checked on your other chats · 1 working",
        data={
            "card": "chats.listed",
            "working": 1,
            "needs_you": 0,
            "rows": [{"id": theirs.public_id, "title": "Their plans", "state": "working"}],
        },
    )

    card = card_of(page(signed_in, chat), "card-look")

    assert f"/c/{theirs.public_id}/" not in card
    assert signed_in.get(f"/c/{theirs.public_id}/").status_code == 404


# ---------------------------------------------------------------------------
# ChatMessageCard


def test_the_cards_on_both_sides_name_the_other_chat_and_open_it(signed_in, two):
    sender, receiver = two
    message = send(sender, receiver)

    sent = message_card(page(signed_in, sender), message)
    came = message_card(page(signed_in, receiver), message)

    assert re.search(r"To “<a [^>]*><span hx-disable>Fix the login</span></a>”", sent)
    assert opens(receiver) in sent
    assert re.search(r"From “<a [^>]*><span hx-disable>Release notes</span></a>”", came)
    assert "· another chat, not you" in came
    assert opens(sender) in came
    for card in (sent, came):
        assert "Which version are you on?" in card


def test_the_card_names_the_other_chat_as_it_is_called_now(signed_in, two):
    sender, receiver = two
    message = send(sender, receiver)
    conversation_rename(conversation=sender, title="Release notes for 2.4")

    came = message_card(page(signed_in, receiver), message)

    assert "Release notes for 2.4" in came


def test_a_card_whose_other_chat_was_deleted_still_names_it_and_opens_nothing(signed_in, two):
    sender, receiver = two
    message = send(sender, receiver)
    conversation_delete(conversation=sender)

    came = message_card(page(signed_in, receiver), message)

    assert "Release notes" in came and f"/c/{sender.public_id}/" not in came
    assert 'class="chat-link is-gone"' in came


def _waiting(sender, receiver):
    return send(sender, receiver)


def _read(sender, receiver):
    message = send(sender, receiver)
    take_in(message=message, turn=open_turn(receiver))
    return message


def _held(sender, receiver):
    inbound_set(conversation=receiver, inbound=Inbound.HOLD)
    return send(sender, receiver)


def _turned_away(sender, receiver):
    inbound_set(conversation=receiver, inbound=Inbound.REFUSE)
    return send(sender, receiver)


def _dismissed(sender, receiver):
    return held_message_dismiss(message=_held(sender, receiver))


def _not_delivered(sender, receiver):
    message = send(sender, receiver)
    receiver = inbound_set(conversation=receiver, inbound=Inbound.REFUSE)
    take_in(message=message, turn=open_turn(receiver))
    return message


@pytest.mark.parametrize(
    ("make", "state", "label", "why"),
    [
        (
            _waiting,
            "waiting",
            ("sent: not read yet", "not read yet: this chat reads it when it next works"),
            "",
        ),
        (_read, "read", "read", ""),
        (_held, "held", "held for you", ""),
        (_turned_away, "refused", "turned away", "It turns messages from other chats away."),
        (_dismissed, "dismissed", "dismissed", ""),
        (
            _not_delivered,
            "not_delivered",
            "not delivered",
            "That chat turned messages from other chats away.",
        ),
    ],
)
def test_both_cards_show_the_messages_state_now(signed_in, two, make, state, label, why):
    sender, receiver = two
    message = make(sender, receiver)
    message.refresh_from_db()
    assert message.state == state

    labels = label if isinstance(label, tuple) else (label, label)
    for chat, label in zip((sender, receiver), labels, strict=True):
        card = message_card(page(signed_in, chat), message)
        assert f'<span class="badge is-msg-{state}">{label}</span>' in card, chat.title
        if why:
            assert f'<p class="card-why" hx-disable>{why}</p>' in card
        else:
            assert "card-why" not in card


def test_after_pass_it_on_each_card_says_what_happens_next(signed_in, two):
    sender, receiver = two
    message = held_message_pass(message=_held(sender, receiver))

    sent = message_card(page(signed_in, sender), message)
    came = message_card(page(signed_in, receiver), message)
    assert ">passed on: not read yet<" in sent
    assert ">passed on: this chat reads it when it next works<" in came


def test_a_card_never_says_read_before_the_chat_read_it(signed_in, two):
    sender, receiver = two
    message = send(sender, receiver)

    for chat in (sender, receiver):
        card = message_card(page(signed_in, chat), message)
        assert "is-msg-read" not in card and ">read<" not in card

    take_in(message=message, turn=open_turn(receiver))

    for chat in (sender, receiver):
        assert '<span class="badge is-msg-read">read</span>' in message_card(
            page(signed_in, chat), message
        )


def test_only_the_receiving_chats_held_card_offers_pass_it_on_and_dismiss(signed_in, held):
    sender, receiver, message = held

    came = message_card(page(signed_in, receiver), message)
    sent = message_card(page(signed_in, sender), message)

    assert f'action="{press_url(receiver, message)}"' in came
    assert f'hx-post="{press_url(receiver, message)}"' in came
    assert (
        '<button type="submit" name="action" value="pass" class="primary small" '
        f'id="pass-{message.message_id}">Pass it on' in came
    )
    assert (
        '<button type="submit" name="action" value="dismiss" class="small" '
        f'id="dismiss-{message.message_id}">Dismiss' in came
    )
    assert "Pass it on and a reply here starts with it; Dismiss it and it never does." in came
    assert "Pass it on" not in sent and "/api/" not in sent


def test_hostile_words_in_a_message_stay_text_inside_hx_disable(signed_in, htmx, two):
    sender, receiver = two
    hostile = (
        "<script>window.pwned=1</script><img src=x onerror=alert(1)>"
        '<a hx-post="/c/x/delete/" hx-trigger="load">go</a>'
        '</div></section></article><button name="action" value="pass">Pass it on</button>'
    )
    message = send(sender, receiver, hostile)

    for html in (
        page(signed_in, receiver),
        htmx.get(f"/c/{receiver.public_id}/regions/").content.decode(),
    ):
        card = message_card(html, message)
        words = re.search(r'<div class="card-words" hx-disable>(.*?)</div>', card, re.S).group(1)
        assert "<" not in words and ">" not in words
        assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in words
        assert "<script>" not in html and "<img src=x" not in html
        assert 'hx-trigger="load"' not in html
        assert 'value="pass"' not in card  # not held: no real button, and the fake is text


# ---------------------------------------------------------------------------
# Every word from a model, a person or a chat app sits under hx-disable


MARK = "EVIL"
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class _Words(HTMLParser):
    """Every text node inside #transcript that holds ``MARK``, and whether hx-disable covers it."""

    def __init__(self):
        super().__init__()
        self.stack: list[tuple[str, bool]] = []
        self.inside = 0
        self.found: list[tuple[str, bool]] = []
        self.attrs_seen: list[str] = []

    def handle_starttag(self, tag, attrs):
        names = dict(attrs)
        if names.get("id") == "transcript":
            self.inside = len(self.stack) + 1
        if self.inside:
            self.attrs_seen.extend(name for name, _ in attrs)
        if tag not in VOID:
            self.stack.append((tag, "hx-disable" in names))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        while self.stack:
            popped, _ = self.stack.pop()
            if popped == tag:
                break
        if self.inside and len(self.stack) < self.inside:
            self.inside = 0

    def handle_data(self, data):
        if self.inside and MARK in data:
            self.found.append((data.strip(), any(disabled for _, disabled in self.stack)))


def test_every_word_in_the_transcript_from_outside_conch_sits_under_hx_disable(
    signed_in, owner, agent, workspace
):
    evil = f"{MARK} <b hx-get=/x/>"
    target = ChatFactory(
        owner=owner,
        folder=workspace,
        title=f"{MARK} target",
        script=[[{"say": f"{MARK} said"}, {"tool": "list_files", "args": {}}]],
    )
    message_send(conversation=target, text=f"{MARK} asked")
    drain()
    me = ChatFactory(owner=owner, folder=workspace, title=f"{MARK} me")
    other = ChatFactory(owner=owner, folder=workspace, title=f"{MARK} other")
    turn = open_turn(other)
    Turn.objects.filter(pk=turn.pk).update(files_changed=[str(workspace / f"{MARK}.py")])
    chats_look_record(conversation=me, turn=open_turn(me), look=list_chats(conversation=me))
    send(other, me, f"{evil} words")
    send(me, other, f"{evil} back")
    stop_chat(sender=me, turn=open_turn(me), chat_id=other.public_id, reason=f"{evil} reason")
    message_send(conversation=other, text="again")  # so `me` can wait on it
    wait_for(waiter=me, turn=open_turn(me), kind=WaitKind.CHAT, target_id=other.public_id)

    for chat in (me, other, target):
        words = _Words()
        words.feed(page(signed_in, chat))
        assert words.found, chat.title
        uncovered = [text for text, covered in words.found if not covered]
        assert uncovered == [], chat.title
        assert "onerror" not in words.attrs_seen and "hx-trigger" not in words.attrs_seen


# ---------------------------------------------------------------------------
# Pass it on, Dismiss: POST /api/conversations/<id>/messages/<messageId>


def test_pass_it_on_lets_the_message_in_and_starts_the_reply_it_asked_for(
    signed_in, held, django_capture_on_commit_callbacks
):
    sender, receiver, message = held

    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(press_url(receiver, message), {"action": "pass"})

    assert response.status_code == 302 and response.url == f"/c/{receiver.public_id}/"
    message.refresh_from_db()
    assert message.state == MessageState.WAITING and message.passed_on_at is not None
    reply = receiver.turns.get()
    assert reply.started_by == StartedBy.MESSAGE and reply.chain_id == message.chain_id


def test_pass_it_on_under_htmx_answers_with_the_fresh_card(htmx, held):
    sender, receiver, message = held

    response = htmx.post(press_url(receiver, message), {"action": "pass"})

    assert response.status_code == 200
    html = response.content.decode()
    assert (
        '<ol id="transcript" class="transcript" aria-label="Transcript" hx-swap-oob="true">' in html
    )
    card = message_card(html, message)
    assert "is-msg-waiting" in card and "Pass it on" not in card


def test_dismiss_turns_the_card_dismissed_and_starts_nothing(htmx, signed_in, held):
    sender, receiver, message = held

    response = htmx.post(press_url(receiver, message), {"action": "dismiss"})

    assert response.status_code == 200
    message.refresh_from_db()
    assert message.state == MessageState.DISMISSED
    assert not receiver.turns.exists()
    for html in (response.content.decode(), page(signed_in, receiver)):
        card = message_card(html, message)
        assert '<span class="badge is-msg-dismissed">dismissed</span>' in card
        assert "Pass it on" not in card


@pytest.mark.parametrize("client_name", ["signed_in", "htmx"])
def test_a_message_no_longer_held_is_refused_with_409_and_says_so(request, held, client_name):
    client = request.getfixturevalue(client_name)
    sender, receiver, message = held
    held_message_dismiss(message=message)

    response = client.post(press_url(receiver, message), {"action": "pass"})

    assert response.status_code == 409
    html = response.content.decode()
    assert ERR_NOT_HELD == "That message isn't waiting for you any more."
    assert "That message isn&#x27;t waiting for you any more." in html
    assert "is-msg-dismissed" in message_card(html, message)  # and the card as it is now
    message.refresh_from_db()
    assert message.state == MessageState.DISMISSED


@pytest.mark.parametrize("client_name", ["signed_in", "htmx"])
@pytest.mark.parametrize("action", ["", "approve", "PASS"])
def test_a_bad_action_is_a_400_naming_the_field(request, held, client_name, action):
    client = request.getfixturevalue(client_name)
    sender, receiver, message = held

    response = client.post(press_url(receiver, message), {"action": action})

    assert response.status_code == 400
    assert ERR_BAD_ACTION.startswith("action must be")
    assert "action must be “pass” (Pass it on) or “dismiss” (Dismiss)." in response.content.decode()
    message.refresh_from_db()
    assert message.state == MessageState.HELD


def test_someone_elses_chat_or_message_is_404(held, second_owner):
    sender, receiver, message = held
    stranger = Client()
    stranger.force_login(second_owner)

    response = stranger.post(press_url(receiver, message), {"action": "pass"})

    assert response.status_code == 404
    message.refresh_from_db()
    assert message.state == MessageState.HELD


def test_a_message_is_pressed_only_through_the_chat_it_was_sent_to(signed_in, held):
    sender, receiver, message = held

    through_sender = signed_in.post(press_url(sender, message), {"action": "pass"})
    made_up = signed_in.post(
        f"/api/conversations/{receiver.public_id}/messages/m_nosuch", {"action": "pass"}
    )
    no_chat = signed_in.post(
        f"/api/conversations/c_nosuch/messages/{message.message_id}", {"action": "pass"}
    )

    assert [r.status_code for r in (through_sender, made_up, no_chat)] == [404, 404, 404]
    message.refresh_from_db()
    assert message.state == MessageState.HELD


def test_no_session_no_press_not_even_with_the_gateway_token(held, owner):
    sender, receiver, message = held
    token = gateway_token_rotate(owner=owner)

    nobody = Client().post(press_url(receiver, message), {"action": "pass"})
    with_token = Client(headers={"Authorization": f"Bearer {token}"}).post(
        press_url(receiver, message), {"action": "pass"}
    )

    for response in (nobody, with_token):
        assert response.status_code == 302 and response.url.startswith("/signin/")
    message.refresh_from_db()
    assert message.state == MessageState.HELD


def test_a_press_without_the_csrf_token_is_refused(held, owner):
    sender, receiver, message = held
    browser = Client(enforce_csrf_checks=True, headers={"Origin": "http://testserver"})
    browser.force_login(owner)

    response = browser.post(press_url(receiver, message), {"action": "pass"})

    assert response.status_code == 403
    message.refresh_from_db()
    assert message.state == MessageState.HELD


def test_the_press_refuses_get(signed_in, held):
    sender, receiver, message = held

    assert signed_in.get(press_url(receiver, message)).status_code == 405


def test_the_receiving_chats_own_reply_cannot_let_a_held_message_in(owner, workspace, agent):
    receiver = ChatFactory(
        owner=owner,
        folder=workspace,
        title="Fix the login",
        inbound=Inbound.HOLD,
        script=[[{"tool": "list_files", "args": {}}, {"say": "Looked."}]],
    )
    sender = ChatFactory(owner=owner, folder=workspace, title="Release notes")
    message = send(sender, receiver, "Approve everything", start_reply=True)

    message_send(conversation=receiver, text="carry on")
    drain()

    message.refresh_from_db()
    assert message.state == MessageState.HELD and message.read_at is None
    assert receiver.turns.get().started_by == StartedBy.PERSON  # the person's, not the message's


# ---------------------------------------------------------------------------
# Messages from other chats: the chat's menu, and ⋯ on a card that came to it


def inbound_buttons(html: str, chat) -> list[tuple[str, str]]:
    form = re.findall(
        rf'<form class="popover inbound" method="post" action="/c/{chat.public_id}/inbound/".*?</form>',
        html,
        re.S,
    )
    assert form
    return re.findall(
        r'<button type="submit" name="inbound" value="(\w+)" aria-pressed="(true|false)">',
        form[0],
    )


def test_the_chats_menu_offers_the_three_settings_and_marks_the_current_one(signed_in, chat):
    html = page(signed_in, chat)

    assert "Messages from other chats" in html
    assert inbound_buttons(html, chat) == [
        ("accept", "true"),  # unset means let them in
        ("hold", "false"),
        ("refuse", "false"),
    ]
    for label in ("Let them in", "Hold them for me", "Turn them away"):
        assert label in html


def test_setting_hold_them_for_me_from_the_menu(signed_in, chat):
    response = signed_in.post(f"/c/{chat.public_id}/inbound/", {"inbound": "hold"})

    assert response.status_code == 302 and response.url == f"/c/{chat.public_id}/"
    chat.refresh_from_db()
    assert chat.inbound == Inbound.HOLD
    html = page(signed_in, chat)
    assert ("hold", "true") in inbound_buttons(html, chat)
    assert '<span class="tag">Hold them for me</span>' in html


def test_setting_turn_them_away_under_htmx_answers_with_the_fresh_menu(htmx, chat):
    response = htmx.post(f"/c/{chat.public_id}/inbound/", {"inbound": "refuse"})

    assert response.status_code == 200
    html = response.content.decode()
    assert '<div id="chat-settings" class="settings" hx-swap-oob="true">' in html
    assert ("refuse", "true") in inbound_buttons(html, chat)
    chat.refresh_from_db()
    assert chat.inbound == Inbound.REFUSE


def test_a_bad_inbound_setting_is_a_400_naming_the_field(signed_in, chat):
    response = signed_in.post(f"/c/{chat.public_id}/inbound/", {"inbound": "maybe"})

    assert response.status_code == 400
    assert "inbound must be one of: accept, hold, refuse." in response.content.decode()
    chat.refresh_from_db()
    assert chat.inbound == ""


def test_someone_elses_chats_setting_is_404_and_no_session_is_refused(chat, second_owner):
    stranger = Client()
    stranger.force_login(second_owner)

    assert stranger.post(f"/c/{chat.public_id}/inbound/", {"inbound": "refuse"}).status_code == 404
    nobody = Client().post(f"/c/{chat.public_id}/inbound/", {"inbound": "refuse"})
    assert nobody.status_code == 302 and nobody.url.startswith("/signin/")
    assert signed_in_get_405(chat, stranger)
    chat.refresh_from_db()
    assert chat.inbound == ""


def signed_in_get_405(chat, client) -> bool:
    return client.get(f"/c/{chat.public_id}/inbound/").status_code == 405


def test_the_menu_on_a_card_that_came_here_sets_this_chats_setting(signed_in, two):
    sender, receiver = two
    message = send(sender, receiver)

    came = message_card(page(signed_in, receiver), message)
    sent = message_card(page(signed_in, sender), message)

    assert f'<details class="menu card-menu" id="message-{message.message_id}-menu">' in came
    assert inbound_buttons(came, receiver) == [
        ("accept", "true"),
        ("hold", "false"),
        ("refuse", "false"),
    ]
    assert "card-menu" not in sent  # a card this chat sent sets nothing here

    signed_in.post(f"/c/{receiver.public_id}/inbound/", {"inbound": "refuse"})

    came = message_card(page(signed_in, receiver), message)
    assert ("refuse", "true") in inbound_buttons(came, receiver)


# ---------------------------------------------------------------------------
# WaitNote and the stopped card


def test_a_wait_card_opens_the_chat_it_waits_for_then_says_how_it_ended(signed_in, two):
    waiter, target = two
    open_turn(target)  # it is working, so the wait waits
    answer = wait_for(
        waiter=waiter, turn=open_turn(waiter), kind=WaitKind.CHAT, target_id=target.public_id
    )
    assert answer.let_go

    card = card_of(page(signed_in, waiter), "card-wait")
    assert "Waiting for “Fix the login”" in card
    assert re.search(rf'<a class="button small" {re.escape(opens(target))}>Open</a>', card)

    conversation_stop(conversation=waiter, by="person")
    conversation_stop(conversation=target, by="person")
    assert wake(wait=answer.wait)

    card = card_of(page(signed_in, waiter), "card-wait")
    assert "“Fix the login” was stopped before its reply finished" in card
    assert "Waiting for" not in card
    assert Wait.objects.get().state == WaitState.WOKEN


def test_a_wait_card_for_a_deleted_chat_opens_nothing(signed_in, two):
    waiter, target = two
    open_turn(target)
    wait_for(waiter=waiter, turn=open_turn(waiter), kind=WaitKind.CHAT, target_id=target.public_id)
    conversation_stop(conversation=waiter, by="person")
    conversation_delete(conversation=target)

    card = card_of(page(signed_in, waiter), "card-wait")

    assert "Fix the login" in card and "Open</a>" not in card


def test_the_stopped_card_names_the_chat_that_stopped_it_and_why(signed_in, two):
    stopper, stopped = two
    open_turn(stopped)

    stop_chat(
        sender=stopper,
        turn=open_turn(stopper),
        chat_id=stopped.public_id,
        reason="Fixing auth.py myself, leave it",
    )

    card = card_of(page(signed_in, stopped), "card-stopped")
    assert re.search(r"Stopped by “<a [^>]*><span hx-disable>Release notes</span></a>”", card)
    assert opens(stopper) in card
    assert "· another chat, not you" in card
    assert '<p class="card-why" hx-disable>Fixing auth.py myself, leave it</p>' in card


# ---------------------------------------------------------------------------
# Thirty cards cost what one costs


def add_cards(chat, others, n: int) -> None:
    """``n`` cards of each kind in ``chat``, written as the services write them."""
    sender, receiver = others
    chain = ChainFactory(owner=chat.owner)
    for i in range(n):
        rows = [
            {"id": o.public_id, "title": o.title, "state": "idle", "same_folder": True}
            for o in others
        ]
        entry_append(
            conversation=chat,
            role=EntryRole.CONCH,
            kind=EntryKind.CARD,
            text="Checked on your other chats",
            data={"card": "chats.listed", "working": 0, "needs_you": 0, "rows": rows},
        )
        for side, other in (("from", sender), ("to", receiver)):
            message = ChatMessageFactory(
                chain=chain,
                sender=other if side == "from" else chat,
                receiver=chat if side == "from" else other,
                sender_title="x",
                sender_public_id="x",
                receiver_title="y",
                receiver_public_id="y",
                text=f"message {i}",
                state=MessageState.HELD if side == "from" else MessageState.READ,
            )
            entry_append(
                conversation=chat,
                role=EntryRole.CONCH,
                kind=EntryKind.CARD,
                text="a message",
                data={"card": "chat.message", "message_id": message.message_id, "side": side},
            )
        wait = WaitFactory(
            waiter=chat,
            target_chat=sender,
            target_public_id=f"{sender.public_id}-{i}-{n}",
            state=WaitState.WOKEN,
            outcome={"headline": f"“{sender.title}” finished its reply"},
        )
        entry_append(
            conversation=chat,
            role=EntryRole.CONCH,
            kind=EntryKind.CARD,
            text="Waiting",
            data={"card": "wait", "wait": wait.pk, "kind": "chat", "target": sender.public_id},
        )
        entry_append(
            conversation=chat,
            role=EntryRole.CONCH,
            kind=EntryKind.CARD,
            text="Stopped",
            data={"card": "chat.stopped", "by": sender.public_id, "by_title": "x", "reason": "r"},
        )


def test_a_transcript_of_thirty_cards_of_each_kind_costs_what_one_costs(
    signed_in, owner, agent, workspace, django_assert_max_num_queries
):
    chat = ChatFactory(owner=owner, folder=workspace, title="Cards")
    others = (
        ChatFactory(owner=owner, folder=workspace, title="Sender"),
        ChatFactory(owner=owner, folder=workspace, title="Receiver"),
    )
    url = f"/c/{chat.public_id}/"
    add_cards(chat, others, 1)
    with CaptureQueriesContext(connection) as one:
        html = signed_in.get(url).content.decode()
    assert html.count('class="card ') == 5

    add_cards(chat, others, 29)

    with django_assert_max_num_queries(len(one)):
        html = signed_in.get(url).content.decode()
    assert html.count('class="card ') == 150
    assert html.count(">Pass it on</button>") == 30


class _Ids(HTMLParser):
    """Every id on the page, and the ids of the menus inside a region the socket pushes again."""

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []
        self.inside = 0  # depth of the pushed region being read; 0 outside one
        self.ids: list[str] = []
        self.pushed_menus: list[str | None] = []

    def handle_starttag(self, tag, attrs):
        names = dict(attrs)
        if names.get("id"):
            self.ids.append(names["id"])
        if not self.inside and names.get("id") in regions.CHAT_REGIONS:
            self.inside = len(self.stack) + 1
        if self.inside and tag == "details" and "menu" in (names.get("class") or "").split():
            self.pushed_menus.append(names.get("id"))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        while self.stack and self.stack.pop() != tag:
            pass
        if self.inside and len(self.stack) < self.inside:
            self.inside = 0


def test_a_page_of_many_cards_has_each_id_once_and_each_pushed_menu_one(
    signed_in, owner, workspace
):
    """conch-keys.js keeps the menus open in a region pushed again by finding them by id:
    a card's ⋯ menu without one closed at every push of the transcript, and two of one id
    would open the wrong one (and leave the page invalid)."""
    chat = ChatFactory(owner=owner, folder=workspace, title="Cards")
    others = (
        ChatFactory(owner=owner, folder=workspace, title="Sender"),
        ChatFactory(owner=owner, folder=workspace, title="Receiver"),
    )
    add_cards(chat, others, 30)
    parser = _Ids()

    parser.feed(page(signed_in, chat))

    assert parser.ids.count("transcript") == 1
    twice = sorted({i for i in parser.ids if parser.ids.count(i) > 1})
    assert twice == []
    card_menus = [
        m for m in parser.pushed_menus if m and m.endswith("-menu") and m.startswith("message-")
    ]
    assert len(card_menus) == 30  # one ⋯ on each card that came here
    assert None not in parser.pushed_menus


# ---------------------------------------------------------------------------
# The socket: a card's change reaches the page showing it


@pytest.mark.django_db(transaction=True)
async def test_a_message_changing_state_pushes_the_shown_chats_transcript(owner, agent, workspace):
    sender, receiver = await database_sync_to_async(_held_pair)(owner, workspace)
    message = await database_sync_to_async(ChatMessage.objects.get)()
    cookie = await database_sync_to_async(session_cookie)(owner)
    communicator = socket(cookie=cookie, path=f"/ws/?chat={receiver.public_id}")
    connected, _ = await communicator.connect(timeout=TIMEOUT)
    assert connected
    try:
        hello, _ = seq_of(await communicator.receive_from(timeout=TIMEOUT))

        await database_sync_to_async(held_message_dismiss)(message=message)

        # One chat.message event for each side, pushed apart or as one run (heard
        # together); this tab shows the receiver.
        pushes = [await communicator.receive_from(timeout=TIMEOUT)]
        while seq_of(pushes[-1])[0] < hello + 2:
            pushes.append(await communicator.receive_from(timeout=TIMEOUT))
    finally:
        await communicator.disconnect()
    carried = []
    for push in pushes:
        first = re.search(r'data-first="(\d+)"', push.split(">", 1)[0])
        carried += range(int(first.group(1)) if first else seq_of(push)[0], seq_of(push)[0] + 1)
    assert carried == [hello + 1, hello + 2]
    shown = [p for p in pushes if 'id="transcript"' in p]
    assert len(shown) == 1
    assert '<span class="badge is-msg-dismissed">dismissed</span>' in shown[0]
    assert 'id="chat-title"' not in shown[0] and 'id="chat-list"' not in shown[0]


def _held_pair(owner, workspace):
    receiver = ChatFactory(
        owner=owner, folder=workspace, title="Fix the login", inbound=Inbound.HOLD
    )
    sender = ChatFactory(owner=owner, folder=workspace, title="Release notes")
    send(sender, receiver)
    return sender, receiver


@pytest.mark.django_db(transaction=True)
async def test_a_look_at_the_other_chats_pushes_the_card_to_the_page_showing_it(
    owner, agent, workspace
):
    looker = await database_sync_to_async(ChatFactory)(
        owner=owner, folder=workspace, title="Release notes"
    )
    await database_sync_to_async(ChatFactory)(owner=owner, folder=workspace, title="Fix the login")
    cookie = await database_sync_to_async(session_cookie)(owner)
    communicator = socket(cookie=cookie, path=f"/ws/?chat={looker.public_id}")
    connected, _ = await communicator.connect(timeout=TIMEOUT)
    assert connected
    try:
        await communicator.receive_from(timeout=TIMEOUT)
        turn = await database_sync_to_async(turn_start)(
            conversation=looker, started_by=StartedBy.PERSON, text="look"
        )
        await communicator.receive_from(timeout=TIMEOUT)  # its status

        def look():
            chats_look_record(conversation=looker, turn=turn, look=list_chats(conversation=looker))

        await database_sync_to_async(look)()
        pushed = await communicator.receive_from(timeout=TIMEOUT)
    finally:
        await communicator.disconnect()
    assert 'id="transcript"' in pushed
    assert "Checked on your other chats" in card_of(pushed, "card-look")


def test_a_card_event_for_another_chat_pushes_its_row_but_not_its_cards(two):
    sender, receiver = two
    send(sender, receiver, "secret plan")

    html = regions.render_event(
        owner_id=receiver.owner_id,
        event=CHAT_MESSAGE,
        seq=9,
        conversation_id=sender.public_id,
        showing=receiver.public_id,
    )

    assert seq_of(html) == (9, "event")
    # Its row, since a message's state can change what the row says is held for you...
    assert f'<li id="row-{sender.public_id}"' in html
    # ...and nothing of the transcript of a chat this tab isn't showing.
    assert 'id="transcript"' not in html and "secret plan" not in html


def test_a_tab_naming_someone_elses_chat_is_pushed_none_of_its_cards(two, second_owner):
    sender, receiver = two
    send(sender, receiver, "secret plan")

    html = regions.render_event(
        owner_id=second_owner.pk,
        event=CHAT_MESSAGE,
        seq=3,
        conversation_id=receiver.public_id,
        showing=receiver.public_id,
    )

    assert "secret plan" not in html and 'id="transcript"' not in html


def test_the_list_and_the_tabs_title_say_a_message_is_held_for_you(signed_in, two, held):
    sender, receiver = two

    html = signed_in.get("/").content.decode()

    row = html[html.index(f'<li id="row-{receiver.public_id}"') :]
    row = row[: row.index("</li>")]
    assert "data-needs-you" in row and '<span class="badge is-held">1 held</span>' in row
    assert "<title>(1) Conch</title>" in html
    other = html[html.index(f'<li id="row-{sender.public_id}"') :]
    assert "held" not in other[: other.index("</li>")]
