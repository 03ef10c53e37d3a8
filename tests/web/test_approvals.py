"""Approvals on the page: a request's three answers with their keys, the chat's
standing OKs listed with Take back, and the rules a standing OK keeps: one chat's alone,
gone with a change of mode, never offered where someone else's words are."""

from __future__ import annotations

from pathlib import Path

import pytest

from chats.diffview import diff_code_css, diff_view
from chats.limits import LIMITS
from chats.models import Entry, EntryKind, Mode, Origin, StandingOk, Taint, TurnState
from chats.runtime.runner import drain
from chats.runtime.standing import ERR_NOT_OFFERED, WHY_SOMEONE_ELSES
from chats.runtime.turns import ERR_REASON_TOO_LONG, message_send
from chats.tools.diffs import change_record
from tests.factories import ChatFactory

pytestmark = pytest.mark.django_db


def write(path: str) -> dict:
    return {"tool": "write_file", "args": {"path": path, "content": path}}


def asking_chat(owner, folder, *actions, **fields):
    fields.setdefault("mode", Mode.ASK)
    chat = ChatFactory(owner=owner, folder=str(folder), reply=list(actions), **fields)
    message_send(conversation=chat, text="Go")
    drain()
    return chat


def controls(client, chat) -> str:
    html = client.get(f"/c/{chat.public_id}/").content.decode()
    start = html.index('<div id="chat-controls"')
    return html[start : html.index('<form id="composer"', start)]


def settings_region(client, chat) -> str:
    html = client.get(f"/c/{chat.public_id}/").content.decode()
    start = html.index('<div id="chat-settings"')
    return html[start : html.index('<details class="menu" id="rename-menu">', start)]


@pytest.fixture
def stranger_chat(owner, agent, tmp_path):
    """A chat with someone else's words, whose persona gives them write_file after the owner's OK."""
    own = tmp_path / "bot"
    own.mkdir()
    agent.workspace = str(own)
    agent.stranger_tools = ["write_file"]
    agent.stranger_tools_ask_first = ["write_file"]
    agent.save()
    return asking_chat(
        owner, own, write("a.txt"), mode=Mode.AUTO, origin=Origin.CHAT_APP, taint=Taint.PERSON
    )


def test_the_request_offers_three_answers_each_with_its_key(signed_in, owner, agent, workspace):
    chat = asking_chat(owner, workspace, write("a.txt"))

    box = controls(signed_in, chat)

    assert 'id="approve-button" data-key="a" aria-keyshortcuts="A">Approve <kbd' in box
    assert 'id="always-button" data-key="s" aria-keyshortcuts="S"><span>Approve, and don' in box
    assert '<span class="always-what" hx-disable>write_file</span> in this chat' in box
    assert 'name="always" value="1"' in box
    assert 'id="deny-button" data-key="d" aria-keyshortcuts="D">Deny <kbd' in box
    assert f'<input id="deny-reason" name="reason" maxlength="{LIMITS.deny_reason_chars}"' in box


def test_dont_ask_again_for_a_command_names_how_it_starts(signed_in, owner, agent, workspace):
    chat = asking_chat(owner, workspace, {"tool": "run_command", "args": {"command": "git log -3"}})

    box = controls(signed_in, chat)

    assert (
        'don\'t ask again for <span class="always-what" hx-disable>commands that start “git log”</span>'
        in box
    )


def test_dont_ask_again_is_not_offered_for_a_command_with_more_than_one_program(
    signed_in, htmx, owner, agent, workspace
):
    chat = asking_chat(
        owner, workspace, {"tool": "run_command", "args": {"command": "git log && rm -rf x"}}
    )

    box = controls(signed_in, chat)
    refused = htmx.post(f"/c/{chat.public_id}/approve/", {"turn": "1", "always": "1"})

    assert 'id="always-button"' not in box
    assert "isn't offered here: the command has more than one program in it" in box
    assert refused.status_code == 400
    assert not StandingOk.objects.exists()


def test_dont_ask_again_is_never_offered_in_a_chat_with_someone_elses_words(
    signed_in, htmx, stranger_chat
):
    chat = stranger_chat
    assert chat.turns.get().state == TurnState.NEEDS_YOU

    box = controls(signed_in, chat)
    refused = htmx.post(f"/c/{chat.public_id}/approve/", {"turn": "1", "always": "1"})

    assert 'id="always-button"' not in box
    assert 'id="approve-button"' in box and 'id="deny-button"' in box
    assert "someone else&#x27;s words are in this chat" in box
    assert refused.status_code == 400
    assert ERR_NOT_OFFERED.format(why=WHY_SOMEONE_ELSES).replace("'", "&#x27;") in (
        refused.content.decode()
    )
    assert not StandingOk.objects.exists()
    assert chat.turns.get().state == TurnState.NEEDS_YOU


def test_approve_and_dont_ask_again_lists_the_standing_ok_on_the_chat(
    signed_in, htmx, owner, agent, workspace
):
    chat = asking_chat(owner, workspace, write("a.txt"))

    htmx.post(f"/c/{chat.public_id}/approve/", {"turn": "1", "always": "1"})

    listed = settings_region(signed_in, chat)
    assert "Allowed without asking" in listed
    assert '<span class="allowed-what" hx-disable>write_file</span>' in listed
    ok = StandingOk.objects.get(conversation=chat)
    assert f'action="/c/{chat.public_id}/allowed/{ok.pk}/take-back/"' in listed


def test_take_back_ends_a_standing_ok(htmx, signed_in, owner, agent, workspace):
    chat = asking_chat(owner, workspace, write("a.txt"))
    ok = StandingOk.objects.create(conversation=chat, tool="write_file")

    response = htmx.post(f"/c/{chat.public_id}/allowed/{ok.pk}/take-back/")

    assert response.status_code == 200
    assert not StandingOk.objects.exists()
    assert "Allowed without asking" not in settings_region(signed_in, chat)


def test_take_back_through_another_chat_leaves_its_standing_ok_be(htmx, owner, agent, workspace):
    mine = ChatFactory(owner=owner, folder=str(workspace))
    other = ChatFactory(owner=owner, folder=str(workspace))
    ok = StandingOk.objects.create(conversation=other, tool="write_file")

    htmx.post(f"/c/{mine.public_id}/allowed/{ok.pk}/take-back/")

    assert StandingOk.objects.filter(pk=ok.pk).exists()


def test_a_change_of_mode_takes_back_every_standing_ok(htmx, owner, agent, workspace):
    chat = ChatFactory(owner=owner, folder=str(workspace), mode=Mode.ASK)
    other = ChatFactory(owner=owner, folder=str(workspace), mode=Mode.ASK)
    StandingOk.objects.create(conversation=chat, tool="write_file")
    StandingOk.objects.create(conversation=other, tool="write_file")

    htmx.post(f"/c/{chat.public_id}/mode/", {"mode": Mode.ASK})  # no change: they stay
    assert StandingOk.objects.filter(conversation=chat).exists()
    htmx.post(f"/c/{chat.public_id}/mode/", {"mode": Mode.AUTO})

    assert not StandingOk.objects.filter(conversation=chat).exists()
    assert StandingOk.objects.filter(conversation=other).exists()


def test_the_list_says_when_the_standing_oks_are_not_used(signed_in, owner, agent, workspace):
    chat = ChatFactory(owner=owner, folder=str(workspace), mode=Mode.ASK, taint=Taint.UNTRUSTED)
    StandingOk.objects.create(conversation=chat, tool="write_file")

    listed = settings_region(signed_in, chat)

    assert "Not used now: this chat has read something from outside, so it asks each time." in (
        listed
    )


def test_deny_with_a_reason_keeps_it_in_the_transcript(htmx, owner, agent, workspace):
    chat = asking_chat(owner, workspace, write("a.txt"))

    htmx.post(f"/c/{chat.public_id}/deny/", {"turn": "1", "reason": "  Not that file.  "})

    entry = Entry.objects.get(conversation=chat, kind=EntryKind.CARD)
    assert entry.text == "You denied: Not that file."
    assert chat.turns.get().pending_action["reason"] == "Not that file."


def test_a_deny_reason_past_its_bound_is_refused_and_nothing_is_lost(htmx, owner, agent, workspace):
    chat = asking_chat(owner, workspace, write("a.txt"))

    response = htmx.post(
        f"/c/{chat.public_id}/deny/", {"turn": "1", "reason": "x" * (LIMITS.deny_reason_chars + 1)}
    )

    assert response.status_code == 400
    assert ERR_REASON_TOO_LONG in response.content.decode()
    assert chat.turns.get().state == TurnState.NEEDS_YOU


# ---------------------------------------------------------------------------
# Diffs: numbered, coloured, in two layouts


def test_a_diff_numbers_each_line_and_sets_each_deleted_line_beside_its_replacement():
    before = 'def f():\n    return 1\n\nx = """a\nb"""\n'
    after = 'def f():\n    return 2\n\nx = """a\nc"""\ny = 3\n'
    view = diff_view(change_record(path="app.py", before=before, after=after))

    (hunk,) = view.hunks
    assert hunk.head == "@@ -1,5 +1,6 @@"
    assert [(line.kind, line.old, line.new) for line in hunk.lines] == [
        ("same", 1, 1),
        ("del", 2, None),
        ("add", None, 2),
        ("same", 3, 3),
        ("same", 4, 4),
        ("del", 5, None),
        ("add", None, 5),
        ("add", None, 6),
    ]
    assert [(b and b.old, a and a.new) for b, a in hunk.pairs] == [
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 4),
        (5, 5),
        (None, 6),
    ]
    # Coloured by Pygments' classes, each side lexed whole: the string goes on across lines.
    assert hunk.lines[1].parts == (("", "    "), ("k", "return"), ("", " "), ("mi", "1"))
    assert hunk.lines[6].parts == (("s2", 'c"""'),)


def test_the_diffs_colours_are_the_replies_code_colours():
    css = (Path(__file__).resolve().parents[2] / "static" / "diff.css").read_text()
    assert css.endswith(diff_code_css())
    assert ".diff-view .src .k {" in css


def test_dont_ask_again_is_not_offered_for_a_command_holding_a_key(
    signed_in, owner, agent, workspace
):
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0L1m2"
    chat = asking_chat(
        owner, workspace, {"tool": "run_command", "args": {"command": f"deploy {key}"}}
    )

    box = controls(signed_in, chat)

    assert 'id="always-button"' not in box
    assert key not in box
