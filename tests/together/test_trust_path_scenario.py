"""scenarios/trust_path_three_chats.json played for real: the report holds each chat's trust
timeline, and c's holds the whole path (c waited on b, which took in a's message, which
read the page), in Conch's words, the person's own chats' titles and the address a used.

The player's "set up careful" cause is read off taint_before_the_first_action.json, whose
chat "browsed" starts careful.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.together.plays import chats_of, report_printed
from together.play.render import report_text

PAGE = "{pages}/release-2.4.html"
A_READ = {
    "chat": "c_a",
    "title": "Read the release page",
    "taint": "untrusted",
    "cause": "page",
    "why": "read a web page",
    "url": PAGE,
    "path": "",
    "reply": 1,
    "step": 1,
}


@pytest.fixture(scope="module")
def outputs(play_template) -> dict[tuple[str, int], str]:
    """What --json prints: the path's scenario twice, and the one with a chat set up careful."""
    plays = [("trust_path_three_chats", 1), ("trust_path_three_chats", 2)]
    plays.append(("taint_before_the_first_action", 1))
    with ThreadPoolExecutor(max_workers=len(plays)) as pool:
        running = {play: pool.submit(report_printed, play[0], play_template) for play in plays}
    return {play: future.result() for play, future in running.items()}


@pytest.fixture(scope="module")
def reports(outputs) -> dict[str, dict]:
    return {name: json.loads(printed) for (name, n), printed in outputs.items() if n == 1}


@pytest.fixture(scope="module")
def played(reports) -> dict[str, dict]:
    return chats_of(reports["trust_path_three_chats"])


def test_as_timeline_is_the_page_it_read(played):
    assert played["a"]["trust"] == [
        {
            "before": "none",
            "after": "untrusted",
            "cause": "page",
            "why": "read a web page",
            "url": PAGE,
            "path": "",
            "reply": 1,
            "step": 1,
            "from": [],
        }
    ]


def test_bs_timeline_is_as_message_taken_in_and_why_a_was_careful(played):
    assert played["b"]["trust"] == [
        {
            "before": "none",
            "after": "untrusted",
            "cause": "message",
            "why": "a message from another chat",
            "url": "",
            "path": "",
            "reply": 1,  # the reply a's message started, which took it in
            "step": None,
            "from": [A_READ],
        }
    ]


def test_cs_timeline_holds_the_whole_path_back_to_the_page(played):
    assert played["c"]["waits"][0]["state"] == "woken"
    assert played["c"]["trust"] == [
        {
            "before": "none",
            "after": "untrusted",
            "cause": "wait",
            "why": "the answer of a wait",
            "url": "",
            "path": "",
            "reply": None,
            "step": None,
            "from": [
                {
                    "chat": "c_b",
                    "title": "Write the changelog",
                    "taint": "untrusted",
                    "cause": "message",
                    "why": "a message from another chat",
                    "url": "",
                    "path": "",
                    "reply": 1,
                    "step": None,
                },
                A_READ,
            ],
        }
    ]


def test_the_text_report_prints_cs_path_in_conchs_words(reports):
    text = report_text(reports["trust_path_three_chats"])
    c = text[text.index("=== c (c_c)") :]
    timeline = c[c.index("Trust timeline") : c.index("Events")].splitlines()
    assert timeline == [
        "Trust timeline",
        "  none → untrusted: the answer of a wait",
        "    ← from “Write the changelog” (c_b), untrusted then: a message from another chat"
        " (reply 1)",
        "    ← from “Read the release page” (c_a), untrusted then: read a web page"
        f" {PAGE} (reply 1, step 1)",
    ]


def test_cs_model_is_given_bs_last_words_and_nothing_of_the_path(played):
    given = json.dumps([reply["inputs"] for reply in played["c"]["replies"]], ensure_ascii=False)
    assert "Changelog for 2.4: faster sync, offline settings." in given
    for never in ("Read the release page", "c_a", PAGE, "release-2.4", "a message from another"):
        assert never not in given, never


def test_a_chat_set_up_careful_says_so_and_the_path_from_it_does_too(reports):
    chats = chats_of(reports["taint_before_the_first_action"])
    setup = {
        "cause": "setup",
        "why": "started careful, as set up",
        "url": "",
        "path": "",
        "reply": None,
        "step": None,
    }
    assert chats["browsed"]["trust"] == [
        {"before": "none", "after": "untrusted", **setup, "from": []}
    ]
    (rise,) = chats["hop1"]["trust"]
    assert (rise["cause"], rise["from"]) == (
        "message",
        [{"chat": "c_browsed", "title": "Read a page", "taint": "untrusted", **setup}],
    )


def test_the_play_prints_the_same_every_run_timelines_and_all(outputs):
    first, second = outputs["trust_path_three_chats", 1], outputs["trust_path_three_chats", 2]
    assert '"trust": [' in first and "127.0.0.1:" not in first
    assert first == second


# ---------------------------------------------------------------------------
# As far as the person may see


@pytest.fixture
def path_of_two(owner, agent):
    from chats.taint import Cause, taint_raise
    from tests.factories import ChatFactory

    a = ChatFactory(owner=owner, title="Read the release page")
    taint_raise(conversation=a, taint="untrusted", cause=Cause.page("https://x.test/secret-path"))
    b = ChatFactory(owner=owner, title="Write the changelog")
    taint_raise(conversation=b, taint="untrusted", cause=Cause.message(a, message_id="m_1"))
    return a, b


def _hops(chat, tmp_path):
    from together.play.report import RunPaths, trust_timeline

    (rise,) = trust_timeline(chat, RunPaths(tmp_path))
    return rise["from"]


def test_a_chat_deleted_since_is_a_chat_that_is_gone_and_the_path_stops_there(
    path_of_two, tmp_path
):
    a, b = path_of_two
    a.delete()
    assert _hops(b, tmp_path) == [
        {"chat": None, "title": "a chat that is gone", "taint": "untrusted"}
    ]


def test_a_chat_with_someone_elses_words_since_is_a_chat_that_is_gone(path_of_two, tmp_path):
    from chats.taint import Cause, taint_raise

    a, b = path_of_two
    taint_raise(conversation=a, taint="person", cause=Cause.stranger(channel="t", sender="m"))
    hops = _hops(b, tmp_path)
    assert hops == [{"chat": None, "title": "a chat that is gone", "taint": "untrusted"}]
    assert "secret-path" not in json.dumps(hops) and a.public_id not in json.dumps(hops)
