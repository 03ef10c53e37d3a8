"""The scenario format's ``actions`` and ``person``, played for real with conch_play.

``scenarios/person_and_runner.json`` uses every action once: the runner killed mid-step
(after a write's tool ran, and before a read's) and restarted, Approve and Deny, the clock
moved, a chat deleted, a second person's chat, and a chat changed while it runs (someone
else's words, its inbound setting, its mode). Each reply's ``inputs`` are the messages
its engine was given, as an OpenAI-compatible model would be sent them.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from chats.runtime.claims import ERR_WRITE_CUT_OFF
from tests.together.plays import chats_of, report_printed
from together.play.scenario import ACTIONS, ERR_ACTION_SHAPE, ScenarioError, scenario_parse

SCENARIO = "person_and_runner"


@pytest.fixture(scope="module")
def played(play_template) -> tuple[str, str]:
    """The scenario played twice, at once: what --json prints each time."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        first, second = (pool.submit(report_printed, SCENARIO, play_template) for _ in range(2))
    return first.result(), second.result()


@pytest.fixture(scope="module")
def report(played) -> dict:
    return json.loads(played[0])


def test_the_actions_scenario_prints_the_same_bytes_every_run(played):
    first, second = played
    assert first == second
    assert json.loads(first)["runner"]["kills"]


def test_a_runner_killed_after_a_writes_tool_ran_leaves_it_cut_off_and_recovery_ends_the_reply(
    report,
):
    writer = chats_of(report)["writer"]
    (reply,) = writer["replies"]
    assert reply["state"] == "interrupted"
    read, write = reply["steps"]
    assert (read["tool"], read["error"]) == ("read_file", "")
    assert (write["tool"], write["error"]) == ("write_file", ERR_WRITE_CUT_OFF)
    # The tool ran before the runner died: its file is there, its result never written.
    assert report["files_after"]["app/k.txt"] == "k\n"
    assert write["result"] == ""
    assert report["runner"]["restarts"][0] == {
        "tick": 2,
        "recovered": [{"chat": "c_writer", "reply": 1, "state": "interrupted"}],
    }
    # Nothing played while the runner was dead (tick 1's kill, tick 2's restart).
    ticks = {r["tick"] for chat in report["chats"] for r in chat["replies"]}
    assert 1 not in ticks


def test_a_runner_killed_before_a_reads_tool_ran_is_picked_up_and_reads_again(report):
    reader = chats_of(report)["reader"]
    first = reader["replies"][0]
    assert first["state"] == "completed"
    cut, again = first["steps"]
    assert cut["tool"] == again["tool"] == "read_file"
    assert "read again" in cut["error"] and cut["result"] == ""
    assert again["result"] == "two\n" and again["error"] == ""
    assert "Conch restarted during this reply and picked it up again." in [
        e["text"] for e in reader["notes"]
    ]


def test_approve_runs_the_step_and_deny_refuses_it(report):
    ask = chats_of(report)["ask"]
    approved = ask["replies"][0]["steps"][1]
    assert (approved["tool"], approved["error"]) == ("write_file", "")
    assert report["files_after"]["app/notes.txt"] == "two\n"
    denied = ask["replies"][1]["steps"][0]
    assert denied["error"] == "The person said no to this."
    assert "app/extra.txt" not in report["files_after"]


def test_a_deleted_chat_is_gone_and_said_so(report):
    assert report["deleted"] == ["c_old"]
    assert "old" not in chats_of(report)
    assert any(
        e["type"] == "conversation.deleted" and e["chat"] == "c_old" for e in report["other_events"]
    )


def test_a_second_persons_chat_is_never_listed_to_the_owners_chats(report):
    chats = chats_of(report)
    assert chats["theirs"]["person"] == "second"
    assert chats["theirs"]["replies"][0]["tick"] == 0  # it was working while listed
    listed = chats["ask"]["replies"][0]["steps"][0]
    assert listed["tool"] == "list_chats"
    assert "c_writer" in listed["result"]
    assert "c_theirs" not in listed["result"] and "Someone else" not in listed["result"]


def test_the_clock_moves_and_runs_the_sweeps_whose_period_passed(report):
    runner = report["runner"]
    assert runner["clock_moved_seconds"] == 600
    at_five = [s["sweep"] for s in runner["sweeps"] if s["tick"] == 5]
    # Ten minutes: the waits' 30-second look, the outbox's and the routines' runs; the hourly
    # maintenance runs only with the restart that follows, as every runner's first loop does.
    moved = ["gateway.outbox", "gateway.resets", "gateway.routines", "waits"]
    assert at_five[:4] == moved
    assert at_five[4:] == [*moved[:3], "gateway.maintenance", "waits"]


def test_someone_elses_words_make_the_chat_not_only_yours_and_ask_first(report):
    reader = chats_of(report)["reader"]
    assert (reader["taint"], reader["mode"]) == ("person", "ask")
    second = reader["replies"][1]
    assert second["tick"] == 9
    # What the reply's engine was given ends with their words.
    last = second["inputs"][0]["messages"][-1]
    assert last == {"role": "user", "content": "Hi, it's Mallory."}


def test_a_chats_mode_and_inbound_change_while_it_runs(report):
    ask = chats_of(report)["ask"]
    assert (ask["mode"], ask["inbound"]) == ("plan", "hold")


def test_each_reply_reports_every_input_its_engine_was_given(report):
    ask = chats_of(report)["ask"]
    inputs = ask["replies"][0]["inputs"]
    # list_chats, write_file (asks first), then after Approve: words, then the end.
    assert [i["action"] for i in inputs] == [1, 2, 3, 4]
    assert [i["tick"] for i in inputs] == [0, 1, 4, 5]
    first = inputs[0]["messages"]
    assert first[0]["role"] == "system" and "Conch" in first[0]["content"]
    assert first[1:] == [{"role": "user", "content": "Make the notes say two."}]
    # The third input carries the approved write's result as the model reads it.
    tool_results = [m for m in inputs[2]["messages"] if m["role"] == "tool"]
    ids = [m["tool_call_id"] for m in tool_results]
    # Each call's id as the engine sends it: nine letters or digits (Mistral's rule), distinct.
    assert len(ids) == 2 and len(set(ids)) == 2
    assert all(len(i) == 9 and i.isalnum() for i in ids)
    assert "c_theirs" not in json.dumps(inputs)


# ---------------------------------------------------------------------------
# The format: each action checked before anything is written


def _scenario(actions) -> dict:
    return {
        "chats": [{"name": "a", "title": "A", "folder": ".", "script": [[{"say": "hi"}]]}],
        "actions": actions,
    }


def _problems(actions) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        scenario_parse(_scenario(actions))
    return caught.value.problems


DOS = ", ".join(ACTIONS)
BAD_ACTIONS = {
    "unknown_do": (
        [{"at": 1, "do": "explode"}],
        f"actions[0] {ERR_ACTION_SHAPE.format(dos=DOS)} (got do 'explode').",
    ),
    "not_an_object": (["kill"], f"actions[0] {ERR_ACTION_SHAPE.format(dos=DOS)}."),
    "no_such_chat": (
        [{"at": 1, "do": "delete", "chat": "b"}],
        'actions[0].chat: there is no chat named "b" (the chats are a).',
    ),
    "bad_cut": (
        [{"at": 1, "do": "kill", "chat": "a", "cut": "middle"}],
        "actions[0].cut: input should be 'before', 'after' or 'intake' (got 'middle').",
    ),
    "cut_intake_is_one_word_in_lowercase": (
        [{"at": 1, "do": "kill", "chat": "a", "cut": "Intake"}],
        "actions[0].cut: input should be 'before', 'after' or 'intake' (got 'Intake').",
    ),
    "cut_on_an_action_that_is_no_kill": (
        [{"at": 1, "do": "restart", "cut": "intake"}],
        "actions[0]: unknown field 'cut'; expected at, do.",
    ),
    "clock_backwards": (
        [{"at": 1, "do": "clock", "by": -30}],
        "actions[0].by must move the clock forward by more than 0 and at most 400 days "
        "(got -1 day, 23:59:30).",
    ),
    "clock_words": (
        [{"at": 1, "do": "clock", "by": "soon"}],
        "actions[0].by must be a duration: ISO 8601 (PT30S, PT10M, P3D) or a number of "
        "seconds (got 'soon').",
    ),
    "bad_mode": (
        [{"at": 1, "do": "mode", "chat": "a", "mode": "fast"}],
        "actions[0].mode must be one of ask, auto, plan (got 'fast').",
    ),
    "bad_inbound": (
        [{"at": 1, "do": "inbound", "chat": "a", "inbound": "maybe"}],
        "actions[0].inbound must be one of accept, hold, refuse (got 'maybe').",
    ),
    "no_words": (
        [{"at": 1, "do": "someone_else", "chat": "a"}],
        "actions[0]: missing field 'text'.",
    ),
    "unknown_field": (
        [{"at": 1, "do": "approve", "chat": "a", "yes": True}],
        "actions[0]: unknown field 'yes'; expected at, chat, do.",
    ),
    "negative_tick": (
        [{"at": -1, "do": "restart"}],
        "actions[0].at must be a whole number of ticks, 0 or more (got -1).",
    ),
    "killed_while_dead": (
        [{"at": 1, "do": "kill", "chat": "a"}, {"at": 3, "do": "kill", "chat": "a"}],
        "actions[1]: the runner is already dead at tick 3 (killed by actions[0] at tick 1); "
        "restart it first (do: restart, at a later tick).",
    ),
    "restarted_the_same_tick": (
        [
            {"at": 1, "do": "kill", "chat": "a"},
            {"at": 1, "do": "restart"},
            {"at": 2, "do": "kill", "chat": "a"},
        ],
        "actions[2]: the runner is already dead at tick 2 (killed by actions[0] at tick 1); "
        "restart it first (do: restart, at a later tick).",
    ),
    "killed_twice_a_tick": (
        [
            {"at": 1, "do": "kill", "chat": "a"},
            {"at": 2, "do": "restart"},
            {"at": 4, "do": "kill", "chat": "a"},
            {"at": 4, "do": "kill", "chat": "a"},
        ],
        "actions[3]: the runner is killed once a tick; actions[2] already kills it at tick 4.",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ACTIONS))
def test_a_bad_action_is_refused_with_one_clear_line(case):
    actions, expected = BAD_ACTIONS[case]
    assert _problems(actions) == [expected]


def test_a_chat_is_the_persons_own_or_a_second_persons():
    data = _scenario([])
    data["chats"][0]["person"] = "third"
    with pytest.raises(ScenarioError) as caught:
        scenario_parse(data)
    assert caught.value.problems == [
        'chat "a": person must be owner (the person\'s own chat) or second (a second '
        "person's) (got 'third')."
    ]


def test_well_formed_actions_read_back_the_same_from_what_the_child_is_given():
    data = _scenario(
        [
            {"at": 0, "do": "clock", "by": "P3D"},
            {"at": 1, "do": "kill", "chat": "a"},
            {"at": 2, "do": "restart"},
            {"at": 2, "do": "clock", "by": 30},
            {"at": 3, "do": "kill", "chat": "a", "cut": "before"},
            {"at": 4, "do": "restart"},
            {"at": 4, "do": "kill", "chat": "a", "cut": "intake"},
            {"at": 5, "do": "restart"},
            {"at": 5, "do": "approve", "chat": "a"},
            {"at": 5, "do": "deny", "chat": "a"},
            {"at": 6, "do": "mode", "chat": "a", "mode": "ask"},
            {"at": 6, "do": "inbound", "chat": "a", "inbound": "refuse"},
            {"at": 7, "do": "someone_else", "chat": "a", "text": "hi", "who": "Eve"},
            {"at": 8, "do": "delete", "chat": "a"},
        ]
    )
    scenario = scenario_parse(data)
    assert [a.do for a in scenario.actions] == [a["do"] for a in data["actions"]]
    assert scenario.actions[0].by.days == 3 and scenario.actions[3].by.seconds == 30
    assert scenario_parse(scenario.as_data()) == scenario


def test_an_action_that_cannot_be_done_at_its_tick_stops_the_play_with_why(tmp_path, play_template):
    from tests.together.test_play import Person

    person = Person(tmp_path / "person", play_template)
    path = tmp_path / "early.json"
    path.write_text(json.dumps(_scenario([{"at": 0, "do": "approve", "chat": "a"}])))
    played = person.play(path, "--json")
    assert played.returncode != 0
    why = "actions[0] at tick 0 (approve on chat 'a'): it has no reply waiting for the person's OK."
    assert json.loads(played.stdout)["error"] == why
    person.assert_nothing_left()
