"""Crash windows, taint before the first action and waits, played: each scenario's report proves what each chat saw.

- ``wait_killed_as_it_lets_go.json`` (no crash window): the runner dies as a waiting reply lets go,
  and the chat waited for finishes before the reply is played again: the waiter hears how
  it ended once, and its model is given the other chat's last reply once;
- ``message_read_as_runner_dies.json`` (no crash window): the runner dies while a reply takes in
  another chat's message (``cut: intake``), as a reply starts and at a busy reply's step:
  after the restart the receiver's model is given the words once, and the sender's card
  never says read while the words are nowhere;
- ``taint_before_the_first_action.json`` (taint before the first action): a page-reading chat's message starts a
  reply that passes it on; both hops' stop_chat ask the person first, the deploy runs on;
- ``wait_cycle_of_three.json`` (no wait cycles): a → b → c, and c's wait for a is refused;
- ``wait_target_taken_by_someone_else.json`` (a wait wakes with what the waiter may know): the waiter never hears the last reply
  of a chat someone else's words came into.

Background tasks on PostgreSQL can't be played: plays always run on a new SQLite database
(docs/scenarios.md). Its scenario is ``wait_for_task.json`` (a task started and waited
for), and its PostgreSQL test is in tests/scaleout/test_together_postgres.py.
"""

from __future__ import annotations

import json

import pytest

from tests.together.plays import chats_of, reports_played

SCENARIOS = (
    "wait_killed_as_it_lets_go",
    "message_read_as_runner_dies",
    "taint_before_the_first_action",
    "wait_cycle_of_three",
    "wait_target_taken_by_someone_else",
)


@pytest.fixture(scope="module")
def reports(play_template) -> dict[str, dict]:
    return reports_played(SCENARIOS, play_template)


def model_inputs(reply: dict) -> str:
    return json.dumps([i["messages"] for i in reply["inputs"]], ensure_ascii=False)


def test_item_8_a_wait_cut_off_as_it_lets_go_answers_once(reports):
    report = reports["wait_killed_as_it_lets_go"]
    assert [(k["chat"], k["tick"]) for k in report["runner"]["kills"]] == [("waiter", 1)]
    waiter = chats_of(report)["waiter"]
    told = json.dumps(
        [waiter["transcript"], [r["steps"] for r in waiter["replies"]]], ensure_ascii=False
    )
    assert told.count("“Slow target” finished its reply") == 1
    # The model's last input in the reply saw the other chat's last reply exactly once.
    last_input = json.dumps(waiter["replies"][0]["inputs"][-1]["messages"], ensure_ascii=False)
    assert last_input.count("Target finished.") == 1
    assert all(w["state"] != "waiting" for w in waiter["waits"])


def test_item_8_a_message_taken_in_as_the_runner_dies_is_read_once_with_its_words(reports):
    report = reports["message_read_as_runner_dies"]
    kills = [(k["chat"], k["cut"], k["tick"]) for k in report["runner"]["kills"]]
    assert kills == [("notes", "intake", 1), ("builder", "intake", 4)]
    restarts = [r["tick"] for r in report["runner"]["restarts"]]
    assert restarts == [2, 5]
    chats = chats_of(report)
    cases = (
        ("coordinator", "notes", "Ship it on Friday: the build is green.", 2),
        ("reporter", "builder", "Use the release branch, not main.", 5),
    )
    for sender, receiver, words, restart in cases:
        (sent,) = chats[sender]["messages"]
        (came,) = chats[receiver]["messages"]
        assert (sent["side"], came["side"]) == ("to", "from")
        for card in (sent, came):
            assert (card["state"], card["read_in_reply"]) == ("read", 1), receiver
            # Read when the restarted runner wrote its words, never at the tick it died.
            assert [h["tick"] for h in card["history"] if h["state"] == "read"] == [restart]
        (reply,) = chats[receiver]["replies"]
        assert reply["state"] == "completed", receiver
        # Exactly what the receiver's model was given: nothing of the message before it was
        # read, its words exactly once in every input after.
        after = [i for i in reply["inputs"] if i["tick"] >= restart]
        assert after, receiver
        for seen in reply["inputs"]:
            count = json.dumps(seen["messages"], ensure_ascii=False).count(words)
            assert count == (1 if seen["tick"] >= restart else 0), (receiver, seen["tick"])
        assert sum(n["text"].count(words) for n in chats[receiver]["notes"]) == 1, receiver


def test_item_1_each_hop_takes_in_the_taint_before_its_stop_chat(reports):
    chats = chats_of(reports["taint_before_the_first_action"])
    for hop in ("hop1", "hop2"):
        chat = chats[hop]
        assert chat["taint"] == "untrusted", hop
        (reply,) = chat["replies"]
        assert reply["started_by"] == "message" and reply["state"] == "needs_you", hop
        assert reply["waiting_for"]["tool"] == "stop_chat", hop
        # What the model read before choosing: the sender's message, framed as another chat's.
        assert "That chat's assistant wrote it, not the person" in model_inputs(reply), hop
    deploy = chats["deploy"]
    assert [r["state"] for r in deploy["replies"]] == ["completed"]


def test_item_2_the_wait_closing_a_cycle_of_three_is_refused(reports):
    chats = chats_of(reports["wait_cycle_of_three"])
    (refused,) = [s for s in chats["c"]["replies"][0]["steps"] if s["tool"] == "wait_for"]
    assert "would close a circle of 3 chats" in refused["error"]
    assert chats["c"]["waits"] == []
    for name in ("a", "b"):
        assert [w["state"] for w in chats[name]["waits"]] == ["woken"], name
        assert [r["state"] for r in chats[name]["replies"]] == ["completed", "completed"], name


def test_item_3_the_waiter_never_hears_a_chat_that_is_no_longer_yours(reports):
    chats = chats_of(reports["wait_target_taken_by_someone_else"])
    assert chats["group"]["taint"] == "person"
    waiter = chats["waiter"]
    assert [(w["state"], w["bare"]) for w in waiter["waits"]] == [("woken", True)]
    woken = waiter["replies"][1]
    assert woken["started_by"] == "wait"
    saw = model_inputs(woken)
    assert "is no longer a chat it may look at" in saw
    assert "private plans" not in saw and "finished its reply" not in saw
