"""A chat's trust timeline as the person reads it (chats/timeline.py): each rise, its
words, where it came in, and the path back through the person's other chats, as far
as they may see it, never showing another chat's words."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chats import timeline
from chats.limits import LIMITS
from chats.models import Conversation, Origin, Taint, TaintRise
from chats.refusals import NOT_IN_SET, SAID_NO
from chats.taint import Cause, taint_raise
from chats.timeline import GONE, chat_timeline, when_words
from tests.factories import ChatFactory, ConversationFactory, StepFactory, TurnFactory

pytestmark = pytest.mark.django_db

URL = "https://example.com/release-notes"


def read_page(chat: Conversation, url: str = URL) -> TaintRise:
    """``chat`` reads a page in a step of a reply, as fetch_page does."""
    turn = TurnFactory(conversation=chat)
    step = StepFactory(turn=turn, tool="fetch_page", family="browsing")
    taint_raise(
        conversation=chat, taint=Taint.UNTRUSTED, cause=Cause.page(url, turn=turn, step=step.pk)
    )
    return TaintRise.objects.filter(conversation=chat).latest("at", "id")


def latest(chat: Conversation) -> TaintRise:
    return TaintRise.objects.filter(conversation=chat).latest("at", "id")


def three_chats(owner):
    """A reads a page; B takes in A's message; C waits on B: the path C -> B -> A."""
    a = ChatFactory(owner=owner, title="Release notes")
    b = ChatFactory(owner=owner, title="Changelog")
    c = ChatFactory(owner=owner, title="Publish")
    read_page(a)
    taint_raise(conversation=b, taint=Taint.UNTRUSTED, cause=Cause.message(a, message_id="m_1"))
    taint_raise(conversation=c, taint=Taint.UNTRUSTED, cause=Cause.wait(b))
    return a, b, c


def lines(chat, viewer) -> list[str]:
    """Each row and its path, as plain words."""
    found = []
    for row in chat_timeline(chat, viewer_id=viewer.pk).rows:
        found.append(f"It {row.did.text}.")
        found.extend(f"from {hop.chat.text}, which {hop.had.text}" for hop in row.path)
    return found


# ---------------------------------------------------------------------------
# A chat's own rises


def test_a_page_read_is_a_row_with_its_address_its_tool_and_its_step(owner, agent):
    chat = ChatFactory(owner=owner)
    rise = read_page(chat)

    trust = chat_timeline(chat, viewer_id=owner.pk, zone=ZoneInfo("UTC"))

    (row,) = trust.rows
    assert row.id == rise.pk
    assert row.did.text == f"read {URL} (fetch_page)"
    assert (row.before, row.after) == (Taint.NONE, Taint.UNTRUSTED)
    assert (row.link, row.link_label) == (f"#step-{rise.step_id}", "the step")
    assert row.when == f"at {rise.at.astimezone(UTC):%H:%M}"
    assert trust.careful == "Careful: read something from outside"
    assert not trust.unrecorded


def test_someone_elses_words_say_which_app_and_sender_and_the_badge_says_whose(owner, agent):
    chat = ChatFactory(owner=owner)
    read_page(chat)
    taint_raise(
        conversation=chat,
        taint=Taint.PERSON,
        cause=Cause.stranger(channel="telegram", sender="4242"),
    )
    chat.refresh_from_db()

    trust = chat_timeline(chat, viewer_id=owner.pk)

    assert [row.did.text for row in trust.rows] == [
        f"read {URL} (fetch_page)",
        "took in someone else's words (telegram, from 4242)",
    ]
    assert [(row.before, row.after) for row in trust.rows] == [
        (Taint.NONE, Taint.UNTRUSTED),
        (Taint.UNTRUSTED, Taint.PERSON),
    ]
    assert trust.careful == "Careful: has someone else's words"


def test_a_message_that_carried_it_in_links_to_its_card(owner, agent):
    a = ChatFactory(owner=owner, title="Release notes")
    b = ChatFactory(owner=owner)
    read_page(a)
    taint_raise(conversation=b, taint=Taint.UNTRUSTED, cause=Cause.message(a, message_id="m_7"))

    (row,) = chat_timeline(b, viewer_id=owner.pk).rows

    assert (row.link, row.link_label) == ("#message-m_7", "the message")
    assert row.did.text == "took in a message from ‘Release notes’"
    assert row.did.chat.href == f"/c/{a.public_id}/#rise-{latest(a).pk}"


def test_a_key_in_an_address_is_not_shown(owner, agent):
    chat = ChatFactory(owner=owner)
    read_page(chat, "https://example.com/feed?api_key=sk-live-0123456789abcdefghijklmnop")

    (row,) = chat_timeline(chat, viewer_id=owner.pk).rows

    assert "sk-live-0123456789abcdefghijklmnop" not in row.did.text
    assert row.did.text.startswith("read https://example.com/feed?")


def test_a_chat_careful_before_anything_was_written_down_says_so(owner, agent):
    never = ConversationFactory(owner=owner, agent=agent, taint=Taint.UNTRUSTED)
    more = ChatFactory(owner=owner)
    read_page(more)
    Conversation.objects.filter(pk=more.pk).update(taint=Taint.PERSON)  # before the timeline
    more.refresh_from_db()

    assert chat_timeline(never, viewer_id=owner.pk).unrecorded
    assert chat_timeline(never, viewer_id=owner.pk).rows == ()
    assert chat_timeline(more, viewer_id=owner.pk).unrecorded
    assert timeline.careful_rise(never) is None
    assert timeline.careful_rise(more) is None


def test_the_rise_that_made_a_chat_careful_is_its_latest(owner, agent):
    chat = ChatFactory(owner=owner)
    assert timeline.careful_rise(chat) is None
    rise = read_page(chat)
    chat.refresh_from_db()

    assert timeline.careful_rise(chat) == rise.pk


def test_another_account_reads_no_timeline_of_the_owners_chat(owner, second_owner, agent):
    chat = ChatFactory(owner=owner)
    read_page(chat)

    trust = chat_timeline(chat, viewer_id=second_owner.pk)

    assert trust.rows == ()
    assert not trust.careful


# ---------------------------------------------------------------------------
# The path across chats


def test_the_path_goes_back_through_each_chat_to_the_page(owner, agent):
    a, b, c = three_chats(owner)
    a_rise, b_rise = latest(a), latest(b)

    (row,) = chat_timeline(c, viewer_id=owner.pk, zone=ZoneInfo("UTC")).rows

    assert lines(c, owner) == [
        "It waited on ‘Changelog’ and read how it ended.",
        "from ‘Changelog’, which had taken in a message from ‘Release notes’",
        f"from ‘Release notes’, which had read {URL} (fetch_page)",
    ]
    assert [hop.when for hop in row.path] == [
        f"at {b_rise.at.astimezone(UTC):%H:%M}",
        f"at {a_rise.at.astimezone(UTC):%H:%M}",
    ]
    assert [hop.chat.href for hop in row.path] == [
        f"/c/{b.public_id}/#rise-{b_rise.pk}",
        f"/c/{a.public_id}/#rise-{a_rise.pk}",
    ]
    assert row.path_goes_on is None


def test_a_deleted_chat_on_the_path_is_a_chat_that_is_gone(owner, agent):
    a, b, c = three_chats(owner)
    a.delete()

    assert lines(c, owner) == [
        "It waited on ‘Changelog’ and read how it ended.",
        f"from ‘Changelog’, which had taken in a message from {GONE}",
    ]
    b.delete()
    assert lines(c, owner) == [f"It waited on {GONE} and read how it ended."]


def test_a_chat_given_to_another_owner_is_gone_and_the_path_stops_there(owner, second_owner, agent):
    a, b, c = three_chats(owner)
    Conversation.objects.filter(pk=a.pk).update(owner=second_owner)

    assert lines(c, owner) == [
        "It waited on ‘Changelog’ and read how it ended.",
        f"from ‘Changelog’, which had taken in a message from {GONE}",
    ]
    # Not its title, not the page it read.
    (row,) = chat_timeline(c, viewer_id=owner.pk).rows
    shown = repr(row)
    assert "Release notes" not in shown and URL not in shown


def test_a_chat_with_someone_elses_words_on_the_path_is_named_as_the_persons_own(
    owner, agent, outsider
):
    """Not ``is_yours`` to an assistant, but the person's own chat, listed in their sidebar
    by this very title: the path names it, and goes on through it."""
    b = ChatFactory(owner=owner, title="Changelog")
    taint_raise(
        conversation=b,
        taint=Taint.PERSON,
        cause=Cause.routine(outsider, routine_id="r_1", name="Inbox"),
    )

    assert lines(b, owner) == [
        "It took in the result of ‘A stranger on Telegram’, a run of the routine ‘Inbox’.",
        "from ‘A stranger on Telegram’, which had started careful, as set up",
    ]


def test_the_path_is_cut_at_its_bound_and_says_where_it_goes_on(owner, agent):
    hops = LIMITS.trust_path_hops
    chats = [ChatFactory(owner=owner, title=f"Chat {n}") for n in range(hops + 3)]
    read_page(chats[0])
    for before, chat in zip(chats, chats[1:], strict=False):
        taint_raise(
            conversation=chat, taint=Taint.UNTRUSTED, cause=Cause.message(before, message_id="m")
        )
    last = chats[-1]

    (row,) = chat_timeline(last, viewer_id=owner.pk).rows

    assert len(row.path) == hops
    assert row.path[-1].chat.title == f"Chat {len(chats) - 1 - hops}"
    assert row.path_goes_on is not None
    assert row.path_goes_on.title == f"Chat {len(chats) - 2 - hops}"
    # A short path is whole: it ends at the page.
    (short,) = chat_timeline(chats[2], viewer_id=owner.pk).rows
    assert short.path[-1].had.text == f"had read {URL} (fetch_page)"
    assert short.path_goes_on is None


def test_its_queries_are_bounded_however_long_the_path(owner, agent):
    def chain(length: int) -> Conversation:
        chats = [ChatFactory(owner=owner) for _ in range(length)]
        read_page(chats[0])
        for before, chat in zip(chats, chats[1:], strict=False):
            taint_raise(
                conversation=chat,
                taint=Taint.UNTRUSTED,
                cause=Cause.message(before, message_id="m"),
            )
        # And the last chat's second rise comes from the same path.
        taint_raise(
            conversation=chats[-1],
            taint=Taint.PERSON,
            cause=Cause.routine(chats[-2], routine_id="r", name="n"),
        )
        chats[-1].refresh_from_db()
        return chats[-1]

    def queries(chat) -> int:
        with CaptureQueriesContext(connection) as captured:
            chat_timeline(chat, viewer_id=owner.pk)
        return len(captured)

    long, longer = chain(LIMITS.trust_path_hops + 2), chain(3 * LIMITS.trust_path_hops)

    assert queries(long) == queries(longer) == 1 + LIMITS.trust_path_hops


# ---------------------------------------------------------------------------
# Times, and refused steps


def test_a_time_is_said_in_the_persons_zone_with_its_day_when_not_today():
    at = datetime(2026, 12, 5, 9, 58, tzinfo=UTC)
    tokyo = ZoneInfo("Asia/Tokyo")

    assert when_words(at, zone=ZoneInfo("UTC"), now=at) == ("09:58", "at 09:58")
    assert when_words(at, zone=tokyo, now=at) == ("18:58", "at 18:58")
    later = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
    assert when_words(at, zone=tokyo, now=later) == ("5 Dec 18:58", "on 5 Dec at 18:58")
    next_year = datetime(2027, 1, 2, tzinfo=UTC)
    assert when_words(at, zone=tokyo, now=next_year)[1] == "on 5 Dec 2026 at 18:58"


def test_a_step_refused_for_someone_elses_words_links_to_the_rise_that_brought_them(owner, agent):
    chat = ChatFactory(owner=owner, origin=Origin.PEER)  # its tools were for others from the start
    turn = TurnFactory(conversation=chat)
    before = StepFactory(
        turn=turn, tool="write_file", error=NOT_IN_SET.for_model(tool="write_file", persona="main")
    )
    taint_raise(
        conversation=chat, taint=Taint.PERSON, cause=Cause.stranger(channel="slack", sender="U1")
    )
    rise = latest(chat)
    refused = StepFactory(
        turn=turn, tool="write_file", error=NOT_IN_SET.for_model(tool="write_file", persona="main")
    )
    said_no = StepFactory(turn=turn, error=SAID_NO.for_model())

    found = timeline.refused_for_trust(chat, [before, refused, said_no])

    assert found == {refused.pk: rise.pk}


def test_a_rise_whose_source_rise_is_not_that_chats_own_is_not_followed(owner, agent):
    """The path only ever shows a rise of the very chat it names."""
    a = ChatFactory(owner=owner, title="Release notes")
    elsewhere = ChatFactory(owner=owner, title="Elsewhere")
    b = ChatFactory(owner=owner, title="Changelog")
    read_page(elsewhere, "https://example.com/elsewhere")
    Conversation.objects.filter(pk=a.pk).update(taint=Taint.UNTRUSTED)
    TaintRise.objects.create(
        conversation=b,
        before=Taint.NONE,
        after=Taint.UNTRUSTED,
        cause="message",
        source=a,
        source_taint=Taint.UNTRUSTED,
        source_rise=latest(elsewhere),
    )

    (row,) = chat_timeline(b, viewer_id=owner.pk).rows

    assert row.did.text == "took in a message from ‘Release notes’"
    assert row.path == ()
    assert "elsewhere" not in repr(row)


def test_only_the_latest_rises_are_read(owner, agent):
    chat = ChatFactory(owner=owner)
    for n in range(LIMITS.trust_rows + 5):
        TaintRise.objects.create(
            conversation=chat,
            before=Taint.NONE,
            after=Taint.UNTRUSTED,
            cause="page",
            url=f"https://example.com/{n}",
        )

    rows = chat_timeline(chat, viewer_id=owner.pk).rows

    assert len(rows) == LIMITS.trust_rows
    assert rows[-1].did.text == f"read https://example.com/{LIMITS.trust_rows + 4}"
    assert rows[0].did.text == "read https://example.com/5"


@pytest.mark.parametrize(
    ("cause", "did", "had"),
    [
        (
            lambda src: Cause.mcp(server="Docs", tool="search", url="https://docs.example/q"),
            "used search on the MCP server ‘Docs’ (https://docs.example/q)",
            "had used search on the MCP server ‘Docs’ (https://docs.example/q)",
        ),
        (
            lambda src: Cause.imported(archive="/home/me/sessions.json", claimed="person"),
            "was imported from /home/me/sessions.json, which said it had someone else's words",
            "had been imported from /home/me/sessions.json, which said it had someone else's words",
        ),
        (
            lambda src: Cause.imported(archive="/home/me/sessions.json"),
            "was imported from /home/me/sessions.json",
            "had been imported from /home/me/sessions.json",
        ),
        (
            lambda src: Cause.task(src, task_id="t_1"),
            "read the result of its task ‘Source’",
            "had read the result of its task ‘Source’",
        ),
        (
            lambda src: Cause.chat_read(src, chat_id=src.public_id),
            "read the words of ‘Source’",
            "had read the words of ‘Source’",
        ),
        (
            lambda src: Cause.parent(src),
            "was started by ‘Source’, which was careful",
            "had been started by ‘Source’, which was careful",
        ),
        (
            lambda src: Cause.previous(src),
            "came after ‘Source’, the session before it, which had someone else's words",
            "had come after ‘Source’, the session before it, which had someone else's words",
        ),
    ],
)
def test_each_cause_is_said_in_conchs_words_and_one_step_further_back(
    owner, agent, cause, did, had
):
    source = ChatFactory(owner=owner, title="Source")
    read_page(source)
    chat = ChatFactory(owner=owner, title="Here")
    taint_raise(conversation=chat, taint=Taint.UNTRUSTED, cause=cause(source))
    after = ChatFactory(owner=owner)
    taint_raise(conversation=after, taint=Taint.UNTRUSTED, cause=Cause.wait(chat))

    (row,) = chat_timeline(chat, viewer_id=owner.pk).rows
    (then,) = chat_timeline(after, viewer_id=owner.pk).rows

    assert row.did.text == did
    assert then.path[0].had.text == had
