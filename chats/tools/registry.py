"""The tool registry: every tool's name, arguments, family, effect and who may have it.

Apps register their tools and their families' words when they are ready
(``chats.hooks.register_tool``, ``chats.hooks.family_add``); ``chats`` never
imports ``together``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chats.models import Effect, Mode

if TYPE_CHECKING:
    from chats.models import Conversation, Task, Turn


class ToolError(Exception):
    """A clear error handed back to the assistant as the tool's result."""


class UnknownTool(ToolError):
    pass


# Families, in Conch's own words: the chat list says "editing files · 40 s".
READING_FILES = "reading files"
EDITING_FILES = "editing files"
RUNNING_A_COMMAND = "running a command"
BROWSING = "reading a web page"
THINKING = "thinking"  # a reply between steps: no tool's family

ERR_UNKNOWN_FAMILY = "{tool}: its family {family!r} is not registered (chats.hooks.family_add)."

# The words a running step may show; an app adds its own before registering its tools.
_families: set[str] = {
    READING_FILES,
    EDITING_FILES,
    RUNNING_A_COMMAND,
    BROWSING,
}


def family_add(family: str) -> None:
    """Let tools use ``family``: the words the chat list shows while one of them runs."""
    _families.add(family)


@dataclass
class ToolContext:
    """What a running tool may know about where it runs."""

    conversation: Conversation
    turn: Turn
    folder: str
    # Set by tools: files changed (full paths), and whether the reply lets go of its turn
    # (``wait_for``): the reply then ends, and carries on when what it waits for is done.
    files_changed: list[str] = field(default_factory=list)
    let_go: str = ""
    # Set by the runtime: the step being run, the runner running it, and what a long
    # tool (a command) asks while it waits: why it must give up now, or "" to go on.
    step_id: int | None = None
    worker: str = ""
    interrupted: Callable[[], str] = field(default=lambda: "")
    # Lent by the runtime, which stands above the tools and is never imported by them:
    # start a task for this chat (``start_background_task``). A refusal is a ToolError,
    # a script that can't be played a ValueError. None outside a running reply.
    start_task: Callable[..., Task] | None = None


@dataclass(frozen=True)
class ToolResult:
    text: str
    files_changed: tuple[str, ...] = ()


Offered = Callable[["Conversation"], bool]
Runner = Callable[[ToolContext, dict[str, Any]], ToolResult]


def offered_always(conversation: Conversation) -> bool:
    return True


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    schema: dict[str, Any]
    family: str
    effect: Effect
    run: Runner
    offered: Offered = offered_always
    # A tool that changes the workspace or acts on the world asks first in Ask mode.
    asks_in_ask_mode: bool = False
    # A tool with its own rule for asking the person first (``stop_chat``); overrides the above.
    asks_first: Callable[[Conversation], bool] | None = None

    def must_ask(self, conversation: Conversation) -> bool:
        if self.asks_first is not None:
            return self.asks_first(conversation)
        return self.asks_in_ask_mode and conversation.mode == Mode.ASK

    def as_function_spec(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.schema}


_tools: dict[str, Tool] = {}


def register(tool: Tool) -> Tool:
    if tool.effect not in Effect.values:
        raise ValueError(f"{tool.name}: effect must be one of {', '.join(Effect.values)}")
    if tool.schema.get("type") != "object":
        raise ValueError(f"{tool.name}: the schema must describe an object")
    if tool.family not in _families:
        raise ValueError(ERR_UNKNOWN_FAMILY.format(tool=tool.name, family=tool.family))
    _tools[tool.name] = tool
    return tool


def get_tool(name: str) -> Tool:
    try:
        return _tools[name]
    except KeyError:
        raise UnknownTool(f"There is no tool called {name!r}.") from None


def all_tools() -> list[Tool]:
    return [_tools[name] for name in sorted(_tools)]


def tools_offered(conversation: Conversation) -> list[Tool]:
    """The tools this chat is offered now: the persona's allowance, the mode, each tool's rule."""
    allowed = set(conversation.agent.allowed_tools or [])
    offered = []
    for tool in all_tools():
        if allowed and tool.name not in allowed:
            continue
        if conversation.mode == Mode.PLAN and tool.effect == Effect.WRITE:
            continue
        if not tool.offered(conversation):
            continue
        offered.append(tool)
    return offered


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def validate_args(tool: Tool, args: Any) -> dict[str, Any]:
    """Check ``args`` against the tool's schema (the subset our tools use).

    Raises :class:`ToolError` naming the argument at fault.
    """
    if not isinstance(args, dict):
        raise ToolError(f"{tool.name}: arguments must be an object.")
    schema = tool.schema
    properties: dict[str, Any] = schema.get("properties", {})
    for required in schema.get("required", []):
        if required not in args:
            raise ToolError(f"{tool.name}: missing argument {required!r}.")
    if schema.get("additionalProperties") is False:
        for name in args:
            if name not in properties:
                raise ToolError(f"{tool.name}: unknown argument {name!r}.")
    cleaned = dict(args)
    for name, value in args.items():
        spec = properties.get(name)
        if spec is None:
            continue
        expected = spec.get("type")
        if expected:
            types = _JSON_TYPES[expected]
            is_bool = isinstance(value, bool)
            if not isinstance(value, types) or (is_bool and expected in ("integer", "number")):
                raise ToolError(f"{tool.name}: argument {name!r} must be {expected}.")
        if "enum" in spec and value not in spec["enum"]:
            choices = ", ".join(repr(v) for v in spec["enum"])
            raise ToolError(f"{tool.name}: argument {name!r} must be one of {choices}.")
        if isinstance(value, str):
            if "maxLength" in spec and len(value) > spec["maxLength"]:
                raise ToolError(
                    f"{tool.name}: argument {name!r} is longer than {spec['maxLength']} characters."
                )
            if spec.get("minLength") and len(value) < spec["minLength"]:
                raise ToolError(f"{tool.name}: argument {name!r} must not be empty.")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if "minimum" in spec and value < spec["minimum"]:
                raise ToolError(
                    f"{tool.name}: argument {name!r} must be at least {spec['minimum']}."
                )
            if "maximum" in spec and value > spec["maximum"]:
                raise ToolError(
                    f"{tool.name}: argument {name!r} must be at most {spec['maximum']}."
                )
    for name, spec in properties.items():
        if name not in cleaned and "default" in spec:
            cleaned[name] = spec["default"]
    return cleaned
