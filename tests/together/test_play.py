"""conch_play: scenarios play in their own database and folders, print the same every run,
and bad scenarios are refused before anything is written."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from chats.models import Status, TurnState
from together.play.player import TEMP_PREFIX
from together.play.scenario import ScenarioError, scenario_load, scenario_parse

BASE = Path(settings.BASE_DIR)
SCENARIOS = BASE / "scenarios"
TWO_CHATS = SCENARIOS / "two_chats_one_folder.json"


class Person:
    """The person's own CONCH_HOME and temp folder, as the command sees them.

    Their plays start from ``template`` (``--template``) unless told otherwise.
    """

    def __init__(self, base: Path, template: Path | None = None):
        self.template = template
        self.home = base / "home"
        self.tmp = base / "tmp"
        for folder in (self.home / "logs", self.home / "workspaces", self.tmp):
            folder.mkdir(parents=True)
        self.before = self.home_listing()

    def home_listing(self) -> set[str]:
        return {str(p.relative_to(self.home)) for p in self.home.rglob("*")}

    def play(self, *args: str | Path, template: bool = True) -> subprocess.CompletedProcess:
        if template and self.template is not None:
            args = (*args, "--template", self.template)
        env = {
            **os.environ,
            "CONCH_HOME": str(self.home),
            "CONCH_SECRET_KEY": "test-only",  # so settings write no secret_key file here
            "TMPDIR": str(self.tmp),
        }
        return subprocess.run(
            [sys.executable, "manage.py", "conch_play", *map(str, args)],
            cwd=BASE,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def assert_nothing_left(self) -> None:
        assert list(self.tmp.glob(f"{TEMP_PREFIX}*")) == []
        assert not (self.home / "conch.sqlite3").exists()
        assert self.home_listing() == self.before


@pytest.fixture
def person(tmp_path, play_template) -> Person:
    return Person(tmp_path, play_template)


@pytest.fixture(scope="module")
def two_chats_played(tmp_path_factory, play_template):
    """The two-chats example, played twice with --json: once migrating, once from the template."""
    person = Person(tmp_path_factory.mktemp("played"), play_template)
    first = person.play(TWO_CHATS, "--json", template=False)
    second = person.play(TWO_CHATS, "--json")
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    return person, first.stdout, second.stdout


def _chat(report: dict, name: str) -> dict:
    return next(chat for chat in report["chats"] if chat["name"] == name)


# ---------------------------------------------------------------------------
# Playing


def test_a_scenario_played_twice_prints_the_same_bytes(two_chats_played):
    _, first, second = two_chats_played
    assert first == second  # and a play from a template prints what a migrating play does
    assert json.loads(first)["chats"]  # and it is a real report, not two empty outputs


def test_both_chats_transcripts_steps_and_files_changed_are_printed(two_chats_played):
    _, out, _ = two_chats_played
    report = json.loads(out)
    assert [chat["name"] for chat in report["chats"]] == ["fix", "docs"]
    fix, docs = _chat(report, "fix"), _chat(report, "docs")
    assert (fix["id"], docs["id"]) == ("c_fix", "c_docs")
    assert fix["folder"] == docs["folder"] == "app"

    asked = "The password check in src/auth.py isn't constant time. Please fix it."
    assert {"reply": 1, "role": "person", "kind": "message", "text": asked} in fix["transcript"]
    asked = "Please document login() in src/auth.py and the README."
    assert {"reply": 1, "role": "person", "kind": "message", "text": asked} in docs["transcript"]
    # The file both chats edited shows, relative to the run's root, in each one's files changed.
    assert fix["replies"][0]["files_changed"] == ["app/src/auth.py"]
    assert docs["replies"][0]["files_changed"] == ["app/src/auth.py", "app/README.md"]
    edit = fix["replies"][0]["steps"][1]
    assert (edit["tool"], edit["family"], edit["effect"]) == ("edit_file", "editing files", "write")
    assert edit["args"]["path"] == "src/auth.py"
    assert edit["result"] == "Edited src/auth.py (1 change)."
    assert edit["files"] == ["app/src/auth.py"]
    # The message sent while the first reply ran waited for it, then started reply 2.
    second = fix["replies"][1]
    assert (second["state"], second["started_by"]) == ("completed", "person")
    assert second["files_changed"] == ["app/tests/test_auth.py"]
    after = report["files_after"]["app/src/auth.py"]
    assert "hmac.compare_digest(given, stored)" in after
    assert '"""The user if the password is theirs, else None."""' in after


def test_the_chats_take_turns_one_action_each_per_tick(two_chats_played):
    _, out, _ = two_chats_played
    report = json.loads(out)
    docs_read = _chat(report, "docs")["replies"][0]["steps"][0]
    # docs read the file at tick 1: after fix's first edit (tick 1), before its second (tick 2).
    assert "hmac.compare_digest" in docs_read["result"]
    assert "import hmac" not in docs_read["result"]
    steps = [
        (event["seq"], event["chat"])
        for chat in report["chats"]
        for event in chat["events"]
        if "family" in event["data"]
    ]
    assert [chat for _, chat in sorted(steps)][:4] == ["c_fix", "c_fix", "c_docs", "c_fix"]


def test_a_run_leaves_no_temp_folder_and_never_touches_the_persons_database(two_chats_played):
    person, out, _ = two_chats_played
    person.assert_nothing_left()
    assert TEMP_PREFIX not in out
    assert str(person.tmp) not in out


def test_the_text_form_reads_the_same_facts(person):
    played = person.play(TWO_CHATS)
    assert played.returncode == 0, played.stderr
    out = played.stdout
    assert "=== fix (c_fix): Fix the password check" in out
    assert "=== docs (c_docs): Document login" in out
    assert "    files changed: app/src/auth.py, app/README.md" in out
    assert "      result: Edited src/auth.py (1 change)." in out
    assert "  [1] person message: Please document login() in src/auth.py and the README." in out
    assert TEMP_PREFIX not in out
    person.assert_nothing_left()


def test_an_ask_mode_chat_ends_needing_the_person(person):
    played = person.play(SCENARIOS / "ask_mode_needs_you.json", "--json")
    assert played.returncode == 0, played.stderr
    report = json.loads(played.stdout)
    careful = _chat(report, "careful")
    assert careful["status"] == Status.NEEDS_YOU
    assert careful["replies"][0]["state"] == TurnState.NEEDS_YOU
    assert careful["replies"][0]["waiting_for"]["tool"] == "edit_file"
    assert report["files_after"]["site/index.html"] == "<h1>Welcome</h1>\n"
    refused = _chat(report, "planner")["replies"][0]["steps"][1]
    assert refused["tool"] == "write_file"
    assert "isn't offered" in refused["error"]


def test_a_commands_output_and_exit_status_are_printed(person):
    played = person.play(SCENARIOS / "run_a_command.json", "--json")
    assert played.returncode == 0, played.stderr
    chat = _chat(json.loads(played.stdout), "runner")
    assert (chat["origin"], chat["origin_channel"], chat["taint"], chat["inbound"]) == (
        "chat_app",
        "telegram",
        "person",
        "hold",
    )
    results = [step["result"] for step in chat["replies"][0]["steps"]]
    assert results[:2] == ["exit status 0\n5\n", "exit status 1"]
    assert results[3] == "42\n"


def test_a_scenario_that_does_not_finish_within_its_ticks_is_an_error(person, tmp_path):
    scenario = tmp_path / "long.json"
    scenario.write_text(
        json.dumps(
            {
                "max_ticks": 2,
                "chats": [
                    {
                        "name": "a",
                        "title": "Long",
                        "folder": "a",
                        "script": [[{"say": "1"}, {"say": "2"}, {"say": "3"}, {"say": "4"}]],
                        "messages": [{"at": 0, "text": "go"}],
                    }
                ],
            }
        )
    )
    played = person.play(scenario)
    assert played.returncode != 0
    assert "did not finish within 2 ticks" in played.stderr
    person.assert_nothing_left()


# ---------------------------------------------------------------------------
# Refusing bad scenarios before anything is written


def _one_chat(**changes) -> dict:
    chat = {
        "name": "a",
        "title": "A chat",
        "folder": "app",
        "script": [[{"tool": "read_file", "args": {"path": "x.py"}}]],
        "messages": [{"at": 0, "text": "go"}],
    }
    chat.update(changes)
    return {"chats": [chat]}


def _with_action(action: dict) -> dict:
    return _one_chat(script=[[{"say": "hi"}, action]])


def _read(path: str) -> dict:
    return {"tool": "read_file", "args": {"path": path}}


BAD_SCENARIOS = {
    "bad_json": ('{"chats": [', "is not valid JSON"),
    "unknown_tool": (
        _with_action({"tool": "frobnicate", "args": {}}),
        "chat \"a\": script[0][1]: There is no tool called 'frobnicate'.",
    ),
    "dotdot_escape": (
        _with_action({"tool": "read_file", "args": {"path": "src/../../secrets.txt"}}),
        "chat \"a\": script[0][1] (read_file) args.path: the path 'src/../../secrets.txt' "
        "leaves the chat's folder 'app'.",
    ),
    "absolute_path": (
        _with_action({"tool": "write_file", "args": {"path": "/etc/passwd", "content": "x"}}),
        "chat \"a\": script[0][1] (write_file) args.path: the path '/etc/passwd' is absolute",
    ),
    "folder_escape": (
        _one_chat(folder="../outside"),
        "chat \"a\": folder: the path '../outside' leaves the run's root folder.",
    ),
    "bad_enum": (_one_chat(mode="yolo"), 'chat "a": mode must be one of ask, auto, plan'),
    "duplicate_name": (
        {"chats": [_one_chat()["chats"][0], _one_chat(title="Again")["chats"][0]]},
        'chats[1]: the name "a" is already used by chats[0].',
    ),
    "bad_tick": (
        _one_chat(messages=[{"at": -1, "text": "go"}]),
        'chat "a": messages[0].at must be a whole number of ticks, 0 or more',
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SCENARIOS))
def test_a_bad_scenario_is_refused_by_name_and_creates_nothing(case, person, tmp_path):
    content, expected = BAD_SCENARIOS[case]
    scenario = tmp_path / f"{case}.json"
    scenario.write_text(content if isinstance(content, str) else json.dumps(content))
    played = person.play(scenario, "--json")
    assert played.returncode != 0
    assert expected in played.stderr
    assert played.stdout == ""
    person.assert_nothing_left()


def test_every_problem_is_reported_at_once():
    with pytest.raises(ScenarioError) as caught:
        scenario_parse(
            {
                "chats": [
                    {"name": "a", "title": "A", "folder": "app", "script": [], "colour": "red"},
                    {"title": "B", "folder": "app", "script": [], "origin": "chat_app"},
                ],
                "files": {"app/x.py": "", "app/x.py/y.py": ""},
            }
        )
    problems = caught.value.problems
    assert (
        "chat \"a\": unknown field 'colour'; expected folder, inbound, messages, mode, "
        "name, origin, origin_channel, person, presses, script, session_key, taint, title."
    ) in problems
    assert "chats[1]: missing field 'name'." in problems
    assert "chats[1]: origin chat_app needs origin_channel (e.g. telegram)." in problems
    assert "files['app/x.py/y.py']: 'app/x.py' is seeded as a file, not a folder." in problems


PROBLEM_LINES = {
    "not_an_object": ([_one_chat()], "The scenario must be a JSON object."),
    "unknown_top_field": (
        {**_one_chat(), "colour": "red"},
        "unknown field 'colour' at the top; expected actions, chats, description, files, max_ticks, "
        "pages.",
    ),
    "no_chats": ({"chats": []}, "chats must be a non-empty list of chats (got [])."),
    "max_ticks": (
        {**_one_chat(), "max_ticks": 0},
        "max_ticks must be a whole number from 1 to 10000 (got 0).",
    ),
    "chat_not_an_object": ({"chats": ["a"]}, "chats[0] must be an object (got 'a')."),
    "title_too_long": (
        _one_chat(title="x" * 121),
        'chat "a": title must be text of 1 to 120 characters (got 121 characters).',
    ),
    "a_tick_that_is_true": (
        _one_chat(messages=[{"at": True, "text": "go"}]),
        'chat "a": messages[0].at must be a whole number of ticks, 0 or more (got True).',
    ),
    "blank_words": (
        _one_chat(messages=[{"at": 0, "text": "  "}]),
        "chat \"a\": messages[0].text must be some words (got '  ').",
    ),
    "message_missing_its_tick": (
        _one_chat(messages=[{"text": "go"}]),
        "chat \"a\": messages[0]: missing field 'at'.",
    ),
    "file_leaves_the_root": (
        {**_one_chat(), "files": {"../x.py": ""}},
        "files['../x.py']: the path '../x.py' leaves the run's root folder.",
    ),
    "file_too_long": (
        {**_one_chat(), "files": {"app/x.py": "x" * 1_000_001}},
        "files['app/x.py'] must be text, up to 1,000,000 characters (got 1,000,001 characters).",
    ),
    "folder_in_the_way": (
        {**_one_chat(), "files": {"app": "a file"}},
        "chat \"a\": its folder 'app' is in the way of the seeded file 'app'.",
    ),
    "a_channel_for_an_own_chat": (
        _one_chat(origin_channel="telegram"),
        'chat "a": origin_channel is only for origin chat_app.',
    ),
    "a_path_deep_in_a_tasks_script": (
        _with_action(
            {
                "tool": "start_background_task",
                "args": {"title": "T", "script": [[{"say": "hi"}, _read("/etc/x")]]},
            }
        ),
        'chat "a": script[0][1] (start_background_task) args.script[0][1].args.path: the path '
        "'/etc/x' is absolute; give it relative to the chat's folder 'app'.",
    ),
}


@pytest.mark.parametrize("case", sorted(PROBLEM_LINES))
def test_each_problem_is_one_line_naming_the_chat_and_the_fields_path(case):
    data, expected = PROBLEM_LINES[case]
    with pytest.raises(ScenarioError) as caught:
        scenario_parse(data)
    assert expected in caught.value.problems


def test_every_path_that_leaves_the_folder_is_reported_not_just_the_first():
    script = [
        [
            {"tool": "read_file", "args": {"path": "../../a"}},
            {"say": "between"},
            {"tool": "write_file", "args": {"path": "~/b", "content": "x"}},
        ]
    ]
    with pytest.raises(ScenarioError) as caught:
        scenario_parse(_one_chat(script=script))
    assert caught.value.problems == [
        "chat \"a\": script[0][0] (read_file) args.path: the path '../../a' leaves the chat's "
        "folder 'app'.",
        "chat \"a\": script[0][2] (write_file) args.path: the path '~/b' starts with ~; give it "
        "relative to the chat's folder 'app'.",
    ]


def test_a_path_that_leaves_and_comes_back_into_the_folder_is_allowed():
    scenario = scenario_parse(
        _with_action({"tool": "read_file", "args": {"path": "../app/src/./x.py"}})
    )
    assert scenario.chats[0].folder == "app"


def test_every_committed_scenario_reads_back_the_same_from_what_the_child_is_given():
    for path in sorted(SCENARIOS.glob("*.json")):
        scenario = scenario_load(path)
        assert scenario_parse(json.loads(json.dumps(scenario.as_data()))) == scenario, path.name


def test_the_inner_play_refuses_anything_but_a_runs_own_new_database(person):
    env = {**os.environ, "CONCH_HOME": str(person.home), "CONCH_SECRET_KEY": "test-only"}
    inner = subprocess.run(
        [sys.executable, "manage.py", "conch_play", "--inner", "--root", str(person.tmp), "-"],
        cwd=BASE,
        env=env,
        input=json.dumps(_one_chat()),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert inner.returncode != 0
    assert "--inner plays only into a new SQLite database" in inner.stderr
    person.assert_nothing_left()


# ---------------------------------------------------------------------------
# Starting from a template instead of migrating


def _template_copy(template: Path, folder: Path) -> Path:
    copy = folder / "template.sqlite3"
    shutil.copyfile(template, copy)
    return copy


def test_a_template_that_already_holds_data_is_refused_and_nothing_is_left(
    person, play_template, tmp_path
):
    used = _template_copy(play_template, tmp_path)
    with contextlib.closing(sqlite3.connect(used)) as db, db:
        db.execute(
            "INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, "
            "email, is_staff, is_active, date_joined) "
            "VALUES ('', 1, 'someone', '', '', '', 1, 1, '2024-01-01')"
        )
    played = person.play(TWO_CHATS, "--json", "--template", used, template=False)
    assert played.returncode != 0
    assert f"--template {used} already holds users: give a database Conch has only migrated." in (
        played.stderr
    )
    assert played.stdout == ""
    person.assert_nothing_left()


def test_a_template_that_is_not_an_sqlite_database_is_refused(person, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    played = person.play(TWO_CHATS, "--json", "--template", notes, template=False)
    assert played.returncode != 0
    assert f"--template {notes} is not an SQLite database." in played.stderr
    assert notes.read_text() == "not a database\n"
    person.assert_nothing_left()
