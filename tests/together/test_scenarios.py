"""The committed scenario for ADR 0134's notes, played for real with conch_play."""

from __future__ import annotations

import pytest

from tests.together.plays import reports_played


@pytest.fixture(scope="module")
def played(play_template):
    report = reports_played(("together_same_folder",), play_template)["together_same_folder"]
    return {chat["name"]: chat for chat in report["chats"]}


def notes(chat):
    return [n["text"] for n in chat["notes"]]


def test_two_chats_editing_one_file_hear_exactly_the_adrs_notes_once_each(played):
    fix, docs = notes(played["fix"]), notes(played["docs"])
    assert fix == [
        "[Conch: this reply and “Document login” (chat c_docs) have both changed src/auth.py: "
        "read it again before changing it further.]",
        "[Conch: another of the person's chats is changing files in this folder right now: "
        "“Document login” (chat c_docs), changing src/auth.py. Keep to your own files, and never undo its work. "
        "Use list_chats to see what your other chats are doing.]",
    ]
    assert docs == [
        "[Conch: another of the person's chats is changing files in this folder right now: "
        "“Fix login” (chat c_fix), changing src/auth.py, src/session.py. Keep to your own files, and never undo "
        "its work. Use list_chats to see what your other chats are doing.]",
        "[Conch: this reply and “Fix login” (chat c_fix) have both changed src/auth.py: "
        "read it again before changing it further.]",
    ]
    for chat in played.values():
        for reply in {n["reply"] for n in chat["notes"]}:
            assert sum(1 for n in chat["notes"] if n["reply"] == reply) <= 4


def test_the_chat_in_another_folder_is_never_mentioned_and_hears_nothing(played):
    assert notes(played["site"]) == []
    for name in ("fix", "docs", "family"):
        assert not any("landing page" in n or "c_site" in n for n in notes(played[name]))


def test_the_chat_with_someone_elses_words_is_told_nothing_and_not_offered_list_chats(played):
    family = played["family"]
    assert notes(family) == []
    step = family["replies"][0]["steps"][0]
    assert step["tool"] == "list_chats"
    assert step["error"] == "The tool 'list_chats' isn't offered to this chat."
    assert not any(
        "Family group" in n or "c_family" in n
        for name in ("fix", "docs")
        for n in notes(played[name])
    )


def test_list_chats_in_the_scenario_shows_the_others_but_not_the_group_chat(played):
    step = next(s for s in played["docs"]["replies"][0]["steps"] if s["tool"] == "list_chats")
    assert "c_fix “Fix login”: working" in step["result"]
    assert "c_site “Write the landing page”: working" in step["result"]
    assert "Family group" not in step["result"]
    assert played["docs"]["cards"][0]["text"] == "Checked on your other chats · 2 working"
