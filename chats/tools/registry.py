"""The tool registry: every tool's name, arguments, family, effect and who may have it.

A tool's arguments are described by JSON Schema and checked by ``jsonschema``.

Apps register their tools and their families' words when they are ready
(``chats.hooks.register_tool``, ``chats.hooks.family_add``); ``chats`` never
imports ``together``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from jsonschema.protocols import Validator

from chats.models import Effect, Mode
from chats.toolsets import tool_set_for

if TYPE_CHECKING:
    from chats.models import Agent, Conversation, Task, Turn


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
# The families whose tools read, write or run in the chat's folder.
FOLDER_FAMILIES = (READING_FILES, EDITING_FILES, RUNNING_A_COMMAND)

ERR_UNKNOWN_FAMILY = "{tool}: its family {family!r} is not registered (chats.hooks.family_add)."

# The words a running step may show, each with what a chat whose tools are of that
# family can do, for the chat's header ("It can read files, run commands…"). An app
# adds its own before registering its tools.
_families: dict[str, str] = {
    READING_FILES: "read files",
    EDITING_FILES: "edit files",
    RUNNING_A_COMMAND: "run commands",
    BROWSING: "read web pages",
}


def family_add(family: str, *, can: str = "") -> None:
    """Let tools use ``family``: the words the chat list shows while one of them runs, and
    ``can``, what the chat's header says a chat with such a tool can do."""
    _families[family] = can or family


def abilities(tools: list[Tool]) -> list[str]:
    """What a chat offered ``tools`` can do, in plain words, each once, in the families' order."""
    order = {family: n for n, family in enumerate(_families)}
    families = sorted({tool.family for tool in tools}, key=lambda f: order.get(f, len(order)))
    return [_families.get(family, family) for family in families]


@dataclass
class ToolContext:
    """What a running tool may know about where it runs."""

    conversation: Conversation
    turn: Turn
    folder: str
    # Set by tools: files changed (full paths), and whether the reply lets go of its turn
    # (``wait_for``): the reply then ends, and carries on when what it waits for is done.
    files_changed: list[str] = field(default_factory=list)
    # Set by tools that change files: each change as the person sees it (chats.tools.diffs).
    changes: list[dict[str, Any]] = field(default_factory=list)
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
    # Set by the runtime from the chat's tool set: commands run in the sandbox or not
    # at all (a chat with someone else's words), whatever CONCH_SANDBOX says.
    sandbox_required: bool = False
    # Set by a tool whose writes must commit with the step's end, never before it
    # (``wait_for``: the wait and the reply letting go are one transaction, so a crash
    # between them can't leave a wait whose reply is played again). The runtime calls it
    # in the step's last transaction, holding the chat's lock, only while the reply is
    # still this runner's; its ToolResult is the step's, a ToolError refuses the step.
    at_step_end: Callable[[], ToolResult] | None = None


@dataclass(frozen=True)
class ToolResult:
    text: str
    files_changed: tuple[str, ...] = ()


Offered = Callable[["Conversation"], bool]
Runner = Callable[[ToolContext, dict[str, Any]], ToolResult]
# What the tool would do, for the person to see before their OK (chats.tools.diffs' shapes).
Previewer = Callable[[ToolContext, dict[str, Any]], dict[str, Any]]


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
    # Shows what it would do (a diff, a new file's words, a command and its folder).
    preview: Previewer | None = None
    # Works in the chat's folder though its family doesn't say so (an MCP server's command).
    in_folder: bool = False

    def must_ask(self, conversation: Conversation) -> bool:
        if self.name in tool_set_for(conversation).ask_first:
            return True  # the persona asks the owner first before this tool runs for other people
        if self.asks_first is not None:
            return self.asks_first(conversation)
        return self.asks_in_ask_mode and conversation.mode == Mode.ASK

    def as_function_spec(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.schema}


_tools: dict[str, Tool] = {}

# Tools that are a persona's own rather than Conch's (its MCP servers' tools,
# chats.mcp.servers): each provider gives a persona's, named with its prefix, which
# no tool of Conch's may start with, so neither can take the other's name.
ToolProvider = Callable[["Agent"], list[Tool]]
_providers: dict[str, ToolProvider] = {}

ERR_PROVIDED_PREFIX = "{tool}: names starting with {prefix!r} are a persona's own tools."


def tool_provider_add(prefix: str, provider: ToolProvider) -> None:
    """Let ``provider`` give each persona tools of its own, every one named ``prefix…``."""
    for name in _tools:
        if name.startswith(prefix):
            raise ValueError(ERR_PROVIDED_PREFIX.format(tool=name, prefix=prefix))
    _providers[prefix] = provider


def _provided(agent: Agent | None) -> list[Tool]:
    if agent is None or agent.pk is None:
        return []
    return [tool for provider in _providers.values() for tool in provider(agent)]


def is_provided_name(name: str) -> bool:
    """Whether ``name`` is of a persona's own tools (an MCP server's), not one of Conch's."""
    return any(name.startswith(prefix) for prefix in _providers)


def register(tool: Tool) -> Tool:
    for prefix in _providers:
        if tool.name.startswith(prefix):
            raise ValueError(ERR_PROVIDED_PREFIX.format(tool=tool.name, prefix=prefix))
    if tool.effect not in Effect.values:
        raise ValueError(f"{tool.name}: effect must be one of {', '.join(Effect.values)}")
    if tool.schema.get("type") != "object":
        raise ValueError(f"{tool.name}: the schema must describe an object")
    if tool.family not in _families:
        raise ValueError(ERR_UNKNOWN_FAMILY.format(tool=tool.name, family=tool.family))
    _validator(tool)  # a schema jsonschema can't read is refused now, not at the first call
    _tools[tool.name] = tool
    return tool


def get_tool(name: str, agent: Agent | None = None) -> Tool:
    """Conch's tool called ``name``, or, given the persona, one of its own (an MCP server's)."""
    found = _tools.get(name)
    if found is None and is_provided_name(name):
        found = next((tool for tool in _provided(agent) if tool.name == name), None)
    if found is None:
        raise UnknownTool(f"There is no tool called {name!r}.")
    return found


def all_tools() -> list[Tool]:
    """Conch's own tools, each persona's own (its MCP servers') left out."""
    return [_tools[name] for name in sorted(_tools)]


def tools_offered(conversation: Conversation) -> list[Tool]:
    """The tools this chat is offered now: the persona's set for it, the mode, each tool's rule."""
    allowed = tool_set_for(conversation)
    offered = []
    for tool in [*all_tools(), *_provided(conversation.agent)]:
        if not allowed.allows(tool.name):
            continue
        if conversation.mode == Mode.PLAN and tool.effect == Effect.WRITE:
            continue
        if not tool.offered(conversation):
            continue
        offered.append(tool)
    return offered


# Tool arguments are checked by jsonschema (Draft 2020-12), one validator per tool,
# built when first needed. JSON has one kind of number; Python's json gives an int
# for ``3`` and a float for ``3.0``, and the tools index and slice with "integer"
# arguments, so an "integer" here is an int, as it was before jsonschema.
_ArgsValidator = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)
_validators: dict[str, tuple[dict[str, Any], Validator]] = {}

ERR_NOT_AN_OBJECT = "{tool}: arguments must be an object."
ERR_MISSING = "{tool}: missing argument {name!r}."
ERR_UNKNOWN = "{tool}: unknown argument {name!r}."
ERR_ARGUMENT = "{tool}: argument {name!r} {problem}."
ERR_ARGUMENTS = "{tool}: the arguments are not valid: {why}"
ERR_BAD_SCHEMA = "{tool}: the schema is not valid JSON Schema: {why}"
ERR_BAD_DEFAULT = "{tool}: the default of {name!r} does not fit its own schema: {why}"

# What each keyword asks of a value, in words a model can act on.
_PROBLEMS: dict[str, Callable[[Any], str]] = {
    "type": lambda want: "must be " + (" or ".join(want) if isinstance(want, list) else want),
    "enum": lambda want: "must be one of " + ", ".join(repr(v) for v in want),
    "const": lambda want: f"must be {want!r}",
    "minLength": lambda n: "must not be empty" if n == 1 else f"must be at least {n} characters",
    "maxLength": lambda n: f"is longer than {n} characters",
    "pattern": lambda pattern: f"must match the pattern {pattern!r}",
    "format": lambda name: f"must be a valid {name}",
    "minimum": lambda n: f"must be at least {n}",
    "maximum": lambda n: f"must be at most {n}",
    "exclusiveMinimum": lambda n: f"must be more than {n}",
    "exclusiveMaximum": lambda n: f"must be less than {n}",
    "multipleOf": lambda n: f"must be a multiple of {n}",
    "minItems": lambda n: "must not be empty" if n == 1 else f"must have at least {n} items",
    "maxItems": lambda n: f"must have at most {n} items",
    "uniqueItems": lambda _: "must not hold the same item twice",
    "minProperties": lambda n: f"must have at least {n} keys",
    "maxProperties": lambda n: f"must have at most {n} keys",
}
# Which of several errors is named: the shallowest, and among those a missing
# argument, then an unknown one, then the rest in the schema's order.
_FIRST = {"required": 0, "additionalProperties": 1}


def schema_problem(schema: Any) -> str:
    """Why ``schema`` can't describe a tool's arguments, in words; "" when it can.

    For schemas Conch did not write (an MCP server's): such a tool is not offered.
    """
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "its schema does not describe an object"
    try:
        _ArgsValidator.check_schema(schema)
    except SchemaError as exc:
        return f"its schema is not valid JSON Schema: {exc.message}"
    name, problem = _default_problem(schema, _ArgsValidator(schema))
    if problem:
        return f"the default of {name!r} does not fit its own schema: {problem}"
    return ""


def _default_problem(schema: dict[str, Any], validator: Validator) -> tuple[str, str]:
    """The first argument whose default its own schema refuses, and why; ("", "") if none."""
    properties = schema.get("properties", {})
    for name, spec in (properties if isinstance(properties, dict) else {}).items():
        if isinstance(spec, dict) and "default" in spec:
            problem = best_match(validator.evolve(schema=spec).iter_errors(spec["default"]))
            if problem is not None:
                return str(name), problem.message
    return "", ""


def _validator(tool: Tool) -> Validator:
    """The tool's validator, checked and built once for each schema it is given."""
    cached = _validators.get(tool.name)
    if cached is not None and cached[0] is tool.schema:
        return cached[1]
    try:
        _ArgsValidator.check_schema(tool.schema)
    except SchemaError as exc:
        raise ValueError(ERR_BAD_SCHEMA.format(tool=tool.name, why=exc.message)) from None
    validator = _ArgsValidator(tool.schema, format_checker=_ArgsValidator.FORMAT_CHECKER)
    name, problem = _default_problem(tool.schema, validator)
    if problem:
        raise ValueError(ERR_BAD_DEFAULT.format(tool=tool.name, name=name, why=problem))
    _validators[tool.name] = (tool.schema, validator)
    return validator


def _argument_path(path: Any) -> str:
    """``["items", 2, "path"]`` as ``items[2].path``."""
    words = ""
    for part in path:
        words += f"[{part}]" if isinstance(part, int) else (f".{part}" if words else str(part))
    return words


def _within(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _in_words(tool: Tool, error: ValidationError) -> str:
    """The error as the assistant reads it, naming the argument by its path."""
    path = _argument_path(error.absolute_path)
    keyword = error.validator
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if keyword == "required" and isinstance(error.instance, dict):
        wanted = error.validator_value if isinstance(error.validator_value, list) else []
        missing = next((n for n in wanted if n not in error.instance), "?")
        return ERR_MISSING.format(tool=tool.name, name=_within(path, missing))
    if keyword == "additionalProperties" and isinstance(error.instance, dict):
        known = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        extra = next(
            (
                n
                for n in error.instance
                if n not in known and not any(re.search(p, n) for p in patterns)
            ),
            "?",
        )
        return ERR_UNKNOWN.format(tool=tool.name, name=_within(path, extra))
    if keyword == "type" and not path:
        return ERR_NOT_AN_OBJECT.format(tool=tool.name)
    words = _PROBLEMS.get(str(keyword))
    problem = words(error.validator_value) if words else f"is not valid: {error.message}"
    if not path:  # a rule about the arguments as a whole
        return ERR_ARGUMENTS.format(tool=tool.name, why=error.message)
    return ERR_ARGUMENT.format(tool=tool.name, name=path, problem=problem)


def validate_args(tool: Tool, args: Any) -> dict[str, Any]:
    """Check ``args`` against the tool's JSON Schema; fill in the defaults it gives.

    Raises :class:`ToolError` naming the first argument at fault by its path.
    """
    if not isinstance(args, dict):
        raise ToolError(ERR_NOT_AN_OBJECT.format(tool=tool.name))
    errors = list(_validator(tool).iter_errors(args))
    if errors:
        first = min(errors, key=lambda e: (len(e.absolute_path), _FIRST.get(str(e.validator), 2)))
        if first.context:  # anyOf, oneOf: the branch that came nearest
            first = best_match([first]) or first
        raise ToolError(_in_words(tool, first))
    cleaned = dict(args)
    for name, spec in tool.schema.get("properties", {}).items():
        if name not in cleaned and isinstance(spec, dict) and "default" in spec:
            cleaned[name] = spec["default"]
    return cleaned
