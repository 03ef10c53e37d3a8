"""The trust timeline on the chat page: the header's "Careful: …" badge and the timeline
it opens, the path across the person's chats, an ask that names the rise that made it,
a card or a refused step linking to its rise; the person's time zone on the page and in
a push; and no other chat's words, ever."""

from __future__ import annotations

import re
from datetime import UTC
from html import unescape
from zoneinfo import ZoneInfo

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from chats import events, regions
from chats.limits import LIMITS
from chats.models import (
    Conversation,
    EntryRole,
    Mode,
    StandingOk,
    StartedBy,
    Step,
    Taint,
    TaintRise,
    Turn,
)
from chats.runtime.chats import entry_append, someone_elses_words_came
from chats.runtime.runner import drain
from chats.runtime.turns import message_send, turn_start
from chats.taint import Cause, taint_raise
from conch.http import TIME_ZONE_COOKIE
from tests.factories import ChatFactory, StepFactory, TurnFactory
from tests.web.sockets import seq_of, session_cookie, socket
from together.messages import WHY_SOMEONE_ELSES_WORDS, message_chat, take_in

pytestmark = pytest.mark.django_db

URL = "https://example.com/release-notes"
SECRET = "marmalade-octopus-7731"  # in other chats' words only: never in a timeline
TIMEOUT = 5


def read_page(chat: Conversation, url: str = URL) -> TaintRise:
    """``chat`` read a page in a step of an earlier reply, as fetch_page does."""
    turn = TurnFactory(conversation=chat, ended=True)
    step = StepFactory(turn=turn, tool="fetch_page", family="browsing", result=f"{SECRET} page")
    taint_raise(
        conversation=chat, taint=Taint.UNTRUSTED, cause=Cause.page(url, turn=turn, step=step.pk)
    )
    chat.refresh_from_db()
    return latest(chat)


def latest(chat: Conversation) -> TaintRise:
    return TaintRise.objects.filter(conversation=chat).latest("at", "id")


def page(client, chat) -> str:
    response = client.get(f"/c/{chat.public_id}/")
    assert response.status_code == 200
    return response.content.decode()


def region(html: str, element_id: str) -> str:
    """The element with this id (whatever attributes come before it), to its closing tag."""
    start = re.search(rf'<(\w+)\b[^>]*\bid="{element_id}"[^>]*>', html)
    assert start, f"no element #{element_id}"
    rest = html[start.start() :]
    depth = 0
    for tag in re.finditer(rf"<(/?){start.group(1)}\b[^>]*>", rest):
        depth += -1 if tag.group(1) else 1
        if depth == 0:
            return rest[: tag.end()]
    raise AssertionError(f"#{element_id} is not closed")


def trust_menu(html: str) -> str:
    return region(html, "trust-menu")


def text_of(html: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)).strip())


def say(chat: Conversation, words: str) -> None:
    entry_append(conversation=chat, role=EntryRole.ASSISTANT, text=words)


def open_turn(chat) -> Turn:
    return chat.turns.filter(ended_at__isnull=True).first() or turn_start(
        conversation=chat, started_by=StartedBy.PERSON, text="go"
    )


@pytest.fixture
def path(owner, agent, workspace):
    """A read a page; B took in A's message; C waited on B. Each has the secret in its words."""
    a = ChatFactory(owner=owner, folder=str(workspace), title="Release notes")
    b = ChatFactory(owner=owner, folder=str(workspace), title="Changelog")
    c = ChatFactory(owner=owner, folder=str(workspace), title="Publish")
    entry_append(conversation=a, role=EntryRole.PERSON, text=f"Read it, {SECRET}")
    say(a, f"The page says {SECRET}")
    read_page(a)
    sent = message_chat(
        sender=a, turn=open_turn(a), chat_id=b.public_id, text=f"Use {SECRET} in the notes"
    ).message
    take_in(message=sent, turn=open_turn(b))
    say(b, f"Noted: {SECRET}")
    taint_raise(conversation=c, taint=Taint.UNTRUSTED, cause=Cause.wait(b))
    for chat in (a, b, c):
        chat.refresh_from_db()
    return a, b, c


# ---------------------------------------------------------------------------
# The badge and its timeline


def test_a_chat_that_read_nothing_has_no_badge(signed_in, chat):
    html = page(signed_in, chat)

    assert 'id="trust-menu"' not in html
    assert "Careful:" not in html


def test_a_careful_chat_has_the_badge_in_its_header_and_it_opens_the_timeline(signed_in, chat):
    rise = read_page(chat)

    html = page(signed_in, chat)

    header = region(html, "chat-title")
    menu = trust_menu(header)
    assert '<details class="menu trust-menu is-untrusted" id="trust-menu">' in menu
    assert (
        '<summary id="trust-summary"><span class="badge is-careful">'
        "Careful: read something from outside</span></summary>"
    ) in menu
    row = region(menu, f"rise-{rise.pk}")
    assert f"It read {URL} (fetch_page)." in text_of(row)
    assert f'<a href="#step-{rise.step_id}" data-trust-goes>Go to the step</a>' in row
    assert f'<time datetime="{rise.at.astimezone(UTC).isoformat()}'[:-6] in row


def test_a_command_that_could_reach_the_network_is_a_row_of_its_own(signed_in, chat):
    turn = TurnFactory(conversation=chat, ended=True)
    step = StepFactory(turn=turn, tool="run_command", family="running a command")
    taint_raise(
        conversation=chat,
        taint=Taint.UNTRUSTED,
        cause=Cause.command_network(sandboxed=False, turn=turn, step=step.pk),
    )
    chat.refresh_from_db()

    menu = trust_menu(page(signed_in, chat))

    row = region(menu, f"rise-{latest(chat).pk}")
    assert "It ran a command that could reach the network (without the sandbox)." in text_of(row)
    assert f'<a href="#step-{step.pk}" data-trust-goes>Go to the step</a>' in row


def test_a_chat_with_someone_elses_words_says_so_on_its_badge(signed_in, chat):
    read_page(chat)
    someone_elses_words_came(conversation=chat, who="4242", channel="telegram")

    menu = trust_menu(page(signed_in, chat))

    assert text_of(region(menu, "trust-summary")) == "Careful: has someone else's words"
    assert "It took in someone else's words (telegram, from 4242)." in text_of(menu)
    assert "read something from outside → someone else's words" in text_of(menu)


def test_a_chat_careful_before_conch_wrote_down_why_says_so(signed_in, chat):
    Conversation.objects.filter(pk=chat.pk).update(taint=Taint.UNTRUSTED)

    menu = trust_menu(page(signed_in, chat))

    assert "It was careful since before Conch wrote down why." in text_of(menu)


def test_the_timeline_shows_the_path_back_through_the_persons_chats(signed_in, path):
    a, b, c = path

    menu = trust_menu(page(signed_in, c))

    words = text_of(menu)
    assert "It waited on ‘Changelog’ and read how it ended." in words
    assert "from ‘Changelog’, which had taken in a message from ‘Release notes’ at " in words
    assert f"from ‘Release notes’, which had read {URL} (fetch_page) at " in words
    assert f'href="/c/{b.public_id}/#rise-{latest(b).pk}"' in menu
    assert f'href="/c/{a.public_id}/#rise-{latest(a).pk}"' in menu


def test_a_chat_no_longer_the_persons_is_a_chat_that_is_gone(signed_in, path, second_owner):
    a, b, c = path
    Conversation.objects.filter(pk=a.pk).update(owner=second_owner)

    menu = trust_menu(page(signed_in, c))

    assert "which had taken in a message from a chat that is gone at " in text_of(menu)
    assert "Release notes" not in menu and URL not in menu and a.public_id not in menu


def test_no_other_chats_words_ever_reach_the_timeline(signed_in, htmx, path, owner):
    """The secret is in A's and B's transcripts, A's step, and A's message to B: never in
    C's page (which shows only C's timeline of them), nor in any chat's timeline."""
    a, b, c = path
    assert SECRET in page(signed_in, a) and SECRET in page(signed_in, b)  # it is there to leak

    shown = [
        page(signed_in, c),
        htmx.get(f"/c/{c.public_id}/regions/").content.decode(),
        regions.render_event(
            owner_id=owner.pk,
            event=events.CONVERSATION_UPDATED,
            seq=1,
            conversation_id=c.public_id,
            showing=c.public_id,
        ),
        *(trust_menu(page(signed_in, chat)) for chat in (a, b)),
    ]

    assert all('id="trust-menu"' in html for html in shown)
    for html in shown:
        assert SECRET not in html


def test_a_title_is_text_on_the_timeline_never_markup(signed_in, owner, agent, workspace):
    hostile = ChatFactory(owner=owner, folder=str(workspace), title="<img src=x onerror=alert(1)>")
    chat = ChatFactory(owner=owner, folder=str(workspace))
    read_page(hostile)
    taint_raise(conversation=chat, taint=Taint.UNTRUSTED, cause=Cause.wait(hostile))

    menu = trust_menu(page(signed_in, chat))

    assert "<img" not in menu
    assert "‘&lt;img src=x onerror=alert(1)&gt;’" in menu


# ---------------------------------------------------------------------------
# The person's time zone, on the page and in a push


def test_the_times_are_in_the_persons_time_zone(owner, agent, chat):
    rise = read_page(chat)
    tokyo, paris = Client(), Client()
    for client, zone in ((tokyo, "Asia/Tokyo"), (paris, "Europe/Paris")):
        client.force_login(owner)
        client.cookies[TIME_ZONE_COOKIE] = zone

    for client, zone in ((tokyo, "Asia/Tokyo"), (paris, "Europe/Paris")):
        clock = f"{rise.at.astimezone(ZoneInfo(zone)):%H:%M}"
        row = region(trust_menu(page(client, chat)), f"rise-{rise.pk}")
        assert re.search(rf"<time datetime=\"[^\"]+\">(\d+ \w+ )?{clock}</time>", row), zone


@pytest.mark.django_db(transaction=True)
async def test_a_push_says_the_times_in_each_tabs_own_time_zone(owner, agent):
    chat = await database_sync_to_async(ChatFactory)(owner=owner, title="Release notes")
    rise = await database_sync_to_async(read_page)(chat)
    cookie = await database_sync_to_async(session_cookie)(owner)
    tabs = {
        zone: socket(
            cookie=f"{cookie}; {TIME_ZONE_COOKIE}={zone}", path=f"/ws/?chat={chat.public_id}"
        )
        for zone in ("Asia/Tokyo", "America/New_York")
    }
    for tab in tabs.values():
        connected, _ = await tab.connect(timeout=TIMEOUT)
        assert connected
    try:
        for tab in tabs.values():
            await tab.receive_from(timeout=TIMEOUT)  # hello
        await database_sync_to_async(someone_elses_words_came)(
            conversation=chat, who="4242", channel="telegram"
        )
        pushed = {zone: await tab.receive_from(timeout=TIMEOUT) for zone, tab in tabs.items()}
    finally:
        for tab in tabs.values():
            await tab.disconnect()
    for zone, push in pushed.items():
        seq_of(push)
        menu = trust_menu(push)
        assert text_of(region(menu, "trust-summary")) == "Careful: has someone else's words"
        clock = f"{rise.at.astimezone(ZoneInfo(zone)):%H:%M}"
        assert re.search(rf">(\d+ \w+ )?{clock}</time>", region(menu, f"rise-{rise.pk}")), zone


# ---------------------------------------------------------------------------
# An ask the chat's taint made


def stop(target) -> dict:
    return {"tool": "stop_chat", "args": {"chat": target.public_id, "reason": "the page said so"}}


def write(path: str) -> dict:
    return {"tool": "write_file", "args": {"path": path, "content": path}}


def asks(chat, *actions) -> Turn:
    """The chat's next reply plays ``actions``, and stops at its ask."""
    number = chat.turns.count()
    Conversation.objects.filter(pk=chat.pk).update(script=[[]] * number + [list(actions)])
    turn = message_send(conversation=chat, text="Go on")
    drain()
    turn.refresh_from_db()
    assert turn.pending_action, "it asked"
    return turn


def controls(client, chat) -> str:
    return region(page(client, chat), "chat-controls")


def test_an_ask_the_chats_taint_made_names_its_rise_in_one_line(signed_in, owner, agent, workspace):
    target = ChatFactory(owner=owner, folder=str(workspace), title="Deploy")
    chat = ChatFactory(owner=owner, folder=str(workspace), mode=Mode.AUTO)
    rise = read_page(chat)

    turn = asks(chat, stop(target))

    assert turn.pending_action["careful"] == {"rise": rise.pk}
    box = controls(signed_in, chat)
    why = re.search(r'<p class="request-why" hx-disable>(.*?)</p>', box, re.S).group(1)
    clock = f"{rise.at.astimezone(UTC):%H:%M}"
    assert text_of(why) == (
        f"This chat asks because it read {URL} (fetch_page) at {clock}. Why it is careful"
    )
    assert f'<a class="trust-why" href="#rise-{rise.pk}">Why it is careful</a>' in why


def test_an_ask_of_ask_mode_says_nothing_of_taint(signed_in, owner, agent, workspace):
    plain = ChatFactory(owner=owner, folder=str(workspace), mode=Mode.ASK)
    careful = ChatFactory(owner=owner, folder=str(workspace), mode=Mode.ASK)
    read_page(careful)

    for chat in (plain, careful):
        turn = asks(chat, write("a.txt"))
        assert "careful" not in turn.pending_action  # Ask mode asks anyway
        assert "request-why" not in controls(signed_in, chat)


def test_an_ask_a_standing_ok_would_have_answered_but_for_the_taint_says_why(
    signed_in, owner, agent, workspace
):
    chat = ChatFactory(owner=owner, folder=str(workspace), mode=Mode.ASK)
    StandingOk.objects.create(conversation=chat, tool="write_file")
    rise = read_page(chat)

    turn = asks(chat, write("a.txt"))

    assert turn.pending_action["careful"] == {"rise": rise.pk}
    assert f"This chat asks because it read {URL}" in controls(signed_in, chat)


def test_an_ask_of_a_chat_careful_before_the_record_says_so(signed_in, owner, agent, workspace):
    target = ChatFactory(owner=owner, folder=str(workspace))
    chat = ChatFactory(owner=owner, folder=str(workspace), mode=Mode.AUTO)
    Conversation.objects.filter(pk=chat.pk).update(taint=Taint.UNTRUSTED)

    turn = asks(chat, stop(target))

    assert turn.pending_action["careful"] == {"rise": None}
    assert (
        "This chat asks because it has read something from outside: careful since before "
        "Conch wrote down why."
    ) in text_of(controls(signed_in, chat))


# ---------------------------------------------------------------------------
# A card not delivered, and a step refused, for trust


def test_a_message_not_delivered_for_someone_elses_words_links_to_the_rise(
    signed_in, owner, agent, workspace, second_owner
):
    sender = ChatFactory(owner=owner, folder=str(workspace), title="Release notes")
    receiver = ChatFactory(owner=owner, folder=str(workspace), title="Group chat")
    message = message_chat(
        sender=sender, turn=open_turn(sender), chat_id=receiver.public_id, text="hello"
    ).message
    receiver = someone_elses_words_came(conversation=receiver, who="4242", channel="telegram")
    take_in(message=message, turn=open_turn(receiver))
    message.refresh_from_db()
    assert message.reason == WHY_SOMEONE_ELSES_WORDS
    rise = latest(receiver)

    sent = region(page(signed_in, sender), f"message-{message.message_id}")
    came = region(page(signed_in, receiver), f"message-{message.message_id}")

    assert (
        f'<a class="trust-why" href="/c/{receiver.public_id}/#rise-{rise.pk}">When they came in</a>'
        in sent
    )
    assert f'<a class="trust-why" href="#rise-{rise.pk}">When they came in</a>' in came
    # And the rise is there on the receiver's page, where the link goes.
    assert f'id="rise-{rise.pk}"' in page(signed_in, receiver)
    # Given to another account, the receiver is no longer linked to from the sender's card.
    Conversation.objects.filter(pk=receiver.pk).update(owner=second_owner)
    sent = region(page(signed_in, sender), f"message-{message.message_id}")
    assert WHY_SOMEONE_ELSES_WORDS.replace("'", "&#x27;") in sent
    assert "When they came in" not in sent and receiver.public_id not in sent


def test_a_message_not_delivered_for_another_reason_links_nowhere(
    signed_in, owner, agent, workspace
):
    sender = ChatFactory(owner=owner, folder=str(workspace))
    receiver = ChatFactory(owner=owner, folder=str(workspace))
    read_page(receiver)
    message = message_chat(
        sender=sender, turn=open_turn(sender), chat_id=receiver.public_id, text="hello"
    ).message
    Conversation.objects.filter(pk=receiver.pk).update(inbound="refuse")
    receiver.refresh_from_db()
    take_in(message=message, turn=open_turn(receiver))
    # Someone else's words come in after: not why this message wasn't delivered.
    someone_elses_words_came(conversation=receiver, who="4242", channel="telegram")

    for chat in (sender, receiver):
        card = region(page(signed_in, chat), f"message-{message.message_id}")
        assert "That chat turned messages from other chats away." in card
        assert "When they came in" not in card


def test_a_step_refused_for_someone_elses_words_links_to_the_rise(
    signed_in, owner, agent, workspace
):
    chat = ChatFactory(owner=owner, folder=str(workspace), mode=Mode.AUTO)
    chat = someone_elses_words_came(conversation=chat, who="4242", channel="telegram")
    Conversation.objects.filter(pk=chat.pk).update(script=[[write("a.txt"), {"say": "no"}]])
    message_send(conversation=chat, text="Write it")
    drain()
    step = Step.objects.get(turn__conversation=chat, tool="write_file")
    assert "someone else's words are in it" in step.error
    rise = latest(chat)

    html = region(page(signed_in, chat), f"step-{step.pk}")

    assert f'<a class="trust-why" href="#rise-{rise.pk}">When they came in</a>' in html


# ---------------------------------------------------------------------------
# Who sees it, and what it costs


def test_a_second_account_gets_404_for_the_owners_careful_chat(path, second_owner):
    a, b, c = path
    client = Client(headers={"HX-Request": "true"})
    client.force_login(second_owner)

    for url in (f"/c/{c.public_id}/", f"/c/{c.public_id}/regions/"):
        response = client.get(url)
        assert response.status_code == 404
        assert "Careful" not in response.content.decode()
        assert "Changelog" not in response.content.decode()


def test_the_page_costs_the_same_for_a_path_cut_at_its_bound_as_for_a_longer_one(
    signed_in, owner, agent
):
    def chain(length: int) -> Conversation:
        chats = [ChatFactory(owner=owner) for _ in range(length)]
        read_page(chats[0])
        for before, chat in zip(chats, chats[1:], strict=False):
            taint_raise(
                conversation=chat,
                taint=Taint.UNTRUSTED,
                cause=Cause.message(before, message_id="m"),
            )
        return chats[-1]

    def queries(chat) -> int:
        with CaptureQueriesContext(connection) as captured:
            html = page(signed_in, chat)
        assert html.count("which had ") == LIMITS.trust_path_hops
        assert "and further back: follow it from" in html
        return len(captured)

    assert queries(chain(LIMITS.trust_path_hops + 2)) == queries(chain(3 * LIMITS.trust_path_hops))
