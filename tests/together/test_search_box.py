"""The person's search box: it finds chats by their titles as well as
their words, a title first, and quotes an assistant's words as the page reads them, not
as the Markdown they were written in; every word escaped, only the match marked."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from chats.markdown import plain_text
from chats.models import Conversation, EntryRole
from tests.factories import ConversationFactory, EntryFactory, TurnFactory
from together.past import past_search, person_search

pytestmark = pytest.mark.django_db


def said(chat, text: str, role: str = EntryRole.ASSISTANT) -> None:
    turn = TurnFactory(conversation=chat, ended=True)
    EntryFactory(conversation=chat, turn=turn, role=role, text=text)


@pytest.fixture
def signed_in(owner, agent) -> Client:
    client = Client()
    client.force_login(owner)
    return client


def search_page(client: Client, query: str) -> str:
    response = client.get("/search/", {"q": query})
    assert response.status_code == 200
    return response.content.decode()


def chats_named(page: str) -> list[str]:
    """The titles the page lists as chats named by the search, as text with <mark>s."""
    return re.findall(
        r'<li class="find-chat">\s*<a class="find-open" href="[^"]+"><span class="row-title">(.*?)</span>',
        page,
        re.S,
    )


def snippets(page: str) -> list[str]:
    return re.findall(r'<p class="find-snippet">(.*?)</p>', page, re.S)


# ---------------------------------------------------------------------------
# Titles


def test_a_chat_is_found_by_its_title_with_no_word_of_it_in_its_messages(owner, agent):
    chat = ConversationFactory(owner=owner, agent=agent, title="Quarterly invoices")
    said(chat, "Nothing about that here.")

    found = person_search(owner_id=owner.pk, query="invoices")

    assert [named.chat_id for named in found.chats] == [chat.public_id]
    assert found.hits == ()
    assert found.chats[0].parts() == [("Quarterly ", False), ("invoices", True)]


def test_a_word_finds_the_titles_words_it_begins_and_every_word_must_be_there(owner, agent):
    deploying = ConversationFactory(owner=owner, agent=agent, title="Deploying the API")
    ConversationFactory(owner=owner, agent=agent, title="Redeploy the API")  # not a start
    ConversationFactory(owner=owner, agent=agent, title="Deploy notes")  # no "api"

    found = person_search(owner_id=owner.pk, query="deploy api")

    assert [named.chat_id for named in found.chats] == [deploying.public_id]
    assert found.chats[0].words == ("Deploying", "API")


def test_or_phrases_and_minus_read_for_titles_as_for_words(owner, agent):
    login = ConversationFactory(owner=owner, agent=agent, title="Fix the login bug")
    ConversationFactory(owner=owner, agent=agent, title="Login fix later")
    notes = ConversationFactory(owner=owner, agent=agent, title="Release notes")
    ConversationFactory(owner=owner, agent=agent, title="Release notes draft")

    assert [n.chat_id for n in person_search(owner_id=owner.pk, query='"login bug"').chats] == [
        login.public_id
    ]
    assert [n.chat_id for n in person_search(owner_id=owner.pk, query="release -draft").chats] == [
        notes.public_id
    ]
    assert {
        n.chat_id
        for n in person_search(owner_id=owner.pk, query='"login bug" or notes -draft').chats
    } == {login.public_id, notes.public_id}


def test_a_title_that_is_just_the_words_comes_first_then_the_latest(owner, agent):
    now = timezone.now()
    exact = ConversationFactory(owner=owner, agent=agent, title="Release notes")
    newer = ConversationFactory(owner=owner, agent=agent, title="Release notes for 2.0")
    older = ConversationFactory(owner=owner, agent=agent, title="Notes on the release")
    for chat, days in ((exact, 30), (newer, 1), (older, 10)):
        Conversation.objects.filter(pk=chat.pk).update(
            last_interaction_at=now - timedelta(days=days)
        )

    found = person_search(owner_id=owner.pk, query="release notes")

    assert [n.chat_id for n in found.chats] == [exact.public_id, newer.public_id, older.public_id]


def test_another_accounts_titles_are_never_found(owner, second_owner, agent):
    ConversationFactory(owner=second_owner, agent=agent, title="Their invoices")

    assert person_search(owner_id=owner.pk, query="invoices").chats == ()


def test_the_page_lists_the_chats_named_first_and_their_words_below(signed_in, owner, agent):
    named = ConversationFactory(owner=owner, agent=agent, title="Frobnicate the widgets")
    other = ConversationFactory(owner=owner, agent=agent, title="Something else")
    said(other, "Then frobnicate it once more.")

    page = search_page(signed_in, "frobnicate")

    assert chats_named(page) == ["<mark>Frobnicate</mark> the widgets"]
    assert page.index("Chats with that in their title") < page.index("In their messages")
    assert f'href="/c/{named.public_id}/"' in page
    assert snippets(page) == ["Then <mark>frobnicate</mark> it once more."]


def test_a_title_only_on_a_later_page_is_not_listed_again(signed_in, owner, agent):
    ConversationFactory(owner=owner, agent=agent, title="Frobnicate the widgets")

    assert person_search(owner_id=owner.pk, query="frobnicate", offset=10).chats == ()


def test_a_hostile_title_is_text_and_only_the_match_is_marked(signed_in, owner, agent):
    ConversationFactory(
        owner=owner, agent=agent, title='<img src=x onerror="alert(1)"> invoices <mark>'
    )

    page = search_page(signed_in, "invoices")

    assert chats_named(page) == [
        "&lt;img src=x onerror=&quot;alert(1)&quot;&gt; <mark>invoices</mark> &lt;mark&gt;"
    ]
    assert "<img" not in page


# ---------------------------------------------------------------------------
# Snippets as plain text


def test_an_assistants_markdown_is_quoted_as_the_text_it_reads_as(signed_in, owner, agent):
    chat = ConversationFactory(owner=owner, agent=agent, title="Notes")
    said(
        chat,
        "## Plan\n\nRun **frobnicate** with `--fast`, see [the guide](https://example.com/g).\n\n"
        "- one\n- two",
    )

    page = search_page(signed_in, "frobnicate")

    assert snippets(page) == [
        "Plan Run <mark>frobnicate</mark> with --fast, see the guide. one two"
    ]


def test_a_persons_own_words_are_quoted_as_they_typed_them(signed_in, owner, agent):
    chat = ConversationFactory(owner=owner, agent=agent, title="Notes")
    said(chat, "Please **frobnicate** it", role=EntryRole.PERSON)

    assert snippets(search_page(signed_in, "frobnicate")) == [
        "Please **<mark>frobnicate</mark>** it"
    ]


def test_a_hostile_snippet_stays_text(signed_in, owner, agent):
    chat = ConversationFactory(owner=owner, agent=agent, title="Notes")
    said(
        chat,
        'Try <script>alert("frobnicate")</script> and <img src=x onerror=alert(1)> '
        "[frobnicate](javascript:alert(1)) &lt;b&gt;",
    )

    page = search_page(signed_in, "frobnicate")

    assert snippets(page) == [
        "Try &lt;script&gt;alert(&quot;<mark>frobnicate</mark>&quot;)&lt;/script&gt; and "
        "&lt;img src=x onerror=alert(1)&gt; [<mark>frobnicate</mark>](javascript:alert(1)) "
        "&lt;b&gt;"
    ]
    assert "<script" not in page.split('id="search-heading"')[1]


def test_the_assistants_tool_still_reads_the_words_as_written(owner, agent):
    """search_chats gives the model the Markdown it wrote; only the page reads it as text."""
    chat = ConversationFactory(owner=owner, agent=agent, title="Notes")
    said(chat, "Run **frobnicate** now")
    reader = ConversationFactory(owner=owner, agent=agent, title="Another chat")

    found = past_search(reader=reader, query="frobnicate")

    assert found.hits[0].snippet == "Run **frobnicate** now"


def test_plain_text_keeps_the_words_and_drops_the_marks():
    assert plain_text("# Head\n\n*a* __b__ ~~c~~ `d`\n\n```py\ne = 1\n```\n> f\n\n1. g") == (
        "Head a b c d e = 1 f g"
    )
    assert plain_text("| x | y |\n|---|---|\n| 1 | 2 |") == "x y 1 2"
    assert plain_text("<b>bold</b> &amp; https://example.com") == (
        "<b>bold</b> & https://example.com"
    )
