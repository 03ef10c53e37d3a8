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
    "cause": "page",
    "reply": 1,
    "step": 1,
    "had": f"had read {PAGE} (fetch_page)",
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
            "reply": 1,
            "step": 1,
            "said": f"read {PAGE} (fetch_page)",
            "from": [],
        }
    ]


def test_bs_timeline_is_as_message_taken_in_and_why_a_was_careful(played):
    assert played["b"]["trust"] == [
        {
            "before": "none",
            "after": "untrusted",
            "cause": "message",
            "reply": 1,  # the reply a's message started, which took it in
            "step": None,
            "said": "took in a message from ‘Read the release page’",
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
            "reply": None,
            "step": None,
            "said": "waited on ‘Write the changelog’ and read how it ended",
            "from": [
                {
                    "chat": "c_b",
                    "title": "Write the changelog",
                    "cause": "message",
                    "reply": 1,
                    "step": None,
                    "had": "had taken in a message from ‘Read the release page’",
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
        "  none → untrusted: waited on ‘Write the changelog’ and read how it ended",
        "    ← “Write the changelog” (c_b) had taken in a message from ‘Read the release page’"
        " (reply 1)",
        f"    ← “Read the release page” (c_a) had read {PAGE} (fetch_page) (reply 1, step 1)",
    ]


def test_cs_model_is_given_bs_last_words_and_nothing_of_the_path(played):
    given = json.dumps([reply["inputs"] for reply in played["c"]["replies"]], ensure_ascii=False)
    assert "Changelog for 2.4: faster sync, offline settings." in given
    for never in ("Read the release page", "c_a", PAGE, "release-2.4", "a message from another"):
        assert never not in given, never


def test_a_chat_set_up_careful_says_so_and_the_path_from_it_does_too(reports):
    chats = chats_of(reports["taint_before_the_first_action"])
    setup = {"cause": "setup", "reply": None, "step": None}
    assert chats["browsed"]["trust"] == [
        {
            "before": "none",
            "after": "untrusted",
            **setup,
            "said": "started careful, as set up",
            "from": [],
        }
    ]
    (rise,) = chats["hop1"]["trust"]
    assert (rise["cause"], rise["said"], rise["from"]) == (
        "message",
        "took in a message from ‘Read a page’",
        [
            {
                "chat": "c_browsed",
                "title": "Read a page",
                **setup,
                "had": "had started careful, as set up",
            }
        ],
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


def _rise(chat, tmp_path):
    from together.play.report import RunPaths, trust_timeline

    (rise,) = trust_timeline(chat, RunPaths(tmp_path))
    return rise


def _gone(rise, a):
    assert rise["said"] == "took in a message from a chat that is gone"
    assert rise["from"] == []
    assert "secret-path" not in json.dumps(rise) and a.public_id not in json.dumps(rise)


def test_a_chat_deleted_since_is_a_chat_that_is_gone_and_the_path_stops_there(
    path_of_two, tmp_path
):
    a, b = path_of_two
    a.delete()
    _gone(_rise(b, tmp_path), a)


def test_a_chat_given_to_another_account_since_is_a_chat_that_is_gone(path_of_two, tmp_path):
    from tests.factories import UserFactory

    a, b = path_of_two
    a.owner = UserFactory()
    a.save(update_fields=["owner"])
    _gone(_rise(b, tmp_path), a)


def test_the_report_follows_the_chat_page_so_a_chat_of_theirs_with_someone_elses_words_is_named(
    path_of_two, tmp_path
):
    """The page's rule (chats.timeline): the person sees every chat of theirs in their own
    list, by the same title, whatever came into it since."""
    from chats.taint import Cause, taint_raise

    a, b = path_of_two
    taint_raise(conversation=a, taint="person", cause=Cause.stranger(channel="t", sender="m"))
    rise = _rise(b, tmp_path)
    assert rise["said"] == "took in a message from ‘Read the release page’"
    assert [hop["title"] for hop in rise["from"]] == ["Read the release page"]
