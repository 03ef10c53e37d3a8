"""Playing a scenario: its chats interleaved one action at a time, in a run of its own.

:func:`scenario_run_isolated` makes a temporary folder and runs ``conch_play
--inner`` in a child process whose ``CONCH_HOME`` is inside it and whose
environment has no ``DATABASE_URL``/``REDIS_URL``, so the play gets a new
SQLite database and never touches the person's own. There
:func:`play_inner` migrates that database (or copies a migrated template),
seeds the files, creates the chats and plays them tick by tick
(:func:`scenario_play`), driving each reply with the runner's own
``drive_one_action``, and prints the report as JSON for the parent.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from django.apps import apps
from django.conf import settings
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from chats import events
from chats.models import Conversation, FolderRoot, TaintCause, counted_ids
from chats.runtime.chats import conversation_create, default_agent
from chats.runtime.runner import drive_one_action, runnable_by_chat
from chats.runtime.turns import message_send, tasks_make_room
from chats.signin import owner_ensure
from chats.taint import Cause
from conch.sqlite3.base import make_private_file
from together.play.actions import (
    PlayRunner,
    action_do,
    inputs_recorded,
    kill_target,
    second_person,
    second_persona,
)
from together.play.pages import pages_served
from together.play.presses import press_make
from together.play.report import RunPaths, report_make
from together.play.scenario import (
    ActionBase,
    ChatSpec,
    Kill,
    PersonaSpec,
    Press,
    Scenario,
    ScenarioError,
    scenario_parse,
)

TEMP_PREFIX = "conch-play-"
WORKER = "conch-play"
SQLITE_HEADER = b"SQLite format 3\x00"

# The person's own stores must never reach the child; it gets its own home.
DROPPED_ENV = (
    "DATABASE_URL",
    "REDIS_URL",
    "CONCH_WORKSPACE",
    "CONCH_TEST_SQLITE",
    "CONCH_TEST_DATABASE_NAME",
)

ERR_INNER = (
    "--inner plays only into a new SQLite database in a run's own temporary folder; "
    "run conch_play without it."
)
ERR_TEMPLATE_FOLDER = "--template {path}: there is no folder {folder}."
ERR_TEMPLATE_NOT_SQLITE = "--template {path} is not an SQLite database."
ERR_TEMPLATE_HOLDS = (
    "--template {path} already holds {what}: give a database Conch has only migrated."
)
ERR_TEMPLATE_UNWRITABLE = "--template {path} can't be written: {why}"
ERR_MESSAGE_TO_DELETED = "a message to {chat} at tick {tick}, but the chat was deleted."
ERR_TOO_LONG = (
    "The scenario did not finish within {ticks} ticks; a reply or a chain of replies may be "
    "looping."
)


# ---------------------------------------------------------------------------
# Running in a child process


def scenario_run_isolated(
    scenario: Scenario, *, keep: bool = False, template: str | Path | None = None
) -> tuple[dict, str]:
    """Play ``scenario`` in a child process with its own home and database.

    Returns the report and the child's stderr (its logs). The temporary
    folder is removed afterwards unless ``keep`` is set. With ``template``
    the play's database starts as a copy of that migrated SQLite file; if
    it doesn't exist yet, the play migrates and saves its database there.
    """
    extra: list[str] = []
    if template is not None:
        template = Path(template).resolve()
        if not template.parent.is_dir():
            raise ScenarioError(ERR_TEMPLATE_FOLDER.format(path=template, folder=template.parent))
        extra = ["--template", str(template)]
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
            [sys.executable, str(manage), "conch_play", "--inner", "--root", str(root), *extra]
            + ["-"],
            input=json.dumps(scenario.as_data()),
            capture_output=True,
            text=True,
            env=env,
            cwd=str(settings.BASE_DIR),
        )
        logs = RunPaths(root).text(child.stderr)
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


def play_inner(*, raw: str, root: str, template: str = "") -> dict:
    """The child's side: check again, start a database that must be new, play, report."""
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
        raise ScenarioError(ERR_INNER)
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"The scenario is not valid JSON: {exc.msg}.") from None
    scenario = scenario_parse(data)
    database_start(Path(str(database["NAME"])), template=Path(template) if template else None)
    with pages_served(scenario) as served:  # the scenario's web pages, on loopback for the run
        return served.unport(scenario_play(served.scenario, root=root_path))


# ---------------------------------------------------------------------------
# The play's database


def database_start(name: Path, *, template: Path | None) -> None:
    """Migrate the play's new database ``name``, or start it as a copy of ``template``.

    Migrating costs more than most plays, so many plays can share one
    template: a template that doesn't exist yet is saved from this play's
    database once it is migrated.
    """
    if template is None or not template.exists():
        call_command("migrate", verbosity=0, interactive=False)
        if template is not None:
            _template_save(name, template)
        return
    with template.open("rb") as head:
        if head.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
            raise ScenarioError(ERR_TEMPLATE_NOT_SQLITE.format(path=template))
    make_private_file(name)
    _sqlite_copy(template, name)
    executor = MigrationExecutor(connection)
    if executor.migration_plan(executor.loader.graph.leaf_nodes()):
        call_command("migrate", verbosity=0, interactive=False)  # older than the code
    for model in apps.get_models():
        # Ids and event numbers start from one only in a database nothing has used.
        if model not in (ContentType, Permission) and model._default_manager.exists():
            what = model._meta.verbose_name_plural
            raise ScenarioError(ERR_TEMPLATE_HOLDS.format(path=template, what=what))


def _template_save(name: Path, template: Path) -> None:
    """Save the migrated database as ``template``, whole or not at all."""
    part = template.with_name(f".{template.name}.{os.getpid()}.part")
    try:
        make_private_file(part)
        _sqlite_copy(name, part)
        os.replace(part, template)
    except (OSError, sqlite3.Error) as exc:
        part.unlink(missing_ok=True)
        raise ScenarioError(ERR_TEMPLATE_UNWRITABLE.format(path=template, why=exc)) from None


def _sqlite_copy(source: Path, target: Path) -> None:
    """Copy an SQLite database through SQLite: consistent, with what its write-ahead log holds."""
    reading, writing = sqlite3.connect(source), sqlite3.connect(target)
    try:
        reading.backup(writing)
    finally:
        writing.close()
        reading.close()


# ---------------------------------------------------------------------------
# Playing


@dataclass
class _Clock:
    """The tick each event was seen at: None while the run is set up, before tick 0."""

    tick: int | None = None
    seen: list[tuple[int | None, events.Event]] = field(default_factory=list)

    def watch(self, event: events.Event) -> None:
        self.seen.append((self.tick, event))


def persona_set(spec: PersonaSpec, root: Path) -> None:
    """Give the default persona the scenario's folder and tools for other people."""
    folder = root / spec.folder
    folder.mkdir(parents=True, exist_ok=True)
    agent = default_agent()
    agent.workspace = str(folder)
    agent.stranger_tools = list(spec.stranger_tools)
    agent.stranger_tools_ask_first = list(spec.stranger_tools_ask_first)
    agent.save(update_fields=["workspace", "stranger_tools", "stranger_tools_ask_first"])


def scenario_play(scenario: Scenario, *, root: Path) -> dict:
    """Seed, create the chats and play them tick by tick; return the report.

    Precondition: a fresh database (ids and event numbers start from one).
    Each tick: do the scenario's actions due at it (a kill is armed for step 5),
    deliver the person's messages due at it, then the person's presses on held
    cards, make room for tasks, then, while the runner is alive, let every chat
    with a runnable reply play exactly one action, the scenario's chats in file
    order and then any made during the run.
    """
    root = Path(os.path.realpath(root))
    clock = _Clock()
    unsubscribe = events.subscribe(clock.watch)
    presses: dict[str, list[dict]] = {spec.public_id: [] for spec in scenario.chats}
    error = ""
    runner: PlayRunner | None = None
    try:
        with counted_ids(), inputs_recorded(default_agent()) as inputs:
            runner = PlayRunner(inputs)
            for path, content in scenario.files.items():
                target = root / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content, encoding="utf-8")
            owner = owner_ensure()
            people = {"owner": owner}
            if any(spec.person == "second" for spec in scenario.chats):
                people["second"] = second_person()
                # As the owner would in the admin: the second person works beneath the run's
                # root, and has a persona of its own (the owner's are never theirs).
                FolderRoot.objects.get_or_create(account=people["second"], path=str(root))
                second_persona(people["second"], root)
            if scenario.persona is not None:
                persona_set(scenario.persona, root)
            chats: list[Conversation] = []
            for spec in scenario.chats:
                folder = root / spec.folder
                folder.mkdir(parents=True, exist_ok=True)
                chats.append(
                    conversation_create(
                        owner=people[spec.person],
                        title=spec.title,
                        folder=str(folder),
                        origin=spec.origin,
                        origin_channel=spec.origin_channel,
                        mode=spec.mode,
                        inbound=spec.inbound or "",
                        script=spec.script,
                        taint=spec.taint,
                        taint_cause=Cause(TaintCause.SETUP),
                        public_id=spec.public_id,
                    )
                )
                if spec.session_key:
                    Conversation.objects.filter(pk=chats[-1].pk).update(
                        session_key=spec.session_key
                    )
            by_name = {spec.name: chat for spec, chat in zip(scenario.chats, chats, strict=True)}
            due: dict[int, list[tuple[Conversation, str]]] = {}
            pressing: dict[int, list[tuple[Conversation, ChatSpec, int, Press]]] = {}
            for chat, spec in zip(chats, scenario.chats, strict=True):
                for message in spec.messages:
                    due.setdefault(message.at, []).append((chat, message.text))
                for index, press in enumerate(spec.presses):
                    pressing.setdefault(press.at, []).append((chat, spec, index, press))
            acting: dict[int, list[tuple[int, ActionBase]]] = {}
            for index, planned in enumerate(scenario.actions):
                acting.setdefault(planned.at, []).append((index, planned))
            last_due = max([*due, *pressing, *acting], default=-1)
            named = [chat.pk for chat in chats]

            tick = 0
            while True:
                clock.tick = inputs.tick = tick
                kill: tuple[int, Kill] | None = None
                for index, action in acting.get(tick, []):
                    if isinstance(action, Kill):
                        kill = (index, action)
                        continue
                    error = action_do(action, index=index, chats=by_name, runner=runner, tick=tick)
                    if error:
                        break
                if error:
                    break
                for chat, text in due.get(tick, []):
                    if not Conversation.objects.filter(pk=chat.pk).exists():
                        error = ERR_MESSAGE_TO_DELETED.format(chat=chat.public_id, tick=tick)
                        break
                    message_send(conversation=chat, text=text)
                if error:
                    break
                for chat, spec, index, press in pressing.get(tick, []):
                    made = presses[spec.public_id]
                    error = press_make(chat=chat, spec=spec, index=index, press=press, made=made)
                    if error:
                        break
                if error:
                    break
                tasks_make_room()
                runnable = runnable_by_chat() if runner.alive else {}
                if kill is not None:
                    _, error = kill_target(kill[1], index=kill[0], chats=by_name, runnable=runnable)
                    if error:
                        break
                if not runnable and tick >= last_due:
                    break
                if tick >= scenario.max_ticks:
                    error = ERR_TOO_LONG.format(ticks=scenario.max_ticks)
                    break
                order = named + sorted(pk for pk in runnable if pk not in named)
                for chat_pk in order:
                    if chat_pk not in runnable:
                        continue
                    if kill is not None and by_name[kill[1].chat].pk == chat_pk:
                        runner.kill_during(
                            turn_id=runnable[chat_pk], cut=kill[1].cut, worker=WORKER
                        )
                        runner.killed.append(
                            {"tick": tick, "chat": kill[1].chat, "cut": kill[1].cut}
                        )
                        break  # the runner is dead: no other chat plays this tick
                    drive_one_action(turn_id=runnable[chat_pk], worker=WORKER)
                tick += 1
    finally:
        unsubscribe()
        if runner is not None:
            runner.stop()
    return report_make(
        scenario,
        root=root,
        ticks=tick,
        seen=clock.seen,
        error=error,
        presses=presses,
        runner=runner,
    )
