"""The workspace pages: what the chat list and a chat page show, and how."""

from __future__ import annotations

import re
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.utils import timezone

from chats.models import Mode, Origin, Status, Turn, TurnState
from chats.runtime.chats import conversation_archive
from chats.runtime.runner import drain
from chats.runtime.turns import message_send
from chats.templatetags.conch import duration, folder_tail, relpath, tildify
from tests.factories import ChatFactory

pytestmark = pytest.mark.django_db


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.tags


def row_html(html: str, public_id: str) -> str:
    match = re.search(rf'<li id="row-{public_id}".*?</li>', html, re.S)
    assert match, f"no row for {public_id}"
    return re.sub(r"\s+", " ", match.group(0))


def region(html: str, element_id: str) -> str:
    """The element with this id, to its own closing tag (elements of its kind nest in it)."""
    start = re.search(rf'<(\w+) id="{element_id}"[^>]*>', html)
    assert start, f"no region #{element_id}"
    rest = html[start.start() :]
    depth = 0
    for tag in re.finditer(rf"<(/?){start.group(1)}\b[^>]*>", rest):
        depth += -1 if tag.group(1) else 1
        if depth == 0:
            return rest[: tag.end()]
    raise AssertionError(f"region #{element_id} is not closed")


def start_step(chat, *, family: str, seconds_ago: int) -> Turn:
    turn = message_send(conversation=chat, text="go")
    Turn.objects.filter(pk=turn.pk).update(
        step_family=family, step_started_at=timezone.now() - timedelta(seconds=seconds_ago)
    )
    return turn


# ---------------------------------------------------------------------------
# The chat list


def test_a_working_chat_says_what_it_is_doing_and_for_how_long(signed_in, chat):
    start_step(chat, family="editing files", seconds_ago=40)

    row = row_html(signed_in.get("/").content.decode(), chat.public_id)

    assert "working" in row
    assert re.search(
        r"editing files · <span class=\"since\" data-elapsed=\"4\d\">4\d s</span>", row
    )


def test_between_steps_a_working_chat_says_thinking(signed_in, chat):
    message_send(conversation=chat, text="go")

    row = row_html(signed_in.get("/").content.decode(), chat.public_id)

    assert "working" in row and "thinking" in row


@pytest.mark.parametrize(
    ("status", "label"),
    [(Status.NEEDS_YOU, "needs you"), (Status.IDLE, "idle"), (Status.STOPPED, "stopped")],
)
def test_a_chat_that_is_not_working_shows_its_state(signed_in, chat, status, label):
    type(chat).objects.filter(pk=chat.pk).update(status=status)

    row = row_html(signed_in.get("/").content.decode(), chat.public_id)

    assert f'<span class="badge is-{status}">{label}</span>' in row
    assert 'class="doing"' not in row


def test_a_folder_in_the_home_directory_reads_with_a_tilde(signed_in, owner, agent):
    folder = Path.home() / "src" / "app"
    chat = ChatFactory(owner=owner, title="App", folder=str(folder))

    row = row_html(signed_in.get("/").content.decode(), chat.public_id)

    assert '<span class="folder" title="' + str(folder) + '">~/src/app</span>' in row
    assert tildify(str(Path.home())) == "~"
    assert tildify("/srv/site") == "/srv/site"


def test_a_deep_folder_shows_its_last_parts_in_the_list_and_whole_in_its_title(
    signed_in, owner, agent
):
    folder = Path.home() / "work" / "clients" / "projects" / "conch"
    chat = ChatFactory(owner=owner, title="Deep", folder=str(folder))

    row = row_html(signed_in.get("/").content.decode(), chat.public_id)

    # Cut at the start, not the end: the last parts are the ones that tell chats apart.
    assert '<span class="folder" title="' + str(folder) + '">…/projects/conch</span>' in row
    assert folder_tail("/srv/site") == "/srv/site"
    assert folder_tail("/srv/a/b/c") == "…/b/c"
    assert folder_tail("") == ""


def test_a_row_says_where_the_chat_came_from(signed_in, owner, agent):
    mine = ChatFactory(owner=owner, title="Mine")
    telegram = ChatFactory(
        owner=owner, title="From Ann", origin=Origin.CHAT_APP, origin_channel="telegram"
    )
    routine = ChatFactory(owner=owner, title="Nightly", origin=Origin.ROUTINE)

    html = signed_in.get("/").content.decode()

    assert "from you" in row_html(html, mine.public_id)
    assert "from Telegram" in row_html(html, telegram.public_id)
    assert "from a routine" in row_html(html, routine.public_id)


def test_archived_chats_are_hidden_unless_working(signed_in, owner, agent):
    resting = ChatFactory(owner=owner, title="Resting")
    busy = ChatFactory(owner=owner, title="Busy")
    conversation_archive(conversation=resting)
    conversation_archive(conversation=busy)
    message_send(conversation=busy, text="go")

    html = signed_in.get("/").content.decode()

    assert f"row-{resting.public_id}" not in html
    assert "archived" in row_html(html, busy.public_id)


def test_the_list_shows_only_the_signed_in_owners_chats(signed_in, chat, second_owner, agent):
    theirs = ChatFactory(owner=second_owner, title="Not yours")

    html = signed_in.get("/").content.decode()

    assert f"row-{chat.public_id}" in html
    assert f"row-{theirs.public_id}" not in html and "Not yours" not in html


def test_durations_read_short():
    assert [duration(s) for s in (0, 40, 60, 119, 3600, 3900)] == [
        "0 s",
        "40 s",
        "1 min",
        "1 min",
        "1 h",
        "1 h 5 min",
    ]


# ---------------------------------------------------------------------------
# The chat page


def test_each_replys_steps_are_grouped_under_it_with_files_relative_to_the_folder(
    signed_in, owner, agent, workspace
):
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("x = 1\n")
    chat = ChatFactory(
        owner=owner,
        title="Fix",
        folder=str(workspace),
        script=[
            [
                {"tool": "read_file", "args": {"path": "src/app.py"}},
                {"tool": "edit_file", "args": {"path": "src/app.py", "old": "1", "new": "2"}},
                {"say": "Changed x to 2."},
            ],
            [{"say": "Nothing else to do."}],
        ],
    )
    message_send(conversation=chat, text="Set x to 2")
    drain()
    message_send(conversation=chat, text="Anything else?")
    drain()

    transcript = region(signed_in.get(f"/c/{chat.public_id}/").content.decode(), "transcript")
    first, second = re.findall(
        r'<li class="reply .*?</li>\s*(?=<li class="reply|</ol>)', transcript, re.S
    )

    assert "Set x to 2" in first
    assert first.index("reading files") < first.index("editing files") < first.index("Changed x")
    # The file, relative to the chat's folder: its ± chip opens its diff.
    assert re.search(
        r'<li><a class="file-chip" href="#step-\d+-file-1" data-opens-change>src/app.py</a></li>',
        first,
    )
    assert str(workspace) not in first
    assert "changed 1 file" in first
    assert "Anything else?" in second and "Nothing else to do." in second
    assert "editing files" not in second


def test_files_outside_the_folder_show_in_full(workspace):
    assert relpath(str(workspace / "a" / "b.txt"), str(workspace)) == "a/b.txt"
    assert relpath("/etc/hosts", str(workspace)) == "/etc/hosts"


def test_a_working_chat_offers_stop(signed_in, chat):
    message_send(conversation=chat, text="go")

    controls = region(signed_in.get(f"/c/{chat.public_id}/").content.decode(), "chat-controls")

    assert f'action="/c/{chat.public_id}/stop/"' in controls
    assert ">Stop</button>" in controls


def test_an_idle_chat_offers_no_stop(signed_in, chat):
    controls = region(signed_in.get(f"/c/{chat.public_id}/").content.decode(), "chat-controls")

    assert "/stop/" not in controls


def test_a_reply_that_needs_an_ok_shows_the_request_with_approve_and_deny(
    signed_in, owner, agent, workspace
):
    chat = ChatFactory(
        owner=owner,
        title="Careful",
        folder=str(workspace),
        mode=Mode.ASK,
        script=[[{"tool": "write_file", "args": {"path": "notes.txt", "content": "hi"}}]],
    )
    message_send(conversation=chat, text="Write notes")
    drain()
    turn = chat.turns.get()
    assert turn.state == TurnState.NEEDS_YOU

    controls = region(signed_in.get(f"/c/{chat.public_id}/").content.decode(), "chat-controls")

    assert "It needs your OK" in controls
    assert "<code>write_file</code> (editing files)" in controls
    assert '<span class="subject">notes.txt</span>' in controls
    assert f'action="/c/{chat.public_id}/approve/"' in controls
    assert f'action="/c/{chat.public_id}/deny/"' in controls
    assert f'name="turn" value="{turn.number}"' in controls


def test_a_question_asks_for_an_answer_in_the_composer(signed_in, owner, agent):
    chat = ChatFactory(owner=owner, title="Q", script=[[{"ask": "Which branch?"}]])
    message_send(conversation=chat, text="Deploy")
    drain()

    html = signed_in.get(f"/c/{chat.public_id}/").content.decode()

    assert "Which branch?" in region(html, "transcript")
    assert "Answer below" in region(html, "chat-controls")


def test_the_page_offers_mode_rename_archive_and_delete(signed_in, chat):
    html = signed_in.get(f"/c/{chat.public_id}/").content.decode()

    pressed = re.findall(r'name="mode" value="(\w+)" aria-pressed="true"', html)
    assert pressed == [chat.mode]
    for action in ("mode", "rename", "archive", "delete"):
        assert f'action="/c/{chat.public_id}/{action}/"' in html
    assert "can’t be undone" in html  # delete asks first


def test_someone_elses_chat_does_not_exist(signed_in, second_owner, agent):
    theirs = ChatFactory(owner=second_owner, title="Theirs")

    assert signed_in.get(f"/c/{theirs.public_id}/").status_code == 404
    assert (
        signed_in.get(f"/c/{theirs.public_id}/regions/", headers={"HX-Request": "true"}).status_code
        == 404
    )
    for action in ("send", "stop", "approve", "deny", "mode", "rename", "archive", "delete"):
        assert signed_in.post(f"/c/{theirs.public_id}/{action}/", {"text": "hi"}).status_code == 404
    theirs.refresh_from_db()
    assert not theirs.turns.exists() and theirs.title == "Theirs"


# ---------------------------------------------------------------------------
# Readable without JavaScript, and nothing from elsewhere


def test_every_link_has_an_href(signed_in, chat):
    message_send(conversation=chat, text="go")
    for url in ("/", f"/c/{chat.public_id}/"):
        anchors = [attrs for tag, attrs in tags(signed_in.get(url).content.decode()) if tag == "a"]
        assert anchors
        assert all(attrs.get("href") for attrs in anchors), url


def test_every_form_posts_to_a_real_url(signed_in, chat):
    for url in ("/", f"/c/{chat.public_id}/"):
        forms = [attrs for tag, attrs in tags(signed_in.get(url).content.decode()) if tag == "form"]
        assert forms
        # Every action is a POST; the one search box is a GET, which reads and changes nothing.
        assert all(
            a.get("method") == ("get" if a.get("role") == "search" else "post")
            and a.get("action", "").startswith("/")
            for a in forms
        )


def test_scripts_and_styles_come_from_static_only(signed_in, chat):
    html = signed_in.get(f"/c/{chat.public_id}/").content.decode()
    sources = [
        attrs.get("src") or attrs.get("href")
        for tag, attrs in tags(html)
        if tag == "script" or (tag == "link" and attrs.get("rel") == "stylesheet")
    ]

    assert sources == [
        "/static/conch-theme.js",
        "/static/conch.css",
        "/static/words.css",
        "/static/code.css",
        "/static/diff.css",
        "/static/vendor/htmx-2.0.11.min.js",
        "/static/vendor/htmx-ext-ws-2.0.4.min.js",
        "/static/conch.js",
        "/static/tab-title.js",
        "/static/conch-keys.js",
        "/static/conch-steps.js",
        "/static/conch-code.js",
        "/static/conch-approve.js",
        "/static/conch-drawer.js",
        "/static/conch-trust.js",
    ]
    assert "//" not in " ".join(s for s in sources if s)
    root = Path(__file__).resolve().parents[2]
    for source in sources:
        assert (root / source.lstrip("/")).is_file()


def test_htmx_may_not_run_scripts_or_eval(signed_in, chat):
    page = signed_in.get(f"/c/{chat.public_id}/")
    html = page.content.decode()
    config = re.search(r"<meta name=\"htmx-config\" content='([^']*)'>", html).group(1)

    assert '"allowScriptTags": false' in config
    assert '"allowEval": false' in config
    assert '"selfRequestsOnly": true' in config
    # and the CSP header forbids inline scripts
    assert "script-src 'self';" in page.headers["Content-Security-Policy"]


def test_the_csrf_token_rides_in_hx_headers_on_body(signed_in, chat):
    html = signed_in.get(f"/c/{chat.public_id}/").content.decode()

    assert re.search(r"<body hx-headers='\{\"X-CSRFToken\": \"\w{64}\"\}'", html)


# ---------------------------------------------------------------------------
# Words from a model stay words

HOSTILE = (
    '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
    '<b hx-get="/evil/" hx-trigger="load">a</b><i hx-on:click="window.pwned=3">b</i>'
    '<div id="chat-list" hx-swap-oob="true">c</div>'
)


def test_model_text_is_escaped_in_every_region(signed_in, htmx, owner, agent, workspace):
    chat = ChatFactory(
        owner=owner,
        title=HOSTILE[:120],
        folder=str(workspace),
        mode=Mode.ASK,
        script=[
            [
                {"say": HOSTILE},
                {"tool": "read_file", "args": {"path": HOSTILE}},
                {"tool": "write_file", "args": {"path": "x<img src=x>.txt", "content": "hi"}},
            ]
        ],
    )
    message_send(conversation=chat, text=HOSTILE)
    drain()
    assert chat.turns.get().state == TurnState.NEEDS_YOU  # the write waits in Ask mode

    page = signed_in.get(f"/c/{chat.public_id}/").content.decode()
    bundle = htmx.get(f"/c/{chat.public_id}/regions/").content.decode()

    for html in (page, bundle):
        assert "<script>window" not in html
        assert "<img src=x" not in html
        # As text, a quote needs no escaping (the Markdown of a reply leaves it be): what
        # counts is that no element carries the attribute.
        attributes = [(name, value) for _, attrs in tags(html) for name, value in attrs.items()]
        assert ("hx-get", "/evil/") not in attributes
        assert not [name for name, _ in attributes if name.startswith("hx-on")]
        assert attributes.count(("id", "chat-list")) == 1  # only the real one
        assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in html
        assert "x&lt;img src=x&gt;.txt" in html  # the pending request names the file, as text


def test_regions_that_hold_model_text_carry_hx_disable(signed_in, chat):
    html = signed_in.get(f"/c/{chat.public_id}/").content.decode()

    for element_id in ("chat-list", "chat-title"):
        opening = re.search(rf"<\w+ id=\"{element_id}\"[^>]*>", html).group(0)
        assert "hx-disable" in opening, element_id
    # The transcript holds cards with links and buttons, so each of its elements that
    # holds words carries hx-disable instead: tests/web/test_together_cards.py proves it.
