"""A scenario file, read and checked whole before anything is written (format: docs/scenarios.md).

The pydantic models are the format. :func:`scenario_parse` turns their errors
into one line per problem, naming the chat (``chat "fix"``, or ``chats[1]``
when it has no name of its own) and the field's path inside it
(``messages[0].at``).
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import posixpath
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StrictInt,
    StrictStr,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from chats.engines.scripted import ScriptError, validate_script
from chats.models import Conversation, Inbound, Mode, Origin, Taint
from chats.tools.registry import all_tools

MAX_TICKS = 10_000
FILE_LIMIT = 1_000_000
PAGE_LIMIT = 1_000_000
TITLE_LIMIT = Conversation._meta.get_field("title").max_length
NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,29}$"  # c_<name> fits a public_id (32)
MESSAGE_TOOL = "message_chat"
PRESS_WORDS = {"pass": "Pass it on", "dismiss": "Dismiss"}
ROOT_WORDS = "the run's root folder"

ERR_NOT_AN_OBJECT = "The scenario must be a JSON object."
ERR_PRESS_SHAPE = (
    'must be {"at": tick, "pass": N} or {"at": tick, "dismiss": N}: the person presses '
    "Pass it on or Dismiss on the Nth message that came to this chat"
)
ERR_PRESS_NOT_HOLD = (
    "presses are only for a chat whose inbound is hold: only a held message waits for "
    "Pass it on or Dismiss"
)
ERR_PRESSED_TWICE = (
    "message {number} is already pressed by presses[{first}]; a held message is pressed once."
)
ERR_NEVER_COMES = (
    "message {number} can never come: the scripts send this chat {most} message{s} "
    "(message_chat with chat {public_id})."
)
ERR_NAME_TWICE = 'the name "{name}" is already used by chats[{first}].'
ERR_NO_SUCH_CHAT = 'there is no chat named "{name}" (the chats are {names}).'
ERR_ACTION_SHAPE = 'must be an object {{"at": tick, "do": ...}}, "do" one of {dos}'
ERR_KILL_DEAD = (
    "the runner is already dead at tick {at} (killed by actions[{killed}] at tick {when}); "
    "restart it first (do: restart, at a later tick)."
)
ERR_KILL_TWICE = "the runner is killed once a tick; actions[{first}] already kills it at tick {at}."
ERR_CLOCK = "must move the clock forward by more than 0 and at most {most} days (got {got})."
CLOCK_MOST = dt.timedelta(days=400)
ERR_FOLDER_IN_THE_WAY = "its folder {folder!r} is in the way of the seeded file {path!r}."

# How a problem's line is put together (see _line):
SAYS = "scenario"  # "<path>: <text>"
CONTINUES = "scenario_continues"  # "<path> <text>": the text goes on from the path ("must be …")
NAMES_ITS_PLACE = "scenario_line"  # "<chat>: <text>": the text names its own place in the chat


class ScenarioError(Exception):
    """A scenario that can't be played; the message lists every problem found."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        if len(self.problems) == 1:
            super().__init__(self.problems[0])
        else:
            lines = "\n".join(f"- {p}" for p in self.problems)
            super().__init__(f"The scenario has {len(self.problems)} problems:\n{lines}")


def _problem(kind: str, text: str) -> PydanticCustomError:
    # The text goes in as a value, not a template: it may hold braces ({"at": tick, …}).
    return PydanticCustomError(kind, "{text}", {"text": text})


def _problems(found: Sequence[tuple[tuple[str | int, ...], str, str, Any]]) -> None:
    """Raise every problem found at once: (where, under the field; kind; text; the value)."""
    if found:
        raise ValidationError.from_exception_data(
            "Scenario",
            [
                InitErrorDetails(type=_problem(kind, text), loc=loc, input=value)
                for loc, kind, text, value in found
            ],
        )


# ---------------------------------------------------------------------------
# Paths


def _lexical(base: str, path: str) -> str | None:
    """``path`` joined to ``base`` and normalised, or None if it leaves ``base``."""
    joined = posixpath.normpath(posixpath.join(base, path))
    if base == ".":
        return None if joined == ".." or joined.startswith("../") else joined
    return joined if joined == base or joined.startswith(base + "/") else None


def path_problem(path: Any, base: str, *, within: str = "") -> str | None:
    """Why ``path`` can't be used inside ``base`` (read lexically), or None if it can."""
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


def _under_root(path: str) -> str:
    problem = path_problem(path, ".", within=ROOT_WORDS)
    if problem:
        raise _problem(SAYS, f"the path {problem}.")
    return posixpath.normpath(path)


def _a_file(path: str) -> str:
    if path == ".":
        raise _problem(SAYS, "the path is the root folder itself, not a file.")
    return path


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


def _page_path(path: str) -> str:
    if not path.startswith("/") or "?" in path or "#" in path:
        raise _problem(SAYS, "a page's path starts with / (no ? or #).")
    if any(ch.isspace() or ord(ch) < 32 for ch in path):
        raise _problem(SAYS, "a page's path has no spaces.")
    return path


# ---------------------------------------------------------------------------
# The format

Tick = Annotated[StrictInt, Field(ge=0, description="a whole number of ticks, 0 or more")]
MessageNumber = Annotated[
    StrictInt,
    Field(ge=1, description="a message's number, 1 for the first that came to this chat"),
]
RootPath = Annotated[str, AfterValidator(_under_root)]
FilePath = Annotated[RootPath, AfterValidator(_a_file)]
FileText = Annotated[
    StrictStr, Field(max_length=FILE_LIMIT, description=f"text, up to {FILE_LIMIT:,} characters")
]
PagePath = Annotated[str, AfterValidator(_page_path)]
PageText = Annotated[
    StrictStr, Field(max_length=PAGE_LIMIT, description=f"text, up to {PAGE_LIMIT:,} characters")
]
Words = Annotated[StrictStr, Field(pattern=r"\S", description="some words")]


class Message(BaseModel):
    """The person's message to a chat, sent at tick ``at``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: Tick
    text: Words


class Press(BaseModel):
    """The person's press on a held card: Pass it on or Dismiss on the chat's Nth incoming message."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: Tick
    pass_: MessageNumber | None = Field(default=None, alias="pass")
    dismiss: MessageNumber | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_button(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise _problem(CONTINUES, f"{ERR_PRESS_SHAPE}.")
        unknown = sorted(set(data) - {"at", *PRESS_WORDS})
        buttons = [key for key in PRESS_WORDS if key in data]
        if unknown or "at" not in data or len(buttons) != 1:
            wrong = f" (unknown field {', '.join(map(repr, unknown))})" if unknown else ""
            raise _problem(CONTINUES, f"{ERR_PRESS_SHAPE}{wrong}.")
        return data

    @property
    def action(self) -> Literal["pass", "dismiss"]:
        return "pass" if self.pass_ is not None else "dismiss"

    @property
    def number(self) -> int:
        number = self.pass_ if self.pass_ is not None else self.dismiss
        assert number is not None  # _one_button saw to it
        return number


class ActionBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    at: Tick


class OnAChat(ActionBase):
    chat: Annotated[StrictStr, Field(description="the name of one of the scenario's chats")]


class Kill(OnAChat):
    """The runner dies during ``chat``'s action at this tick, as a crash would leave it.

    ``cut``: ``after`` (the default) the action's tool ran and its result was never
    written; ``before`` its step was written and the tool never ran; ``intake`` the
    runner died while the reply took in what came to it (messages from other chats, the
    reader's lines), before their notes were written. Nothing plays until a ``restart``.
    """

    do: Literal["kill"]
    cut: Literal["before", "after", "intake"] = "after"


class Restart(ActionBase):
    """A fresh runner starts, as ``conch serve`` starts one: recovery, room for tasks,
    then every sweep once."""

    do: Literal["restart"]


class Clock(ActionBase):
    """The play's clock moves forward ``by`` (ISO 8601 ``PT10M``, ``P3D``, or seconds);
    every sweep whose period passed on the play's clock runs."""

    do: Literal["clock"]
    by: Annotated[
        dt.timedelta,
        Field(description="a duration: ISO 8601 (PT30S, PT10M, P3D) or a number of seconds"),
    ]

    @field_validator("by")
    @classmethod
    def _forward(cls, by: dt.timedelta) -> dt.timedelta:
        if not dt.timedelta(0) < by <= CLOCK_MOST:
            raise _problem(CONTINUES, ERR_CLOCK.format(most=CLOCK_MOST.days, got=by))
        return by


class Delete(OnAChat):
    """The person deletes the chat (``conversation_delete``)."""

    do: Literal["delete"]


class Approve(OnAChat):
    """The person presses Approve on the step the chat waits for their OK on."""

    do: Literal["approve"]


class Deny(OnAChat):
    """The person presses Deny on the step the chat waits for their OK on."""

    do: Literal["deny"]


class SetMode(OnAChat):
    """The person moves the chat to another mode (``conversation_set_mode``)."""

    do: Literal["mode"]
    mode: Mode


class SetInbound(OnAChat):
    """The person changes what the chat does with messages from other chats (``inbound_set``)."""

    do: Literal["inbound"]
    inbound: Inbound


class SomeoneElse(OnAChat):
    """Someone else's words come into the chat, as from a chat app's group: the chat is no
    longer only yours (taint ``person``, Ask mode), and their words are a message to it."""

    do: Literal["someone_else"]
    text: Words
    who: Annotated[StrictStr, Field(min_length=1, max_length=64)] = "someone else"


Action = Annotated[
    Kill | Restart | Clock | Delete | Approve | Deny | SetMode | SetInbound | SomeoneElse,
    Discriminator("do"),
]
ACTIONS: dict[str, type[ActionBase]] = {
    model.model_fields["do"].annotation.__args__[0]: model
    for model in typing.get_args(typing.get_args(Action)[0])
}
ON_A_CHAT = tuple(name for name, model in ACTIONS.items() if issubclass(model, OnAChat))


def _an_action(data: Any) -> Any:
    if not isinstance(data, dict) or data.get("do") not in ACTIONS:
        dos = ", ".join(ACTIONS)
        shown = f" (got do {data.get('do')!r})" if isinstance(data, dict) else ""
        raise _problem(CONTINUES, ERR_ACTION_SHAPE.format(dos=dos) + shown + ".")
    return data


def _registered_tools(names: list[str]) -> list[str]:
    known = {tool.name for tool in all_tools()}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise _problem(SAYS, f"{', '.join(map(repr, unknown))}: no tool has that name.")
    return names


ToolNames = Annotated[list[StrictStr], AfterValidator(_registered_tools)]


class PersonaSpec(BaseModel):
    """The persona the scenario's chats use: its own folder and its tools for other people."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    folder: RootPath
    stranger_tools: ToolNames = Field(default_factory=list)
    stranger_tools_ask_first: ToolNames = Field(default_factory=list)


class ChatSpec(BaseModel):
    """One of the scenario's chats. Its id is ``c_<name>``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[
        StrictStr,
        Field(
            pattern=NAME_PATTERN,
            description=(
                "a short slug (a lowercase letter, then up to 29 lowercase letters, digits, - or _)"
            ),
        ),
    ]
    title: Annotated[
        str,
        StringConstraints(strict=True, strip_whitespace=True, min_length=1, max_length=TITLE_LIMIT),
        Field(description=f"text of 1 to {TITLE_LIMIT} characters"),
    ]
    # Normalised, relative to the run's root; "." is the root itself.
    folder: RootPath
    # Whose chat it is: the person's (the owner), or a second person's, whose chats are
    # never the person's ("yours") whatever else they are.
    person: Annotated[
        Literal["owner", "second"],
        Field(description="owner (the person's own chat) or second (a second person's)"),
    ] = "owner"
    # A gateway session's key (agent:main:dm:telegram:alice): the gateway's maintenance
    # prunes and compacts only sessions.
    session_key: Annotated[
        StrictStr | None,
        Field(
            description="a gateway session's key, 1 to 512 characters", min_length=1, max_length=512
        ),
    ] = None
    origin: Origin = Origin.OWN
    origin_channel: StrictStr = Field(default="", validate_default=True)  # chat_app needs one
    inbound: Inbound | None = None  # unset, which means accept
    mode: Mode = Mode.AUTO
    taint: Taint = Taint.NONE
    script: list[list[dict[str, Any]]]
    messages: list[Message] = Field(
        default_factory=list, description='a list of {"at": tick, "text": "..."}'
    )
    presses: list[Press] = Field(default_factory=list)

    @property
    def public_id(self) -> str:
        return f"c_{self.name}"

    @field_validator("origin_channel")
    @classmethod
    def _channel_for_a_chat_app(cls, channel: str, info: ValidationInfo) -> str:
        origin = info.data.get("origin")
        if origin == Origin.CHAT_APP and not 0 < len(channel) <= 32:
            raise _problem(NAMES_ITS_PLACE, "origin chat_app needs origin_channel (e.g. telegram).")
        if origin not in (None, Origin.CHAT_APP) and channel:
            raise _problem(NAMES_ITS_PLACE, "origin_channel is only for origin chat_app.")
        return channel

    @field_validator("script", mode="before")
    @classmethod
    def _playable_inside_the_folder(cls, script: Any, info: ValidationInfo) -> Any:
        try:
            validate_script(script, where="script")  # the scripted engine's own check
        except ScriptError as exc:
            raise _problem(NAMES_ITS_PLACE, str(exc)) from None
        folder = info.data.get("folder")
        if folder is None:
            return script  # the folder's own problem is reported
        found = []
        for r, reply in enumerate(script):
            for a, action in enumerate(reply):
                if "tool" not in action:
                    continue
                for where, path in _paths_in(action.get("args", {})):
                    problem = path_problem(path, folder)
                    if problem:
                        text = f"script[{r}][{a}] ({action['tool']}) {where}: the path {problem}."
                        found.append(((r, a), NAMES_ITS_PLACE, text, path))
        _problems(found)
        return script

    @field_validator("presses", mode="before")
    @classmethod
    def _a_list_of_presses(cls, presses: Any) -> Any:
        if not isinstance(presses, list):
            raise _problem(CONTINUES, f"{ERR_PRESS_SHAPE}, in a list.")
        return presses

    @field_validator("presses")
    @classmethod
    def _each_held_message_pressed_once(
        cls, presses: list[Press], info: ValidationInfo
    ) -> list[Press]:
        if presses and "inbound" in info.data and info.data["inbound"] != Inbound.HOLD:
            inbound = info.data["inbound"] or "unset"
            raise _problem(NAMES_ITS_PLACE, f"{ERR_PRESS_NOT_HOLD} (its inbound is {inbound}).")
        first_on: dict[int, int] = {}
        found = []
        for p, press in enumerate(presses):
            if press.number in first_on:
                text = ERR_PRESSED_TWICE.format(number=press.number, first=first_on[press.number])
                found.append(((p,), SAYS, text, press.number))
            first_on.setdefault(press.number, p)
        _problems(found)
        return presses


class Scenario(BaseModel):
    """A scenario: chats played together, tick by tick, in this order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: Annotated[StrictStr, Field(description="text")] = ""
    max_ticks: Annotated[
        StrictInt, Field(ge=1, le=MAX_TICKS, description=f"a whole number from 1 to {MAX_TICKS}")
    ] = MAX_TICKS
    files: dict[FilePath, FileText] = Field(
        default_factory=dict,
        description='an object mapping paths to their text: {"a/b.py": "..."}',
    )
    # Web pages for fetch_page, served on loopback while the scenario plays (pages.py).
    pages: dict[PagePath, PageText] = Field(
        default_factory=dict,
        description='an object mapping paths to their text: {"/a.html": "..."}',
    )
    # The default persona's folder and tool set for chats with other people (none: words only).
    persona: PersonaSpec | None = None
    chats: list[ChatSpec] = Field(min_length=1, description="a non-empty list of chats")
    # What else happens, tick by tick: the runner killed and restarted, the clock moved,
    # the person's presses and changes to a chat, someone else's words (below).
    actions: list[Annotated[Action, BeforeValidator(_an_action)]] = Field(
        default_factory=list, description='a list of {"at": tick, "do": ...}'
    )

    @field_validator("files")
    @classmethod
    def _folders_are_not_files(cls, files: dict[str, str]) -> dict[str, str]:
        found = []
        for path in files:
            parent = posixpath.dirname(path)
            while parent not in ("", "."):
                if parent in files:
                    text = f"{parent!r} is seeded as a file, not a folder."
                    found.append(((path,), SAYS, text, path))
                parent = posixpath.dirname(parent)
        _problems(found)
        return files

    @model_validator(mode="after")
    def _across_chats(self) -> Scenario:
        """What no one chat can check alone; checked once every chat is well formed."""
        found: list[tuple[tuple[str | int, ...], str, str, Any]] = []
        first_with: dict[str, int] = {}
        for i, spec in enumerate(self.chats):
            if spec.name in first_with:
                text = ERR_NAME_TWICE.format(name=spec.name, first=first_with[spec.name])
                found.append((("chats", i), NAMES_ITS_PLACE, text, spec.name))
            first_with.setdefault(spec.name, i)
            blocker = next(
                (p for p in self.files if spec.folder == p or spec.folder.startswith(p + "/")),
                None,
            )
            if blocker:
                text = ERR_FOLDER_IN_THE_WAY.format(folder=spec.folder, path=blocker)
                found.append((("chats", i), NAMES_ITS_PLACE, text, spec.folder))
        scripted = self.messages_scripted_to()
        for i, spec in enumerate(self.chats):
            most = scripted.get(spec.public_id, 0)
            for p, press in enumerate(spec.presses):
                if press.number > most:
                    text = ERR_NEVER_COMES.format(
                        number=press.number,
                        most=most,
                        s="s" if most != 1 else "",
                        public_id=spec.public_id,
                    )
                    found.append((("chats", i, "presses", p, press.action), SAYS, text, press))
        found.extend(self._actions_problems())
        _problems(found)
        return self

    def _actions_problems(self) -> list[tuple[tuple[str | int, ...], str, str, Any]]:
        """Each action names a chat of the scenario; the runner is killed only while alive."""
        found: list[tuple[tuple[str | int, ...], str, str, Any]] = []
        names = [spec.name for spec in self.chats]
        for a, action in enumerate(self.actions):
            if isinstance(action, OnAChat) and action.chat not in names:
                text = ERR_NO_SUCH_CHAT.format(name=action.chat, names=", ".join(names))
                found.append((("actions", a, action.do, "chat"), SAYS, text, action.chat))
        killed: tuple[int, int] | None = None  # (which action, its tick) while dead
        kills_at: dict[int, int] = {}
        for a, action in sorted(enumerate(self.actions), key=lambda pair: pair[1].at):
            if isinstance(action, Restart) and killed is not None and action.at > killed[1]:
                killed = None
            if not isinstance(action, Kill):
                continue
            if action.at in kills_at:
                text = ERR_KILL_TWICE.format(first=kills_at[action.at], at=action.at)
                found.append((("actions", a, "kill"), SAYS, text, action.at))
            elif killed is not None:
                text = ERR_KILL_DEAD.format(at=action.at, killed=killed[0], when=killed[1])
                found.append((("actions", a, "kill"), SAYS, text, action.at))
            kills_at.setdefault(action.at, a)
            killed = killed or (a, action.at)
        return found

    def messages_scripted_to(self) -> dict[str, int]:
        """How many message_chat calls in the scripts name each chat: the most that can come to it."""
        counts: dict[str, int] = {}
        for spec in self.chats:
            for reply in spec.script:
                for action in reply:
                    if action.get("tool") == MESSAGE_TOOL:
                        target = action.get("args", {}).get("chat")
                        counts[target] = counts.get(target, 0) + 1
        return counts

    def as_data(self) -> dict[str, Any]:
        """The scenario as JSON data that reads back as the same scenario (for the child process)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


# ---------------------------------------------------------------------------
# Reading


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


def scenario_parse(data: Any) -> Scenario:
    """Check a scenario's data; raise ScenarioError listing every problem, one line each."""
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError([_line(error, data) for error in exc.errors()]) from None


# ---------------------------------------------------------------------------
# Saying what's wrong


def _line(error: ErrorDetails, data: Any) -> str:
    """One problem as a line: the chat, the field's path inside it, and what is wrong."""
    loc, kind = error["loc"], error["type"]
    if not loc and kind in ("model_type", "model_attributes_type"):
        return ERR_NOT_AN_OBJECT
    label, skip = _chat_label(loc, data)
    text = error.get("ctx", {}).get("text", "")
    if kind == NAMES_ITS_PLACE:
        return _join(label, text)
    if kind in ("missing", "extra_forbidden"):
        path, _, _ = _walk(loc[:-1], skip)
        field = loc[-1]
        if kind == "missing":
            return _join(label, path, f"missing field {field!r}.")
        model = _walk(loc[:-1], 0)[1]
        expected = ", ".join(sorted(_fields(model))) if model is not None else ""
        if not label and not path:
            return f"unknown field {field!r} at the top; expected {expected}."
        return _join(label, path, f"unknown field {field!r}; expected {expected}.")
    path, shape, info = _walk(loc, skip)
    if kind == SAYS:
        return _join(label, path, text)
    if kind == CONTINUES:
        return _goes_on(label, path, text)
    got = f"(got {_shown(error['input'])})"
    if kind == "enum" and isinstance(shape, type) and issubclass(shape, enum.Enum):
        choices = ", ".join(choice.value for choice in shape)
        return _goes_on(label, path, f"must be one of {choices} {got}.")
    if info is not None and info.description:
        return _goes_on(label, path, f"must be {info.description} {got}.")
    if kind in ("model_type", "model_attributes_type"):
        return _goes_on(label, path, f"must be an object {got}.")
    message = error["msg"][:1].lower() + error["msg"][1:]
    return _join(label, path, f"{message} {got}.")


def _join(label: str, *parts: str) -> str:
    return ": ".join(part for part in (label, *parts) if part)


def _goes_on(label: str, path: str, text: str) -> str:
    """``chat "a": messages[0].at must be …``, or ``chats[1] must be …`` for the chat itself."""
    return _join(label, f"{path} {text}") if path else f"{label} {text}"


def _chat_label(loc: tuple, data: Any) -> tuple[str, int]:
    """``chat "fix"`` for a problem inside a chat with a name of its own (else ``chats[1]``),
    and how much of ``loc`` that label says."""
    if len(loc) < 2 or loc[0] != "chats" or not isinstance(loc[1], int):
        return "", 0
    raw = data.get("chats") if isinstance(data, dict) else None
    names = [c.get("name") if isinstance(c, dict) else None for c in raw or []]
    name = names[loc[1]] if loc[1] < len(names) else None
    if isinstance(name, str) and name and names.count(name) == 1:
        return f'chat "{name}"', 2
    return f"chats[{loc[1]}]", 2


def _fields(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def _unwrap(shape: Any) -> tuple[Any, FieldInfo | None]:
    """The type under Annotated[...] and Optional[...], and the Field(...) it was given."""
    info = None
    while True:
        if typing.get_origin(shape) is Annotated:
            shape, *extras = typing.get_args(shape)
            info = next((e for e in extras if isinstance(e, FieldInfo)), info)
        elif typing.get_origin(shape) in (typing.Union, type(int | None)):
            members = [arg for arg in typing.get_args(shape) if arg is not type(None)]
            if len(members) > 1:
                return shape, info  # a tagged union: the tag in the path picks the member
            shape = members[0]
        else:
            return shape, info


def _walk(loc: tuple, skip: int) -> tuple[str, Any, FieldInfo | None]:
    """Follow ``loc`` through the models: its path as written (after the first ``skip``
    parts), the type found there, and the field that declared it."""
    shape: Any = Scenario
    info: FieldInfo | None = None
    path = ""
    for n, part in enumerate(loc):
        if part == "[key]":  # a problem with a key, not its value
            break
        if typing.get_origin(shape) in (typing.Union, type(int | None)):
            if part in ACTIONS:  # an action's "do": not part of the path as written
                shape = ACTIONS[part]
            continue
        if isinstance(shape, type) and issubclass(shape, BaseModel):
            by_alias = {info.alias or name: info for name, info in shape.model_fields.items()}
            info = by_alias.get(part)
            shape, extra = _unwrap(info.annotation if info else None)
            if info is not None and extra is not None:
                info = extra
            shown = f".{part}"
        else:
            args = typing.get_args(shape)
            shape, info = _unwrap(args[-1] if args else None)
            shown = f"[{part}]" if isinstance(part, int) else f"[{part!r}]"
        if n >= skip:
            path += shown
    return path.removeprefix("."), shape, info


def _shown(value: Any) -> str:
    if isinstance(value, str) and len(value) > 60:
        return f"{len(value):,} characters"
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"
