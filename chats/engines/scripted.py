"""The scripted engine: a chat's assistant plays a JSON script, deterministically.

A script is a list of replies; each reply is a list of actions, played in
order. Reply N of a chat plays the script's reply N. Actions:

- ``{"tool": "edit_file", "args": {...}}`` a tool call (a step);
- ``{"say": "text"}`` words from the assistant;
- ``{"ask": "question"}`` a question: the reply ends needing the person;
- ``{"fail": "reason"}`` the reply fails;
- any action may carry ``"delay": seconds``, for demos.

After its last action the reply ends. A chat with no script left answers that
no model is connected, with the link to Connect a model (the page shows it
for ``data.connect_model``): the scripted engine is for ``--demo`` and the
scenarios, and a newcomer's first words land here.
"""

from __future__ import annotations

from typing import Any

from chats.engines.base import Ask, Decision, End, EngineError, EngineInput, Fail, Say, ToolCall
from chats.tools.registry import ToolError, UnknownTool, get_tool, validate_args
from chats.toolsets import MCP_PREFIX

ACTION_KEYS = ("tool", "say", "ask", "fail")
NO_MODEL = (
    "No model is connected, so nothing can answer you here yet: {persona}, this chat's "
    "persona, only plays scripts, and this chat has none left. Connect a model, then send "
    "your message again."
)


class ScriptError(ValueError):
    """A script that cannot be played; the message names the place."""


def validate_script(script: Any, *, where: str = "script") -> list[list[dict[str, Any]]]:
    """Check a script's shape; raise ScriptError naming the bad action."""
    if not isinstance(script, list):
        raise ScriptError(f"{where} must be a list of replies.")
    for r, reply in enumerate(script):
        if not isinstance(reply, list):
            raise ScriptError(f"{where}[{r}] must be a list of actions.")
        for a, action in enumerate(reply):
            place = f"{where}[{r}][{a}]"
            if not isinstance(action, dict):
                raise ScriptError(f"{place} must be an object.")
            kinds = [k for k in ACTION_KEYS if k in action]
            if len(kinds) != 1:
                raise ScriptError(f"{place} must have exactly one of {', '.join(ACTION_KEYS)}.")
            unknown = set(action) - set(ACTION_KEYS) - {"args", "delay"}
            if unknown:
                raise ScriptError(f"{place} has unknown keys: {', '.join(sorted(unknown))}.")
            delay = action.get("delay", 0)
            if (
                not isinstance(delay, int | float)
                or isinstance(delay, bool)
                or not 0 <= delay <= 60
            ):
                raise ScriptError(f"{place}.delay must be a number of seconds from 0 to 60.")
            kind = kinds[0]
            if kind == "tool" and str(action["tool"]).startswith(MCP_PREFIX):
                # A persona's own tool (its MCP server's): its arguments are checked against
                # the server's schema when it is called, in the chat whose persona has it.
                if not isinstance(action.get("args", {}), dict):
                    raise ScriptError(f"{place}.args must be an object.")
            elif kind == "tool":
                try:
                    tool = get_tool(action["tool"])
                    validate_args(tool, action.get("args", {}))
                except UnknownTool as exc:
                    raise ScriptError(f"{place}: {exc}") from None
                except ToolError as exc:
                    raise ScriptError(f"{place}: {exc}") from None
            elif not isinstance(action[kind], str):
                raise ScriptError(f"{place}.{kind} must be text.")
    return script


class ScriptedEngine:
    name = "scripted"

    def next_action(self, given: EngineInput) -> Decision:
        script = given.conversation.script or []
        state = dict(given.state)
        reply_index = state.setdefault("reply", given.turn.number - 1)
        position = state.get("pos", 0)
        if reply_index >= len(script):
            if position == 0:
                words = NO_MODEL.format(persona=given.conversation.agent.name)
                return Decision(Say(words, {"connect_model": True}), {**state, "pos": 1})
            return Decision(End(), state)
        reply = script[reply_index]
        if not isinstance(reply, list):
            raise EngineError(f"The script's reply {reply_index + 1} is not a list of actions.")
        if position >= len(reply):
            return Decision(End(), state)
        action = reply[position]
        next_state = {**state, "pos": position + 1}
        delay = float(action.get("delay", 0) or 0)
        if "tool" in action:
            return Decision(
                ToolCall(action["tool"], dict(action.get("args", {}))), next_state, delay
            )
        if "say" in action:
            return Decision(Say(action["say"]), next_state, delay)
        if "ask" in action:
            return Decision(Ask(action["ask"]), next_state, delay)
        if "fail" in action:
            return Decision(Fail(action["fail"]), next_state, delay)
        raise EngineError(
            f"The script's reply {reply_index + 1}, action {position + 1}, is not an action."
        )
