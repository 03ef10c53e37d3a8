"""In Ask mode the person sees what will happen before the OK, and
after a step runs it opens to show what it said and the diff of each file it changed."""

from __future__ import annotations

import html
import re

import pytest

from chats.limits import LIMITS
from chats.models import Mode, Step
from chats.runtime.runner import drain
from chats.runtime.turns import message_send
from chats.tools.diffs import NOTE_CUT, NOTE_TOO_LARGE, unified
from tests.factories import ChatFactory

pytestmark = pytest.mark.django_db

# A key in the shape chats.quoting's scrubber knows (an OpenAI-style project key).
KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0L1m2"


def asking(owner, workspace, *actions, mode=Mode.ASK):
    chat = ChatFactory(
        owner=owner, title="Careful", folder=str(workspace), mode=mode, reply=list(actions)
    )
    message_send(conversation=chat, text="Go")
    drain()
    return chat


def page(client, chat) -> str:
    return client.get(f"/c/{chat.public_id}/").content.decode()


def request_box(html: str) -> str:
    start = html.index('<div class="request"')
    return html[start : html.index('<div class="actions">', start)]


ROW = re.compile(
    r'<div class="dl is-(\w+)"><span class="ln">(\d*)</span><span class="ln">(\d*)</span>'
    r'<span class="src">(.*?)</span></div>\n'
)
NEW_ROW = re.compile(
    r'<div class="dl"><span class="ln">(\d+)</span><span class="src">(.*?)</span></div>\n'
)


def words(markup: str) -> str:
    """A line's words as the person reads them: its colours' tags taken off, its escapes undone."""
    return html.unescape(re.sub(r"<[^>]*>", "", markup))


def unified_rows(box: str) -> list[tuple[str, str, str, str]]:
    """The unified layout's rows: (kind, number before, number after, words with their sign)."""
    unified = box[box.index('<div class="diff-unified">') : box.index('<div class="diff-split">')]
    return [(kind, old, new, words(src)) for kind, old, new, src in ROW.findall(unified)]


def test_a_new_file_shows_its_words_before_the_ok(signed_in, owner, workspace):
    chat = asking(
        owner,
        workspace,
        {"tool": "write_file", "args": {"path": "notes.md", "content": "# Notes\n<b>bold</b>\n"}},
    )

    box = request_box(page(signed_in, chat))

    assert "New file</span> <code>notes.md</code>" in box
    assert [(n, words(src)) for n, src in NEW_ROW.findall(box)] == [
        ("1", "# Notes"),
        ("2", "<b>bold</b>"),
    ]
    assert "&lt;b&gt;bold&lt;/b&gt;" in box  # text, never a tag
    assert not (workspace / "notes.md").exists()


def test_replacing_a_file_shows_the_diff_against_what_it_holds(signed_in, owner, workspace):
    (workspace / "notes.md").write_text("one\ntwo\nthree\n")
    chat = asking(
        owner,
        workspace,
        {"tool": "write_file", "args": {"path": "notes.md", "content": "one\n2\nthree\n"}},
    )

    box = request_box(page(signed_in, chat))

    assert "Changes to</span> <code>notes.md</code>" in box
    assert unified_rows(box) == [
        ("hunk", "", "", "@@ -1,3 +1,3 @@"),
        ("same", "1", "1", " one"),
        ("del", "2", "", "-two"),
        ("add", "", "2", "+2"),
        ("same", "3", "3", " three"),
    ]
    assert (workspace / "notes.md").read_text() == "one\ntwo\nthree\n"


def test_an_edit_shows_its_old_and_new_in_the_files_context(signed_in, owner, workspace):
    lines = [f"line {n}" for n in range(1, 21)]
    (workspace / "app.py").write_text("\n".join(lines) + "\n")
    chat = asking(
        owner,
        workspace,
        {"tool": "edit_file", "args": {"path": "app.py", "old": "line 10", "new": "line ten"}},
    )

    pending = chat.turns.get().pending_action
    expected = unified(
        "app.py", "\n".join(lines) + "\n", "\n".join(lines).replace("line 10", "line ten") + "\n"
    )
    assert pending["preview"]["text"] == expected
    box = request_box(page(signed_in, chat))
    # Three lines of context either side, as difflib gives them.
    rows = unified_rows(box)
    assert rows[:2] == [("hunk", "", "", "@@ -7,7 +7,7 @@"), ("same", "7", "7", " line 7")]
    assert ("del", "10", "", "-line 10") in rows
    assert ("add", "", "10", "+line ten") in rows
    assert rows[-1] == ("same", "13", "13", " line 13")
    assert all(" line 6" != row[3] for row in rows)


def test_an_edit_that_would_fail_says_so_before_the_ok(signed_in, owner, workspace):
    (workspace / "app.py").write_text("print(1)\n")
    chat = asking(
        owner,
        workspace,
        {"tool": "edit_file", "args": {"path": "app.py", "old": "nowhere", "new": "x"}},
    )

    box = request_box(page(signed_in, chat))

    assert (
        "If you approve, it will fail: The text to replace was not found in &#x27;app.py&#x27;."
        in box
    )


def test_a_command_shows_its_line_and_its_folder(signed_in, owner, workspace):
    chat = asking(owner, workspace, {"tool": "run_command", "args": {"command": "ls -la && rm x"}})

    box = request_box(page(signed_in, chat))

    assert '<pre class="command" tabindex="0">ls -la &amp;&amp; rm x</pre>' in box
    assert f'title="{workspace.resolve()}"' in box


def test_what_is_shown_before_the_ok_has_no_secrets(signed_in, owner, workspace):
    (workspace / ".env").write_text("A=1\n")
    chat = asking(
        owner,
        workspace,
        {"tool": "write_file", "args": {"path": ".env", "content": f"A=1\nKEY={KEY}\n"}},
        {"tool": "run_command", "args": {"command": f"curl -H 'Authorization: Bearer {KEY}'"}},
    )

    pending = chat.turns.get().pending_action
    assert KEY not in str(pending["preview"]) and KEY not in page(signed_in, chat)
    assert "+KEY=[redacted]" in pending["preview"]["text"]
    signed_in.post(f"/c/{chat.public_id}/approve/", {"turn": "1"})
    drain()

    pending = chat.turns.get().pending_action
    assert pending["preview"]["kind"] == "command"
    assert KEY not in str(pending["preview"]) and KEY not in page(signed_in, chat)


def test_a_large_file_is_not_diffed_and_a_long_diff_is_cut(signed_in, owner, workspace):
    (workspace / "big.txt").write_text("x" * (LIMITS.diff_file_bytes + 1))
    long_words = "".join(f"word {n}\n" for n in range(LIMITS.diff_shown_chars // 4))
    chat = asking(
        owner,
        workspace,
        {"tool": "write_file", "args": {"path": "big.txt", "content": "small\n"}},
        {"tool": "write_file", "args": {"path": "long.txt", "content": long_words}},
    )

    first = chat.turns.get().pending_action["preview"]
    assert first["text"] == "" and first["note"] == NOTE_TOO_LARGE.format(
        limit=LIMITS.diff_file_bytes
    )
    signed_in.post(f"/c/{chat.public_id}/approve/", {"turn": "1"})
    drain()
    second = chat.turns.get().pending_action["preview"]
    assert len(second["text"]) == LIMITS.diff_shown_chars
    assert second["note"] == NOTE_CUT.format(limit=LIMITS.diff_shown_chars)
    assert "characters." in request_box(page(signed_in, chat))


def test_a_step_that_ran_keeps_its_output_and_each_files_diff(signed_in, owner, workspace):
    (workspace / "a.txt").write_text("old words\n")
    chat = asking(
        owner,
        workspace,
        {"tool": "edit_file", "args": {"path": "a.txt", "old": "old", "new": f"new {KEY}"}},
        {"tool": "write_file", "args": {"path": "b.txt", "content": "<i>made</i>\n"}},
        mode=Mode.AUTO,
    )

    edit, write = Step.objects.filter(turn__conversation=chat).order_by("number")
    assert edit.changes == [
        {
            "path": "a.txt",
            "created": False,
            "text": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-old words\n+new [redacted] words\n",
            "note": "",
            "file": str((workspace / "a.txt").resolve()),
        }
    ]
    assert write.changes[0]["created"] and write.changes[0]["text"] == "<i>made</i>\n"
    html = page(signed_in, chat)
    assert KEY not in html
    step = html[html.index(f'id="step-{write.pk}"') :]
    assert f'<details class="step-more" id="step-{write.pk}-more">' in step
    assert '<pre class="step-output" tabindex="0" aria-label="What it said">Created b.txt' in step
    assert f'<section class="file-change is-new" id="step-{write.pk}-file-1"' in step
    assert "&lt;i&gt;made&lt;/i&gt;" in step
    # The ± chip opens that very diff.
    chip = re.search(r'<a class="file-chip" href="#([^"]+)" data-opens-change>b.txt</a>', step)
    assert chip and chip.group(1) == f"step-{write.pk}-file-1"


def test_a_step_with_nothing_to_show_does_not_open(signed_in, owner, workspace):
    chat = asking(owner, workspace, {"tool": "list_files", "args": {}}, mode=Mode.AUTO)
    step = Step.objects.get(turn__conversation=chat)
    Step.objects.filter(pk=step.pk).update(result="")

    html = page(signed_in, chat)

    assert f'id="step-{step.pk}-more"' not in html
    assert '<div class="step-head"><span class="family">reading files</span>' in html
