"""ADR 0134 part 2's committed scenarios, played for real with conch_play, and the presses format.

- ``loop_three_chats.json``: a loop of start_reply messages stops at the chain limits, exactly;
- ``wait_for_task.json``: a chat waits for its task and wakes with the task's result;
- ``held_then_passed_on.json``: a held message starts nothing until the person passes it on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.together.plays import chats_of, report_printed
from tests.together.test_play import Person
from together.messages import ERR_CHAIN_MESSAGES, ERR_CHAIN_REPLIES, MESSAGE_LIMITS
from together.models import MessageState
from together.play.scenario import (
    ERR_PRESS_NOT_HOLD,
    ERR_PRESS_SHAPE,
    ScenarioError,
    scenario_parse,
)

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ("loop_three_chats", "wait_for_task", "held_then_passed_on")


def _command(name: str, template: Path, *options: str) -> list[str]:
    scenario = f"scenarios/{name}.json"
    return [sys.executable, "manage.py", "conch_play", scenario, "--template", template, *options]


@pytest.fixture(scope="module")
def outputs(play_template) -> dict[str, tuple[str, str]]:
    """Each scenario played twice, what --json prints, all six plays at once."""
    with ThreadPoolExecutor(max_workers=2 * len(SCENARIOS)) as pool:
        runs = {
            (name, n): pool.submit(report_printed, name, play_template)
            for name in SCENARIOS
            for n in (1, 2)
        }
    return {name: (runs[name, 1].result(), runs[name, 2].result()) for name in SCENARIOS}


@pytest.fixture(scope="module")
def reports(outputs) -> dict[str, dict]:
    return {name: json.loads(first) for name, (first, _) in outputs.items()}


def chain(report: dict, chain_id: str) -> dict:
    return next(c for c in report["chains"] if c["id"] == chain_id)


def pairs(chain_row: dict) -> dict[tuple[str, str], int]:
    return {(p["from"], p["to"]): p["count"] for p in chain_row["pairs"]}


def states(message: dict) -> list[tuple[int | None, str]]:
    return [(h["tick"], h["state"]) for h in message["history"]]


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_scenario_prints_the_same_bytes_every_run(outputs, name):
    first, second = outputs[name]
    assert first == second
    assert json.loads(first)["chats"]  # a real report, not two empty outputs
    assert "conch-play-" not in first


# ---------------------------------------------------------------------------
# Three chats in a loop


def test_the_limits_the_loop_runs_into_are_the_adrs():
    assert MESSAGE_LIMITS.replies_started_per_chain == 4
    assert MESSAGE_LIMITS.messages_per_chain == 8
    assert MESSAGE_LIMITS.messages_per_pair == 3


def test_a_loop_with_start_reply_starts_exactly_four_replies_and_the_fifth_is_refused(reports):
    chats = chats_of(reports["loop_three_chats"])
    a, b, c = chats["a"], chats["b"], chats["c"]
    started = sorted(
        (reply["tick"], name, reply["number"])
        for name in ("a", "b", "c")
        for reply in chats[name]["replies"]
        if reply["started_by"] == "message"
    )
    # Round the loop: b, c, a, b, one after another; the person started a's first reply only.
    assert [(name, number) for _, name, number in started] == [
        ("b", 1),
        ("c", 1),
        ("a", 2),
        ("b", 2),
    ]
    assert len({tick for tick, _, _ in started}) == 4
    assert [r["started_by"] for r in a["replies"]] == ["person", "message"]
    assert len(c["replies"]) == 1
    # The fifth message asking for a reply is refused, naming the limit; nothing was sent.
    refused = b["replies"][1]["steps"][0]
    assert (refused["tool"], refused["args"]["start_reply"]) == ("message_chat", True)
    assert refused["result"] == ""
    assert refused["error"] == ERR_CHAIN_REPLIES.format(n=4)
    assert "replies in other chats, the most one chain may" in refused["error"]
    assert not any(m["text"] == refused["args"]["text"] for m in c["messages"])
    assert all(r["state"] == "completed" for chat in (a, b, c) for r in chat["replies"])


def test_every_message_in_the_loop_is_read_once_by_the_reply_it_started(reports):
    chats = chats_of(reports["loop_three_chats"])
    came = [m for name in ("a", "b", "c") for m in chats[name]["messages"] if m["side"] == "from"]
    assert sorted(m["id"] for m in came) == ["m_1", "m_3", "m_5", "m_7"]
    for message in came:
        assert message["state"] == MessageState.READ
        assert message["start_reply"] is True and message["chain"] == "chain_1"
        assert [state for _, state in states(message)] == ["waiting", "read"]
    # Both sides' cards show the same message as it is now.
    sent = {
        m["id"]: m for name in ("a", "b", "c") for m in chats[name]["messages"] if m["side"] == "to"
    }
    assert {i: m["state"] for i, m in sent.items()} == {i: "read" for i in sent}
    assert sorted(sent) == ["m_1", "m_3", "m_5", "m_7"]


def test_copying_the_third_chat_in_stops_the_chain_at_eight_messages(reports):
    report = reports["loop_three_chats"]
    chats = chats_of(report)
    y = chats["y"]
    refused = y["replies"][1]["steps"]
    assert [s["tool"] for s in refused] == ["message_chat", "message_chat"]
    assert [s["error"] for s in refused] == [ERR_CHAIN_MESSAGES.format(n=8)] * 2
    assert "messages between chats, the most one chain may" in refused[0]["error"]
    sent = [m for name in ("x", "y", "z") for m in chats[name]["messages"] if m["side"] == "to"]
    assert len(sent) == MESSAGE_LIMITS.messages_per_chain == 8
    assert all(m["chain"] == "chain_2" for m in sent)
    started = [
        r
        for name in ("x", "y", "z")
        for r in chats[name]["replies"]
        if r["started_by"] == "message"
    ]
    assert len(started) == 4


def test_every_chains_counts_are_exact(reports):
    report = reports["loop_three_chats"]
    assert [c["id"] for c in report["chains"]] == ["chain_1", "chain_2"]
    loop = chain(report, "chain_1")
    assert (loop["messages"], loop["replies_started"]) == (4, 4)
    assert pairs(loop) == {("c_a", "c_b"): 2, ("c_b", "c_c"): 1, ("c_c", "c_a"): 1}
    copying = chain(report, "chain_2")
    assert (copying["messages"], copying["replies_started"]) == (8, 4)
    assert pairs(copying) == {
        ("c_x", "c_z"): 2,
        ("c_x", "c_y"): 2,
        ("c_y", "c_x"): 1,
        ("c_y", "c_z"): 1,
        ("c_z", "c_y"): 1,
        ("c_z", "c_x"): 1,
    }
    assert max(pairs(copying).values()) <= MESSAGE_LIMITS.messages_per_pair


# ---------------------------------------------------------------------------
# Waiting for a task


def test_a_chat_waits_for_its_task_and_wakes_with_its_result(reports):
    report = reports["wait_for_task"]
    chats = chats_of(report)
    notes, task_chat = chats["notes"], chats["c_1"]
    first, woken = notes["replies"]
    started, waited = first["steps"]
    assert started["tool"] == "start_background_task"
    assert started["result"].startswith("Started the task “Count the test files” (t_1).")
    assert waited["tool"] == "wait_for" and waited["args"] == {"kind": "task", "id": "t_1"}
    # The wait let go of the reply: it ended there, and its last words were never said.
    assert first["state"] == "completed"
    assert first["end_reason"] == waited["result"]
    assert waited["result"].startswith("Waiting for the task “Count the test files” (t_1).")
    assert not any("never said" in e["text"] for e in notes["transcript"])
    # The task ran on its own chat, on the subagent lane.
    assert (task_chat["origin"], task_chat["replies"][0]["lane"]) == ("task", "subagent")
    assert task_chat["replies"][0]["state"] == "completed"
    # A new reply started from the wait, and its first words are the task's result.
    assert woken["started_by"] == "wait" and woken["chain"] == first["chain"]
    assert woken["tick"] > task_chat["replies"][0]["tick"]
    first_entry = next(e for e in notes["transcript"] if e["reply"] == 2)
    assert first_entry["role"] == "conch"
    assert first_entry["text"] == (
        "[Conch: the task “Count the test files” (t_1) is done.]\n"
        '<task-result task="t_1">\n'
        "There are 3 test files: test_auth.py, test_session.py and test_tokens.py.\n"
        "</task-result>"
    )
    assert notes["waits"] == [
        {
            "kind": "task",
            "target": "t_1",
            "title": "Count the test files",
            "chain": "chain_1",
            "state": "woken",
            "headline": "“Count the test files” is done",
            "bare": False,
        }
    ]
    assert "3 test files" in report["files_after"]["app/RELEASE_NOTES.md"]


def test_the_woken_reply_starts_only_after_the_task_is_done(reports):
    notes = chats_of(reports["wait_for_task"])["notes"]
    events = notes["events"]
    done = next(e["seq"] for e in events if e["data"].get("state") == "done")
    woke = next(
        e["seq"]
        for e in events
        if e["type"] == "status" and e["data"].get("turn") == 2 and "ended" not in e["data"]
    )
    assert done < woke


# ---------------------------------------------------------------------------
# Held, then passed on


PASS_TICK = 6
DISMISS_TICK = 4


def test_a_held_message_starts_nothing_until_the_person_passes_it_on(reports):
    chats = chats_of(reports["held_then_passed_on"])
    fix = chats["fix"]
    assert fix["inbound"] == "hold"
    assert fix["presses"] == [
        {"at": DISMISS_TICK, "action": "dismiss", "message": 2, "id": "m_2", "state": "dismissed"},
        {"at": PASS_TICK, "action": "pass", "message": 1, "id": "m_1", "state": "waiting"},
    ]
    # No reply before the press; one reply, started by the message, at the press's tick.
    [reply] = fix["replies"]
    assert (reply["started_by"], reply["tick"], reply["state"]) == (
        "message",
        PASS_TICK,
        "completed",
    )
    passed = next(m for m in fix["messages"] if m["id"] == "m_1")
    assert (passed["side"], passed["number"], passed["chat"]) == ("from", 1, "c_notes")
    assert states(passed) == [(0, "held"), (PASS_TICK, "waiting"), (PASS_TICK, "read")]
    assert (passed["state"], passed["passed_on"], passed["read_in_reply"]) == ("read", True, 1)
    note = next(e for e in fix["transcript"] if e["kind"] == "note")
    assert note["reply"] == 1
    assert "Release 2.3 ships on Friday. Is the login fix in it?" in note["text"]


def test_the_sender_is_told_held_and_its_card_follows_the_message_to_read(reports):
    notes = chats_of(reports["held_then_passed_on"])["notes"]
    step = notes["replies"][0]["steps"][0]
    assert step["result"].startswith("Held: “Fix the login” (chat c_fix)")
    assert "It hasn't been read." in step["result"]
    sent = next(m for m in notes["messages"] if m["id"] == "m_1")
    assert (sent["side"], sent["number"], sent["state"]) == ("to", None, "read")
    assert states(sent) == [(0, "held"), (PASS_TICK, "waiting"), (PASS_TICK, "read")]
    # The answer it got back hasn't been read, and says so.
    answer = next(m for m in notes["messages"] if m["side"] == "from")
    assert (answer["id"], answer["state"], answer["read_in_reply"]) == ("m_3", "waiting", None)


def test_a_dismissed_message_is_never_read_and_says_why(reports):
    chats = chats_of(reports["held_then_passed_on"])
    fix, ideas = chats["fix"], chats["ideas"]
    dismissed = next(m for m in fix["messages"] if m["id"] == "m_2")
    assert states(dismissed) == [(0, "held"), (DISMISS_TICK, "dismissed")]
    assert (dismissed["state"], dismissed["reason"]) == ("dismissed", "The person dismissed it.")
    assert not any("Rust" in e["text"] for e in fix["transcript"] if e["kind"] != "card")
    assert [m["state"] for m in ideas["messages"]] == ["dismissed"]
    assert not any(r["started_by"] == "message" for r in ideas["replies"])


def test_the_text_form_shows_each_card_with_its_state_and_history(play_template):
    played = subprocess.run(
        _command("held_then_passed_on", play_template),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    ).stdout
    assert (
        "  #1 m_1 · from c_notes “Write the release notes” · read · read in this chat's reply 1 "
        "· start_reply · passed on · chain chain_1"
    ) in played
    assert "    history: held (tick 0), waiting (tick 6), read (tick 6)" in played
    assert "  tick 6 · pressed Pass it on · message 1 (m_1) · now waiting" in played
    assert "  reply 1 · completed · started by message at tick 6 · chain chain_1" in played
    assert (
        "chain_1 · messages 2 · replies started 1 · pairs: c_notes→c_fix 1, c_fix→c_notes 1"
        in played
    )


# ---------------------------------------------------------------------------
# The presses format: checked before anything is written


def _holding(presses, *, inbound="hold", messages=1) -> dict:
    sender_script = [
        [
            {"tool": "message_chat", "args": {"chat": "c_held", "text": f"note {n}"}}
            for n in range(messages)
        ]
    ]
    return {
        "chats": [
            {
                "name": "held",
                "title": "Holds messages",
                "folder": "app",
                "script": [[{"say": "ok"}]],
                **({"inbound": inbound} if inbound else {}),
                "presses": presses,
            },
            {
                "name": "sender",
                "title": "Sends them",
                "folder": "app",
                "script": sender_script,
                "messages": [{"at": 0, "text": "go"}],
            },
        ]
    }


def _problems(data) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        scenario_parse(data)
    return caught.value.problems


def test_a_well_formed_press_is_read_into_the_scenario():
    scenario = scenario_parse(_holding([{"at": 3, "pass": 1}, {"at": 4, "dismiss": 2}], messages=2))
    presses = scenario.chats[0].presses
    assert [(p.at, p.action, p.number) for p in presses] == [(3, "pass", 1), (4, "dismiss", 2)]


BAD_PRESSES = {
    "both_buttons": (
        [{"at": 1, "pass": 1, "dismiss": 1}],
        f'chat "held": presses[0] {ERR_PRESS_SHAPE}.',
    ),
    "no_button": ([{"at": 1}], f'chat "held": presses[0] {ERR_PRESS_SHAPE}.'),
    "no_tick": ([{"pass": 1}], f'chat "held": presses[0] {ERR_PRESS_SHAPE}.'),
    "unknown_field": (
        [{"at": 1, "pass": 1, "button": "x"}],
        f"chat \"held\": presses[0] {ERR_PRESS_SHAPE} (unknown field 'button').",
    ),
    "not_an_object": (["pass 1"], f'chat "held": presses[0] {ERR_PRESS_SHAPE}.'),
    "not_a_list": ({"at": 1, "pass": 1}, f'chat "held": presses {ERR_PRESS_SHAPE}, in a list.'),
    "negative_tick": (
        [{"at": -1, "pass": 1}],
        'chat "held": presses[0].at must be a whole number of ticks, 0 or more (got -1).',
    ),
    "message_zero": (
        [{"at": 1, "pass": 0}],
        'chat "held": presses[0].pass must be a message\'s number, 1 for the first that came to '
        "this chat (got 0).",
    ),
    "message_as_text": (
        [{"at": 1, "dismiss": "1"}],
        'chat "held": presses[0].dismiss must be a message\'s number, 1 for the first that came '
        "to this chat (got '1').",
    ),
    "pressed_twice": (
        [{"at": 1, "pass": 1}, {"at": 2, "dismiss": 1}],
        'chat "held": presses[1]: message 1 is already pressed by presses[0]; a held message is '
        "pressed once.",
    ),
    "more_than_can_come": (
        [{"at": 1, "pass": 2}],
        'chat "held": presses[0].pass: message 2 can never come: the scripts send this chat 1 '
        "message (message_chat with chat c_held).",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_PRESSES))
def test_a_bad_press_is_refused_naming_the_chat_and_the_press(case):
    presses, expected = BAD_PRESSES[case]
    assert expected in _problems(_holding(presses))


@pytest.mark.parametrize("inbound", [None, "accept", "refuse"])
def test_presses_on_a_chat_that_does_not_hold_messages_are_refused(inbound):
    problems = _problems(_holding([{"at": 1, "pass": 1}], inbound=inbound))
    assert f'chat "held": {ERR_PRESS_NOT_HOLD} (its inbound is {inbound or "unset"}).' in problems


def test_a_bad_press_creates_nothing(tmp_path, play_template):
    person = Person(tmp_path / "person", play_template)
    scenario = tmp_path / "bad_press.json"
    scenario.write_text(json.dumps(_holding([{"at": 1, "pass": 1, "dismiss": 1}])))
    played = person.play(scenario, "--json")
    assert played.returncode != 0
    assert f'chat "held": presses[0] {ERR_PRESS_SHAPE}.' in played.stderr
    assert played.stdout == ""
    person.assert_nothing_left()


def test_a_press_before_its_message_came_stops_the_play_with_why(tmp_path, play_template):
    person = Person(tmp_path / "person", play_template)
    scenario = tmp_path / "early.json"
    scenario.write_text(json.dumps(_holding([{"at": 0, "pass": 1}])))
    played = person.play(scenario, "--json")
    assert played.returncode != 0
    why = (
        'chat "held": presses[0] at tick 0: Pass it on (message 1) failed: '
        "message 1 hasn't come to this chat yet (0 came so far)."
    )
    assert why in played.stderr
    report = json.loads(played.stdout)
    assert report["error"] == why
    held = chats_of(report)["held"]
    assert (held["presses"], held["replies"], held["messages"]) == ([], [], [])
    person.assert_nothing_left()
