"""Tool arguments are checked by a real JSON Schema validator, nested objects and lists included.

The tools Conch ships take flat arguments; the tools here take nested ones, as a
plug-in's might, so the rules the old hand-written check skipped are pinned down.
"""

from __future__ import annotations

import pytest

from chats.tools import registry
from chats.tools.registry import (
    EDITING_FILES,
    Tool,
    ToolError,
    ToolResult,
    get_tool,
    register,
    validate_args,
)


def _nothing(ctx, args):
    return ToolResult("")


def tool(schema: dict, name: str = "edit_many") -> Tool:
    """A tool that is never registered, so no chat is ever offered it."""
    return Tool(
        name=name,
        description="Edits several files.",
        schema={"type": "object", **schema},
        family=EDITING_FILES,
        effect="write",
        run=_nothing,
    )


EDITS = tool(
    {
        "properties": {
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "minLength": 1},
                        "lines": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                        "options": {
                            "type": "object",
                            "properties": {"all": {"type": "boolean"}},
                            "additionalProperties": False,
                        },
                    },
                    "required": ["path"],
                    "additionalProperties": False,
                },
            },
            "count": {"type": "integer", "default": 1},
            "ratio": {"type": "number"},
            "dry_run": {"type": "boolean", "default": False},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        },
        "required": ["items"],
        "additionalProperties": False,
    }
)


def refusal(args, checked: Tool = EDITS) -> str:
    with pytest.raises(ToolError) as refused:
        validate_args(checked, args)
    return str(refused.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"items": [{"path": "a"}, {"path": "b"}, {"path": 3}]},
            "edit_many: argument 'items[2].path' must be string.",
        ),
        ({"items": [{"path": "a"}, {}]}, "edit_many: missing argument 'items[1].path'."),
        ({"items": [{"path": ""}]}, "edit_many: argument 'items[0].path' must not be empty."),
        ({"items": ["a.txt"]}, "edit_many: argument 'items[0]' must be object."),
        ({"items": {"path": "a"}}, "edit_many: argument 'items' must be array."),
        (
            {"items": [{"path": "a", "lines": [1, "2"]}]},
            "edit_many: argument 'items[0].lines[1]' must be integer.",
        ),
        (
            {"items": [{"path": "a", "lines": [0]}]},
            "edit_many: argument 'items[0].lines[0]' must be at least 1.",
        ),
        (
            {"items": [{"path": "a", "options": {"all": "yes"}}]},
            "edit_many: argument 'items[0].options.all' must be boolean.",
        ),
        ({"items": [], "count": 1}, "edit_many: argument 'items' must not be empty."),
        (
            {"items": [{"path": "a"}] * 4},
            "edit_many: argument 'items' must have at most 3 items.",
        ),
        (
            {"items": [{"path": "a"}], "tags": ["x", 2]},
            "edit_many: argument 'tags[1]' must be string.",
        ),
        (
            {"items": [{"path": "a"}], "tags": ["x", "x"]},
            "edit_many: argument 'tags' must not hold the same item twice.",
        ),
    ],
)
def test_nested_objects_and_lists_are_checked_to_the_bottom_naming_the_path(args, message):
    assert refusal(args) == message


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"items": [{"path": "a", "mode": "r"}]},
            "edit_many: unknown argument 'items[0].mode'.",
        ),
        (
            {"items": [{"path": "a", "options": {"all": True, "force": True}}]},
            "edit_many: unknown argument 'items[0].options.force'.",
        ),
    ],
)
def test_an_unknown_key_in_a_nested_object_is_refused(args, message):
    assert refusal(args) == message


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"count": True}, "edit_many: argument 'count' must be integer."),
        ({"count": 2.0}, "edit_many: argument 'count' must be integer."),
        ({"count": "2"}, "edit_many: argument 'count' must be integer."),
        ({"ratio": False}, "edit_many: argument 'ratio' must be number."),
        ({"dry_run": 1}, "edit_many: argument 'dry_run' must be boolean."),
        ({"dry_run": 0}, "edit_many: argument 'dry_run' must be boolean."),
    ],
)
def test_a_boolean_is_not_a_number_and_a_number_is_not_a_boolean(args, message):
    assert refusal({"items": [{"path": "a"}], **args}) == message


def test_a_missing_argument_is_named_before_a_deeper_fault():
    assert refusal({"tags": [3]}) == "edit_many: missing argument 'items'."


def test_defaults_are_filled_in_and_given_values_kept():
    checked = validate_args(EDITS, {"items": [{"path": "a", "lines": [2, 3]}], "count": 5})

    assert checked == {"items": [{"path": "a", "lines": [2, 3]}], "count": 5, "dry_run": False}


def test_a_shipped_tool_fills_its_defaults_in():
    assert validate_args(get_tool("fetch_page"), {"url": "https://example.com/"}) == {
        "url": "https://example.com/",
        "offset": 0,
    }


def test_a_schema_jsonschema_cannot_read_is_refused_when_the_tool_is_registered():
    broken = tool({"properties": {"path": {"type": "text"}}}, name="broken_tool")

    with pytest.raises(ValueError, match=r"^broken_tool: the schema is not valid JSON Schema"):
        register(broken)

    assert "broken_tool" not in {t.name for t in registry.all_tools()}


def test_a_default_that_breaks_its_own_schema_is_refused_when_the_tool_is_registered():
    broken = tool(
        {"properties": {"limit": {"type": "integer", "minimum": 1, "default": 0}}},
        name="bad_default_tool",
    )

    with pytest.raises(ValueError, match=r"^bad_default_tool: the default of 'limit'"):
        register(broken)

    assert "bad_default_tool" not in {t.name for t in registry.all_tools()}


def test_each_tools_schema_is_checked_once_not_at_every_call(monkeypatch):
    checked = []
    real = registry._ArgsValidator.check_schema
    monkeypatch.setattr(
        registry._ArgsValidator,
        "check_schema",
        classmethod(lambda cls, schema: (checked.append(schema), real(schema))[1]),
    )
    once = tool({"properties": {"n": {"type": "integer"}}}, name="counted_tool")

    for n in range(3):
        validate_args(once, {"n": n})

    assert checked == [once.schema]


def test_a_value_that_fits_none_of_its_choices_is_named_by_its_path():
    either = tool(
        {
            "properties": {
                "target": {
                    "type": "object",
                    "properties": {"id": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
                }
            }
        }
    )

    assert refusal({"target": {"id": [1]}}, either).startswith(
        "edit_many: argument 'target.id' is not valid: [1] is not valid under any of the given"
    )
