"""Playing a scenario: scripted chats, interleaved one action at a time, printed the same every run.

``manage.py conch_play SCENARIO.json`` is a thin shell around this module:

1. :func:`scenario_load` reads and checks the whole file. Nothing is written
   until every check has passed, and every problem found is reported, each
   naming its chat, reply and action.
2. :func:`scenario_run_isolated` makes a temporary folder and re-runs the
   command in a child process with ``CONCH_HOME`` pointing inside it and
   ``DATABASE_URL``/``REDIS_URL`` removed, so the play migrates a fresh SQLite
   and never touches the person's own database. The folder is removed after.
3. In the child, :func:`play_inner` migrates, seeds the files, creates the
   chats and plays them tick by tick (:func:`scenario_play`), then prints the
   report as JSON for the parent to render (:func:`report_text`,
   :func:`report_json`).

Chats named in the scenario get the id ``c_<name>``; chains, tasks, messages
and any chat made during the run get counted ids (``chain_1``, ``t_1``,
``m_1``, ``c_1``), so the output is byte-identical across runs. Paths are
printed relative to the run's root folder, and the temporary folder's name
never appears.

What ADR 0134 adds (the person's presses on held message cards, and the
message cards, waits and chains in the report) lives in ``together.play``.
``chats`` never imports ``together`` (DESIGN), so :func:`_together` looks
that module up by name when the app is installed.
"""

from __future__ import annotations

import importlib
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.apps import apps as django_apps
from django.conf import settings
from django.utils import timezone

from chats import events
from chats.engines.scripted import ScriptError, validate_script
from chats.models import (
    Conversation,
    EntryKind,
    Inbound,
    Mode,
    Origin,
    Taint,
    Turn,
    TurnState,
    counted_ids,
)
from chats.play_pages import pages_check, pages_served

TEMP_PREFIX = "conch-play-"
WORKER = "conch-play"
MAX_TICKS = 10_000
FILE_LIMIT = 1_000_000
SHOWN_FILE_LIMIT = 4_000
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,29}$")  # c_<name> fits a public_id (32)

# The person's own stores must never reach the child; it gets its own home.
DROPPED_ENV = (
    "DATABASE_URL",
    "REDIS_URL",
    "CONCH_WORKSPACE",
    "CONCH_TEST_SQLITE",
    "CONCH_TEST_DATABASE_NAME",
)

TOP_KEYS = {"chats", "files", "description", "max_ticks", "pages"}
CHAT_REQUIRED = ("name", "title", "folder", "script")
CHAT_KEYS = {
    *CHAT_REQUIRED,
    "origin",
    "origin_channel",
    "inbound",
    "mode",
    "taint",
    "messages",
    "presses",
}
MESSAGE_KEYS = {"at", "text"}
PRESS_ACTIONS = ("pass", "dismiss")  # Pass it on, Dismiss
PRESS_WORDS = {"pass": "Pass it on", "dismiss": "Dismiss"}
MESSAGE_TOOL = "message_chat"

ROOT_WORDS = "the run's root folder"
ERR_NOT_AN_OBJECT = "The scenario must be a JSON object."
ERR_NO_CHATS = "chats: there must be at least one chat."
ERR_PRESS_SHAPE = (
    'must be {{"at": tick, "pass": N}} or {{"at": tick, "dismiss": N}}: the person presses '
    "Pass it on or Dismiss on the Nth message that came to this chat"
)
ERR_PRESS_NOT_HOLD = (
    "presses are only for a chat whose inbound is hold: only a held message waits for "
    "Pass it on or Dismiss"
)
ERR_NO_TOGETHER = "presses need the together app, which isn't installed."


class ScenarioError(Exception):
    """A scenario that can't be played; the message lists every problem found."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        if len(self.problems) == 1:
            super().__init__(self.problems[0])
        else:
            lines = "\n".join(f"- {p}" for p in self.problems)
            super().__init__(f"The scenario has {len(self.problems)} problems:\n{lines}")


@dataclass(frozen=True)
class Message:
    at: int
    text: str


@dataclass(frozen=True)
class Press:
    """The person's press on a held card: ``action`` on the ``number``-th message that came to the chat."""

    at: int
    action: str  # "pass" or "dismiss"
    number: int  # 1-based, in the order messages came to this chat


@dataclass(frozen=True)
class ChatSpec:
    name: str
    title: str
    folder: str  # normalised, relative to the run's root; "." is the root itself
    script: list
    origin: str = Origin.OWN
    origin_channel: str = ""
    inbound: str = ""
    mode: str = Mode.AUTO
    taint: str = Taint.NONE
    messages: tuple[Message, ...] = ()
    presses: tuple[Press, ...] = ()

    @property
    def public_id(self) -> str:
        return f"c_{self.name}"


@dataclass(frozen=True)
class Scenario:
    chats: tuple[ChatSpec, ...]
    files: dict[str, str] = field(default_factory=dict)
    max_ticks: int = MAX_TICKS
    description: str = ""
    raw: dict[str, Any] = field(default_factory=dict, compare=False)


# ---------------------------------------------------------------------------
# Checking


def scenario_load(path: str | Path) -> Scenario:
    """Read and check a scenario file. Raises ScenarioError; writes nothing."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such file.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot be read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from None
    return scenario_parse(data)


def _lexical(base: str, path: str) -> str | None:
    """``path`` joined to ``base`` and normalised, or None if it leaves ``base``."""
    joined = posixpath.normpath(posixpath.join(base, path))
    if base == ".":
        return None if joined == ".." or joined.startswith("../") else joined
    return joined if joined == base or joined.startswith(base + "/") else None


def _path_problem(path: Any, base: str, *, within: str = "") -> str | None:
    """Why ``path`` can't be used inside ``base`` (lexically), or None if it can."""
    within = within or f"the chat's folder {base!r}"
    if not isinstance(path, str) or not path.strip():
        return "is empty"
    if "\x00" in path:
        return "contains a NUL character"
    if posixpath.isabs(path):
        return f"{path!r} is absolute; give it relative to {within}"
    if path.startswith("~"):
        return f"{path!r} starts with ~; give it relative to {within}"
    if _lexical(base, path) is None:
        return f"{path!r} leaves {within}"
    return None


def _paths_in(value: Any, trail: str = "args") -> list[tuple[str, Any]]:
    """Every argument named ``path``, however deep, with where it is."""
    found: list[tuple[str, Any]] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            here = f"{trail}.{key}"
            if key == "path":
                found.append((here, inner))
            found.extend(_paths_in(inner, here))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found.extend(_paths_in(inner, f"{trail}[{i}]"))
    return found


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _choice(problems: list[str], where: str, value: Any, choices: list[str]) -> None:
    if value not in choices:
        problems.append(f"{where} must be one of {', '.join(choices)} (got {value!r}).")


def scenario_parse(data: Any) -> Scenario:
    """Check a scenario's data; raise ScenarioError listing every problem."""
    if not isinstance(data, dict):
        raise ScenarioError(ERR_NOT_AN_OBJECT)
    problems: list[str] = []
    for key in sorted(set(data) - TOP_KEYS):
        problems.append(
            f"unknown field {key!r} at the top; expected {', '.join(sorted(TOP_KEYS))}."
        )

    description = data.get("description", "")
    if not isinstance(description, str):
        problems.append("description must be text.")
        description = ""
    max_ticks = data.get("max_ticks", MAX_TICKS)
    if not _is_count(max_ticks) or not 1 <= max_ticks <= MAX_TICKS:
        problems.append(f"max_ticks must be a whole number from 1 to {MAX_TICKS}.")
        max_ticks = MAX_TICKS

    files = _parse_files(data.get("files", {}), problems)
    pages_check(data.get("pages"), problems)  # web pages for fetch_page (chats.play_pages)
    raw_chats = data.get("chats")
    chats: list[ChatSpec] = []
    if raw_chats is None:
        problems.append("missing field 'chats'.")
    elif not isinstance(raw_chats, list):
        problems.append("chats must be a list of chats.")
    elif not raw_chats:
        problems.append(ERR_NO_CHATS)
    else:
        first_with: dict[str, int] = {}
        for i, raw in enumerate(raw_chats):
            name = raw.get("name") if isinstance(raw, dict) else None
            if isinstance(name, str) and name in first_with:
                problems.append(
                    f'chats[{i}]: the name "{name}" is already used by chats[{first_with[name]}].'
                )
            elif isinstance(name, str):
                first_with[name] = i
            spec = _parse_chat(i, raw, problems)
            if spec is None:
                continue
            blocker = _file_in_the_way(spec.folder, files)
            if blocker:
                problems.append(
                    f'chat "{spec.name}": its folder {spec.folder!r} is in the way of '
                    f"the seeded file {blocker!r}."
                )
            chats.append(spec)
        if not problems:  # a chat with problems would count no messages: no false alarms
            _check_press_numbers(chats, problems)
    if problems:
        raise ScenarioError(problems)
    return Scenario(
        chats=tuple(chats),
        files=files,
        max_ticks=max_ticks,
        description=description,
        raw=data,
    )


def _parse_files(raw: Any, problems: list[str]) -> dict[str, str]:
    if not isinstance(raw, dict):
        problems.append('files must be an object mapping paths to their text: {"a/b.py": "..."}.')
        return {}
    files: dict[str, str] = {}
    for path, content in raw.items():
        problem = _path_problem(path, ".", within=ROOT_WORDS)
        if problem is None and posixpath.normpath(path) == ".":
            problem = "is the root folder itself, not a file"
        if problem:
            problems.append(f"files[{path!r}]: the path {problem}.")
            continue
        if not isinstance(content, str):
            problems.append(f"files[{path!r}] must be the file's text.")
            continue
        if len(content) > FILE_LIMIT:
            problems.append(f"files[{path!r}] is longer than {FILE_LIMIT} characters.")
            continue
        files[posixpath.normpath(path)] = content
    for path in files:
        parents = [posixpath.dirname(path)]
        while parents[-1] not in ("", "."):
            parents.append(posixpath.dirname(parents[-1]))
        for parent in parents:
            if parent in files:
                problems.append(f"files[{path!r}]: {parent!r} is seeded as a file, not a folder.")
    return files


def _file_in_the_way(folder: str, files: dict[str, str]) -> str | None:
    for path in files:
        if folder == path or folder.startswith(path + "/"):
            return path
    return None


def _parse_chat(i: int, raw: Any, problems: list[str]) -> ChatSpec | None:
    if not isinstance(raw, dict):
        problems.append(f"chats[{i}] must be an object.")
        return None
    name = raw.get("name")
    label = f'chat "{name}"' if isinstance(name, str) and name else f"chats[{i}]"
    before = len(problems)
    for key in CHAT_REQUIRED:
        if key not in raw:
            problems.append(f"{label}: missing field {key!r}.")
    for key in sorted(set(raw) - CHAT_KEYS):
        problems.append(f"{label}: unknown field {key!r}; expected {', '.join(sorted(CHAT_KEYS))}.")
    if "name" in raw and (not isinstance(name, str) or not NAME_PATTERN.match(name)):
        problems.append(
            f"{label}: name must be a short slug (a lowercase letter, then up to 29 "
            "lowercase letters, digits, - or _)."
        )
    title = raw.get("title", "")
    if "title" in raw and (not isinstance(title, str) or not 0 < len(title.strip()) <= 120):
        problems.append(f"{label}: title must be text of 1 to 120 characters.")
    folder = raw.get("folder", ".")
    if "folder" in raw:
        problem = _path_problem(folder, ".", within=ROOT_WORDS)
        if problem:
            problems.append(f"{label}: folder {problem}.")
        else:
            folder = posixpath.normpath(folder)
    origin = raw.get("origin", Origin.OWN)
    _choice(problems, f"{label}: origin", origin, Origin.values)
    channel = raw.get("origin_channel", "")
    if origin == Origin.CHAT_APP:
        if not isinstance(channel, str) or not 0 < len(channel) <= 32:
            problems.append(f"{label}: origin chat_app needs origin_channel (e.g. telegram).")
    elif channel:
        problems.append(f"{label}: origin_channel is only for origin chat_app.")
    inbound = raw.get("inbound", "")
    if "inbound" in raw:
        _choice(problems, f"{label}: inbound", inbound, Inbound.values)
    mode = raw.get("mode", Mode.AUTO)
    _choice(problems, f"{label}: mode", mode, Mode.values)
    taint = raw.get("taint", Taint.NONE)
    _choice(problems, f"{label}: taint", taint, Taint.values)

    script = raw.get("script", [])
    if "script" in raw:
        try:
            validate_script(script, where=f"{label}: script")
        except ScriptError as exc:
            problems.append(str(exc))
        if isinstance(script, list) and isinstance(folder, str) and "folder" in raw:
            _check_script_paths(label, script, folder, problems)

    messages = _parse_messages(label, raw.get("messages", []), problems)
    presses = _parse_presses(label, raw.get("presses", []), problems)
    if presses and inbound != Inbound.HOLD:
        problems.append(f"{label}: {ERR_PRESS_NOT_HOLD} (its inbound is {inbound or 'unset'}).")
    if len(problems) > before:
        return None
    return ChatSpec(
        name=name,
        title=title.strip(),
        folder=folder,
        script=script,
        origin=origin,
        origin_channel=channel,
        inbound=inbound,
        mode=mode,
        taint=taint,
        messages=messages,
        presses=presses,
    )


def _check_script_paths(label: str, script: list, folder: str, problems: list[str]) -> None:
    if _path_problem(folder, ".") is not None:
        return  # the folder's own problem is already reported
    for r, reply in enumerate(script):
        if not isinstance(reply, list):
            continue
        for a, action in enumerate(reply):
            if not isinstance(action, dict) or "tool" not in action:
                continue
            for where, path in _paths_in(action.get("args", {})):
                problem = _path_problem(path, posixpath.normpath(folder))
                if problem:
                    problems.append(
                        f"{label}: script[{r}][{a}] ({action['tool']}) {where}: the path {problem}."
                    )


def _parse_messages(label: str, raw: Any, problems: list[str]) -> tuple[Message, ...]:
    if not isinstance(raw, list):
        problems.append(f'{label}: messages must be a list of {{"at": tick, "text": "..."}}.')
        return ()
    messages = []
    for m, message in enumerate(raw):
        where = f"{label}: messages[{m}]"
        if not isinstance(message, dict):
            problems.append(f"{where} must be an object.")
            continue
        for key in sorted(MESSAGE_KEYS - set(message)):
            problems.append(f"{where}: missing field {key!r}.")
        for key in sorted(set(message) - MESSAGE_KEYS):
            problems.append(f"{where}: unknown field {key!r}; expected at, text.")
        at, text = message.get("at"), message.get("text")
        if "at" in message and not _is_count(at):
            problems.append(f"{where}.at must be a whole number of ticks, 0 or more (got {at!r}).")
        elif "text" in message and (not isinstance(text, str) or not text.strip()):
            problems.append(f"{where}.text must be some words.")
        elif MESSAGE_KEYS <= set(message):
            messages.append(Message(at=at, text=text))
    return tuple(messages)


def _parse_presses(label: str, raw: Any, problems: list[str]) -> tuple[Press, ...]:
    if not isinstance(raw, list):
        problems.append(f"{label}: presses {ERR_PRESS_SHAPE}, in a list.")
        return ()
    presses: list[Press] = []
    first_on: dict[int, int] = {}
    for p, press in enumerate(raw):
        where = f"{label}: presses[{p}]"
        if not isinstance(press, dict):
            problems.append(f"{where} {ERR_PRESS_SHAPE}.")
            continue
        actions = [key for key in PRESS_ACTIONS if key in press]
        unknown = sorted(set(press) - {"at", *PRESS_ACTIONS})
        if unknown or "at" not in press or len(actions) != 1:
            wrong = f" (unknown field {', '.join(map(repr, unknown))})" if unknown else ""
            problems.append(f"{where} {ERR_PRESS_SHAPE}{wrong}.")
            continue
        at, action = press["at"], actions[0]
        number = press[action]
        if not _is_count(at):
            problems.append(f"{where}.at must be a whole number of ticks, 0 or more (got {at!r}).")
            continue
        if not _is_count(number) or number < 1:
            problems.append(
                f"{where}.{action} must be a message's number, 1 for the first that came to "
                f"this chat (got {number!r})."
            )
            continue
        if number in first_on:
            problems.append(
                f"{where}: message {number} is already pressed by presses[{first_on[number]}]; "
                "a held message is pressed once."
            )
            continue
        first_on[number] = p
        presses.append(Press(at=at, action=action, number=number))
    return tuple(presses)


def _messages_scripted_to(chats: list[ChatSpec]) -> dict[str, int]:
    """How many message_chat calls in the scripts name each chat: the most that can come to it."""
    counts: dict[str, int] = {}
    for spec in chats:
        for reply in spec.script:
            for action in reply:
                if action.get("tool") == MESSAGE_TOOL:
                    target = action.get("args", {}).get("chat")
                    counts[target] = counts.get(target, 0) + 1
    return counts


def _check_press_numbers(chats: list[ChatSpec], problems: list[str]) -> None:
    scripted = _messages_scripted_to(chats)
    for spec in chats:
        most = scripted.get(spec.public_id, 0)
        for p, press in enumerate(spec.presses):
            if press.number > most:
                problems.append(
                    f'chat "{spec.name}": presses[{p}].{press.action}: message {press.number} can '
                    f"never come: the scripts send this chat {most} message{'s' if most != 1 else ''} "
                    f"(message_chat with chat {spec.public_id})."
                )


# ---------------------------------------------------------------------------
# Running in a child process


def scenario_run_isolated(scenario: Scenario, *, keep: bool = False) -> tuple[dict, str]:
    """Play ``scenario`` in a child process with its own home and database.

    Returns the report and the child's stderr (its logs). The temporary
    folder is removed afterwards unless ``keep`` is set.
    """
    tmp = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))
    try:
        root = tmp / "root"
        root.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
        env.update(
            CONCH_HOME=str(tmp / "home"),
            PYTHONDONTWRITEBYTECODE="1",  # no .pyc with timestamps in the chats' folders
            DJANGO_SETTINGS_MODULE=os.environ.get("DJANGO_SETTINGS_MODULE", "conch.settings"),
        )
        manage = Path(settings.BASE_DIR) / "manage.py"
        child = subprocess.run(  # noqa: S603 - our own interpreter and manage.py
            [sys.executable, str(manage), "conch_play", "--inner", "--root", str(root), "-"],
            input=json.dumps(scenario.raw),
            capture_output=True,
            text=True,
            env=env,
            cwd=str(settings.BASE_DIR),
        )
        logs = _Paths(root).text(child.stderr)
        if child.returncode != 0:
            tail = logs.strip().splitlines()[-1:] or ["(no message)"]
            message = tail[0].removeprefix("CommandError: ")
            raise ScenarioError(f"The play failed: {message}")
        try:
            report = json.loads(child.stdout)
        except json.JSONDecodeError:
            raise ScenarioError("The play printed something that isn't its report.") from None
        return report, logs
    finally:
        if keep:
            print(f"The run's folder is kept at {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def play_inner(*, raw: str, root: str) -> dict:
    """The child's side: check again, migrate a database that must be new, play, report."""
    from django.core.management import call_command

    database = settings.DATABASES["default"]
    root_path = Path(os.path.realpath(root)) if root else None
    run_folder = Path(settings.CONCH_HOME).parent
    if (
        root_path is None
        or "sqlite" not in database["ENGINE"]
        or Path(str(database["NAME"])).exists()
        or not run_folder.name.startswith(TEMP_PREFIX)
        or root_path.parent != run_folder
        or not root_path.is_dir()
        or any(root_path.iterdir())
    ):
        raise ScenarioError(
            "--inner plays only into a new SQLite database in a run's own temporary folder; "
            "run conch_play without it."
        )
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"The scenario is not valid JSON: {exc.msg}.") from None
    scenario = scenario_parse(data)
    call_command("migrate", verbosity=0, interactive=False)
    with pages_served(scenario) as served:  # the scenario's web pages, on loopback for the run
        return served.unport(scenario_play(served.scenario, root=root_path))


# ---------------------------------------------------------------------------
# Playing


def turn_claim_one(*, turn_id: int, worker: str) -> bool:
    """Claim one particular runnable turn; False if it isn't runnable or is someone else's.

    The conditional update is what makes the claim exclusive, as in ``turn_claim``.
    """
    lease = timezone.now() + timezone.timedelta(seconds=settings.CONCH_TURN_LEASE_SECONDS)
    return bool(
        Turn.objects.filter(
            pk=turn_id, claimed_by="", state=TurnState.RUNNING, ended_at__isnull=True
        ).update(claimed_by=worker, lease_until=lease)
    )


def _runnable_turns() -> dict[int, int]:
    """Chat pk → its runnable turn's pk."""
    rows = Turn.objects.filter(
        state=TurnState.RUNNING, ended_at__isnull=True, claimed_by=""
    ).values_list("conversation_id", "pk")
    return dict(rows)


def _play_one(turn_id: int) -> None:
    from chats.runtime.claims import turn_release
    from chats.runtime.stepping import turn_advance
    from chats.runtime.turns import turn_end

    if not turn_claim_one(turn_id=turn_id, worker=WORKER):
        return
    try:
        turn_advance(turn_id=turn_id, worker=WORKER, honour_delays=False)
    except Exception as exc:  # recorded as the reply's failure, as the runner does
        turn = Turn.objects.get(pk=turn_id)
        turn_end(
            turn=turn,
            state=TurnState.FAILED,
            reason=f"Conch hit an internal error: {exc.__class__.__name__}: {exc}",
        )
    turn_release(turn_id=turn_id, worker=WORKER)


def _together():
    """``together``'s part of a play (presses on held cards; cards, waits and chains in the report).

    Looked up by name, never imported at the top: ``chats`` must not import
    ``together`` (DESIGN). Without the app a play still runs, with none of them.
    """
    if not django_apps.is_installed("together"):
        return None
    return importlib.import_module("together.play")


@dataclass
class _Clock:
    """The tick each event was seen at: None while the run is set up, before tick 0."""

    tick: int | None = None
    seen: list[tuple[int | None, events.Event]] = field(default_factory=list)

    def watch(self, event: events.Event) -> None:
        self.seen.append((self.tick, event))


def _press(
    together, chat: Conversation, spec: ChatSpec, index: int, press: Press, applied: list
) -> str:
    """Apply one press; the error that stops the play, or "" if it went through."""
    from chats.runtime.chats import ConchError

    where = f'chat "{spec.name}": presses[{index}] at tick {press.at}'
    if together is None:
        return f"{where}: {ERR_NO_TOGETHER}"
    try:
        message = together.held_press(chat=chat, number=press.number, action=press.action)
    except ConchError as exc:
        return f"{where}: {PRESS_WORDS[press.action]} (message {press.number}) failed: {exc}"
    applied.append(
        {
            "at": press.at,
            "action": press.action,
            "message": press.number,
            "id": message.message_id,
            "state": message.state,
        }
    )
    return ""


def scenario_play(scenario: Scenario, *, root: Path) -> dict:
    """Seed, create the chats and play them tick by tick; return the report.

    Precondition: a fresh database (ids and event numbers start from one).
    Each tick: deliver the person's messages due at it, then the person's
    presses on held cards, make room for tasks, then let every chat with a
    runnable reply play exactly one action, the scenario's chats in file
    order and then any made during the run.
    """
    from chats.runtime.chats import conversation_create
    from chats.runtime.turns import message_send, tasks_make_room
    from chats.signin import owner_ensure

    root = Path(os.path.realpath(root))
    clock = _Clock()
    unsubscribe = events.subscribe(clock.watch)
    together = _together()
    presses: dict[str, list[dict]] = {spec.public_id: [] for spec in scenario.chats}
    error = ""
    try:
        with counted_ids():
            for path, content in scenario.files.items():
                target = root / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content, encoding="utf-8")
            owner = owner_ensure()
            chats: list[Conversation] = []
            for spec in scenario.chats:
                folder = root / spec.folder
                folder.mkdir(parents=True, exist_ok=True)
                chats.append(
                    conversation_create(
                        owner=owner,
                        title=spec.title,
                        folder=str(folder),
                        origin=spec.origin,
                        origin_channel=spec.origin_channel,
                        mode=spec.mode,
                        inbound=spec.inbound,
                        script=spec.script,
                        taint=spec.taint,
                        public_id=spec.public_id,
                    )
                )
            due: dict[int, list[tuple[Conversation, str]]] = {}
            pressing: dict[int, list[tuple[Conversation, ChatSpec, int, Press]]] = {}
            for chat, spec in zip(chats, scenario.chats, strict=True):
                for message in spec.messages:
                    due.setdefault(message.at, []).append((chat, message.text))
                for index, press in enumerate(spec.presses):
                    pressing.setdefault(press.at, []).append((chat, spec, index, press))
            last_due = max([*due, *pressing], default=-1)
            named = [chat.pk for chat in chats]

            tick = 0
            while True:
                clock.tick = tick
                for chat, text in due.get(tick, []):
                    message_send(conversation=chat, text=text)
                for chat, spec, index, press in pressing.get(tick, []):
                    error = _press(together, chat, spec, index, press, presses[spec.public_id])
                    if error:
                        break
                if error:
                    break
                tasks_make_room()
                runnable = _runnable_turns()
                if not runnable and tick >= last_due:
                    break
                if tick >= scenario.max_ticks:
                    error = (
                        f"The scenario did not finish within {scenario.max_ticks} ticks; "
                        "a reply or a chain of replies may be looping."
                    )
                    break
                order = named + sorted(pk for pk in runnable if pk not in named)
                for chat_pk in order:
                    if chat_pk in runnable:
                        _play_one(runnable[chat_pk])
                tick += 1
    finally:
        unsubscribe()
    return _report(
        scenario,
        root=root,
        ticks=tick,
        seen=clock.seen,
        error=error,
        together=together,
        presses=presses,
    )


# ---------------------------------------------------------------------------
# The report


class _Paths:
    """Writes paths relative to the run's root; the temporary folder's name never shows."""

    def __init__(self, root: Path):
        real = os.path.realpath(root)
        self.root = real
        outer = os.path.dirname(real)
        self.replacements: list[tuple[str, str]] = []
        for base in dict.fromkeys([real, str(root)]):
            self.replacements += [(base + "/", ""), (base, ".")]
        for base in dict.fromkeys([outer, os.path.dirname(str(root))]):
            self.replacements.append((base, "<run>"))

    def text(self, value: str) -> str:
        for old, new in self.replacements:
            value = value.replace(old, new)
        return value

    def path(self, value: str) -> str:
        if value == self.root:
            return "."
        if value.startswith(self.root + "/"):
            return value[len(self.root) + 1 :]
        return self.text(value)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value


EVENT_FIELDS = (
    "status",
    "turn",
    "step",
    "family",
    "files",
    "ended",
    "asks",
    "answer",
    "queued",
    "task",
    "state",
    "taint",
    "recovered",
    "message_id",
)


@dataclass
class _Timeline:
    """What the ticks say, read off the events: when each reply started, and each message's states."""

    reply_ticks: dict[tuple[str | None, int], int | None] = field(default_factory=dict)
    message_history: dict[str, list[dict]] = field(default_factory=dict)

    @classmethod
    def of(
        cls, seen: list[tuple[int | None, events.Event]], *, message_event: str | None = None
    ) -> _Timeline:
        timeline = cls()
        for tick, event in sorted(seen, key=lambda pair: pair[1].seq):
            data = event.data
            if event.type == events.STATUS and "turn" in data and "ended" not in data:
                timeline.reply_ticks.setdefault((event.conversation_id, data["turn"]), tick)
            if message_event and event.type == message_event and data.get("message_id"):
                history = timeline.message_history.setdefault(data["message_id"], [])
                # Both sides hear of each change; a state is listed once, when it began.
                if not history or history[-1]["state"] != data.get("state"):
                    history.append({"tick": tick, "state": data.get("state")})
        return timeline


def _report(
    scenario: Scenario,
    *,
    root: Path,
    ticks: int,
    seen: list[tuple[int | None, events.Event]],
    error: str,
    together=None,
    presses: dict[str, list[dict]] | None = None,
) -> dict:
    paths = _Paths(root)
    names = {spec.public_id: spec.name for spec in scenario.chats}
    timeline = _Timeline.of(
        seen, message_event=together.MESSAGE_EVENT if together is not None else None
    )
    by_chat: dict[str | None, list[dict]] = {}
    for _, event in sorted(seen, key=lambda pair: pair[1].seq):
        data = {k: paths.value(event.data[k]) for k in EVENT_FIELDS if k in event.data}
        if "files" in data:
            data["files"] = [paths.path(p) for p in event.data["files"]]
        by_chat.setdefault(event.conversation_id, []).append(
            {"seq": event.seq, "type": event.type, "chat": event.conversation_id, "data": data}
        )
    chats = Conversation.objects.all()
    order = {spec.public_id: i for i, spec in enumerate(scenario.chats)}
    ordered = sorted(chats, key=lambda c: (order.get(c.public_id, len(order)), c.pk))
    reports = []
    for chat in ordered:
        shown = _chat_report(
            chat, names.get(chat.public_id, chat.public_id), paths, by_chat, timeline
        )
        shown["presses"] = (presses or {}).get(chat.public_id, [])
        shown["messages"], shown["waits"] = [], []
        if together is not None:
            shown["messages"] = [
                {**paths.value(row), "history": timeline.message_history.get(row["id"], [])}
                for row in together.chat_messages(chat)
            ]
            shown["waits"] = paths.value(together.chat_waits(chat))
        reports.append(shown)
    known = {chat.public_id for chat in ordered}
    other = [e for key, found in by_chat.items() if key not in known for e in found]
    report: dict[str, Any] = {
        "description": scenario.description,
        "ticks": ticks,
        "chats": reports,
        "chains": paths.value(together.chains()) if together is not None else [],
        "other_events": sorted(other, key=lambda e: e["seq"]),
        "files_after": _files_after(Path(paths.root), paths),
    }
    if error:
        report["error"] = error
    return report


def _chat_report(
    chat: Conversation,
    name: str,
    paths: _Paths,
    by_chat: dict[str | None, list[dict]],
    timeline: _Timeline,
) -> dict:
    entries = list(chat.entries.select_related("turn").order_by("seq"))
    replies = []
    for turn in chat.turns.prefetch_related("steps").order_by("number"):
        pending = turn.pending_action or {}
        replies.append(
            {
                "number": turn.number,
                "tick": timeline.reply_ticks.get((chat.public_id, turn.number)),
                "state": turn.state,
                "started_by": turn.started_by,
                "chain": turn.chain_id,
                "lane": turn.lane,
                "end_reason": paths.text(turn.end_reason),
                "waiting_for": (
                    {"tool": pending["tool"], "args": paths.value(pending.get("args", {}))}
                    if turn.state == TurnState.NEEDS_YOU and pending.get("tool")
                    else None
                ),
                "files_changed": [paths.path(p) for p in turn.files_changed],
                "steps": [
                    {
                        "number": step.number,
                        "tool": step.tool,
                        "family": step.family,
                        "effect": step.effect,
                        "args": paths.value(step.args),
                        "result": paths.text(step.result),
                        "error": paths.text(step.error),
                        "files": [paths.path(p) for p in step.files],
                    }
                    for step in sorted(turn.steps.all(), key=lambda s: s.number)
                ],
            }
        )

    def line(entry) -> dict:
        return {
            "reply": entry.turn.number if entry.turn else None,
            "role": entry.role,
            "kind": entry.kind,
            "text": paths.text(entry.text),
        }

    return {
        "name": name,
        "id": chat.public_id,
        "title": chat.title,
        "folder": paths.path(chat.folder),
        "origin": chat.origin,
        "origin_channel": chat.origin_channel,
        "mode": chat.mode,
        "inbound": chat.effective_inbound,
        "taint": chat.taint,
        "status": chat.status,
        "transcript": [line(e) for e in entries],
        "replies": replies,
        "notes": [line(e) for e in entries if e.kind == EntryKind.NOTE],
        "cards": [line(e) for e in entries if e.kind == EntryKind.CARD],
        "events": by_chat.get(chat.public_id, []),
    }


def _files_after(root: Path, paths: _Paths) -> dict[str, str]:
    shown: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(filenames):
            full = os.path.join(dirpath, filename)
            data = Path(full).read_bytes()
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = f"({len(data)} bytes, not text)"
            if len(text) > SHOWN_FILE_LIMIT:
                text = text[:SHOWN_FILE_LIMIT] + f"\n… ({len(text)} characters)"
            shown[paths.path(full)] = paths.text(text)
    return dict(sorted(shown.items()))


def report_json(report: dict) -> str:
    return json.dumps(report, sort_keys=True, indent=2, ensure_ascii=False)


def _indent(text: str, prefix: str) -> str:
    lines = text.splitlines() or [""]
    return "\n".join([lines[0], *(prefix + line for line in lines[1:])])


def _args(args: dict) -> str:
    return json.dumps(args, sort_keys=True, ensure_ascii=False)


def report_text(report: dict) -> str:
    """The readable form: the same facts as the JSON, one chat after another."""
    out: list[str] = []
    head = f"Scenario {report.get('scenario', '')}".rstrip()
    count = len(report["chats"])
    out.append(f"{head}: {count} chat{'s' if count != 1 else ''}, {report['ticks']} ticks")
    if report.get("description"):
        out.append(report["description"])
    if report.get("error"):
        out.append(f"ERROR: {report['error']}")
    for chat in report["chats"]:
        out.append("")
        out.append(f"=== {chat['name']} ({chat['id']}): {chat['title']}")
        origin = chat["origin"] + (f" ({chat['origin_channel']})" if chat["origin_channel"] else "")
        out.append(
            f"folder {chat['folder']} · origin {origin} · mode {chat['mode']} · inbound "
            f"{chat['inbound']} · taint {chat['taint']} · status {chat['status']}"
        )
        out.append("Transcript")
        for entry in chat["transcript"] or []:
            prefix = f"  [{entry['reply'] or '-'}] {entry['role']} {entry['kind']}: "
            out.append(prefix + _indent(entry["text"], " " * len(prefix)))
        if not chat["transcript"]:
            out.append("  (empty)")
        out.append("Replies")
        for reply in chat["replies"]:
            tick = "" if reply.get("tick") is None else f" at tick {reply['tick']}"
            out.append(
                f"  reply {reply['number']} · {reply['state']} · started by "
                f"{reply['started_by']}{tick} · chain {reply['chain']} · lane {reply['lane']}"
            )
            if reply["end_reason"]:
                out.append(f"    why: {_indent(reply['end_reason'], '         ')}")
            for step in reply["steps"]:
                out.append(
                    f"    step {step['number']} · {step['tool']} · {step['family'] or '-'}"
                    f" · {step['effect']}"
                )
                out.append(f"      args: {_args(step['args'])}")
                if step["result"]:
                    out.append(f"      result: {_indent(step['result'], '        | ')}")
                if step["error"]:
                    out.append(f"      error: {_indent(step['error'], '        | ')}")
                if step["files"]:
                    out.append(f"      files: {', '.join(step['files'])}")
            if reply["waiting_for"]:
                waiting = reply["waiting_for"]
                out.append(f"    waiting for your OK: {waiting['tool']} {_args(waiting['args'])}")
            changed = ", ".join(reply["files_changed"]) or "(none)"
            out.append(f"    files changed: {changed}")
        if not chat["replies"]:
            out.append("  (none)")
        for title, key in (("Notes", "notes"), ("Cards", "cards")):
            out.append(title)
            for entry in chat[key]:
                prefix = f"  [{entry['reply'] or '-'}] {entry['role']}: "
                out.append(prefix + _indent(entry["text"], " " * len(prefix)))
            if not chat[key]:
                out.append("  (none)")
        out.extend(_messages_text(chat.get("messages", [])))
        out.extend(_waits_text(chat.get("waits", [])))
        if chat.get("presses"):
            out.append("Presses")
            for press in chat["presses"]:
                out.append(
                    f"  tick {press['at']} · pressed {PRESS_WORDS[press['action']]} · message "
                    f"{press['message']} ({press['id']}) · now {press['state']}"
                )
        out.append("Events")
        for event in chat["events"]:
            out.append(_event_line(event))
    if report.get("chains"):
        out.append("")
        out.append("=== Chains")
        for chain in report["chains"]:
            pairs = ", ".join(f"{p['from']}→{p['to']} {p['count']}" for p in chain["pairs"])
            out.append(
                f"{chain['id']} · messages {chain['messages']} · replies started "
                f"{chain['replies_started']} · pairs: {pairs or '(none)'}"
            )
    if report.get("other_events"):
        out.append("")
        out.append("=== Other events")
        for event in report["other_events"]:
            out.append(_event_line(event))
    out.append("")
    out.append("=== Files after the run")
    for path, text in report["files_after"].items():
        out.append(path)
        for line in text.splitlines() or [""]:
            out.append(f"  | {line}")
    return "\n".join(line.rstrip() for line in out)


def _messages_text(messages: list[dict]) -> list[str]:
    out = ["Messages"]
    for m in messages:
        number = f"#{m['number']} " if m["number"] is not None else ""
        whose = "its" if m["side"] == "to" else "this chat's"
        where = f"read in {whose} reply {m['read_in_reply']}" if m["read_in_reply"] else ""
        extras = [
            m["state"],
            *([where] if where else []),
            *(["start_reply"] if m["start_reply"] else []),
            *(["passed on"] if m["passed_on"] else []),
            f"chain {m['chain']}",
        ]
        out.append(
            f"  {number}{m['id']} · {m['side']} {m['chat']} “{m['title']}” · " + " · ".join(extras)
        )
        out.append(f"    words: {_indent(m['text'], '      | ')}")
        if m["reason"]:
            out.append(f"    why: {m['reason']}")
        history = ", ".join(
            f"{h['state']} (tick {'-' if h['tick'] is None else h['tick']})" for h in m["history"]
        )
        out.append(f"    history: {history or '(none)'}")
    if not messages:
        out.append("  (none)")
    return out


def _waits_text(waits: list[dict]) -> list[str]:
    out = ["Waits"]
    for w in waits:
        ended = f" · {w['headline']}" if w["headline"] else ""
        bare = " · heard only how it ended" if w["bare"] else ""
        out.append(f"  {w['kind']} {w['target']} “{w['title']}” · {w['state']}{ended}{bare}")
    if not waits:
        out.append("  (none)")
    return out


def _event_line(event: dict) -> str:
    data = " ".join(
        f"{k}={json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v}"
        for k, v in sorted(event["data"].items())
    )
    return f"  #{event['seq']} {event['type']} {event['chat'] or '-'} {data}".rstrip()
