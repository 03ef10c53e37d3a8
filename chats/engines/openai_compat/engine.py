"""The engine: chooses each action by asking the model, within the context budget."""

from __future__ import annotations

import json
from typing import Any

from chats.engines.base import (
    Decision,
    End,
    EngineError,
    EngineInput,
    Fail,
    Say,
    ToolCall,
)
from chats.engines.openai_compat.config import (
    CHARS_PER_TOKEN,
    ENGINE_NAME,
    RECAP_MAX_TOKENS,
    ModelConfig,
    api_key_for,
)
from chats.engines.openai_compat.context import overflow_reason, server_said
from chats.engines.openai_compat.messages import (
    Carry,
    _reply_tokens,
    choose_cut,
    estimate_tokens,
    function_specs,
    messages_for,
    request_tokens,
    split_replies,
)
from chats.engines.openai_compat.reasons import (
    ERR_BAD_ARGS,
    ERR_CALL_AT_LENGTH,
    ERR_CUT_AT_LENGTH,
    ERR_NO_ROOM,
    ERR_UNKNOWN_TOOL,
    short,
)
from chats.engines.openai_compat.recap import recap_for
from chats.engines.openai_compat.retries import complete
from chats.engines.openai_compat.stream import Answer
from chats.limits import LIMITS
from chats.quoting import NOTHING, conch_note, conch_words

# Gemini accepts this in place of a signature it did not give (its docs on thought
# signatures): a call of several in one answer is sent back in a message of its own.
GEMINI_NO_SIGNATURE = {"google": {"thought_signature": "skip_thought_signature_validator"}}


def _carried(answer: Answer) -> list[dict[str, Any]]:
    """For each call of the answer, what must go back with it in this reply's next requests:
    the reasoning the answer came with (DeepSeek's thinking mode wants it back with each
    assistant message of a tool loop; the first call's message carries it, the rest an
    empty one) and the call's ``extra_content`` (Gemini 3's thought signature)."""
    signed = any(call.extra_content for call in answer.calls)
    kept = []
    for i, call in enumerate(answer.calls):
        item: dict[str, Any] = {}
        if answer.reasoning_field:
            item["reasoning_field"] = answer.reasoning_field
            item["reasoning"] = answer.reasoning if i == 0 else ""
        extra = call.extra_content or (GEMINI_NO_SIGNATURE if signed else None)
        if extra:
            item["extra_content"] = extra
        kept.append(item)
    return kept


class OpenAICompatEngine:
    """Chooses each action by asking the model; plays a completion's several tool calls in turn."""

    name = ENGINE_NAME

    def next_action(self, given: EngineInput) -> Decision:
        state = dict(given.state)
        queue = list(state.get("queue") or [])
        if queue:
            action = queue.pop(0)
            state["queue"] = queue
            if "fail" in action:
                return Decision(Fail(action["fail"]), state)
            return Decision(ToolCall(action["tool"], dict(action["args"])), state)

        agent = given.conversation.agent
        config = ModelConfig.of(agent)
        key = api_key_for(agent, config)
        config = config.fitted(server_said(config, key))
        tools = function_specs(given.tools)
        messages, state = self._fit(given, config, tools, state)
        answer = complete(
            config,
            key,
            messages,
            agent=agent.slug,
            tools=tools,
            on_text=given.on_text,
            halt=given.halt,
            on_wait=given.on_wait,
        )
        if answer.stopped:
            return Decision(End(), state)  # stopped meanwhile: the runtime lets this go
        # A refusal's words are the answer's words, kept marked as a refusal for the page;
        # the model reads them back next time as its own.
        marked = {"refusal": True} if answer.refusal else {}

        if answer.cut:
            # Past LIMITS.answer_chars: its words end here, and no call of it runs (its
            # arguments may stop anywhere). The reply ends with what was kept, and says so.
            note = conch_note(
                "this answer was cut at {n} characters, the most one answer may hold "
                "(LIMITS.answer_chars){calls}.",
                n=LIMITS.answer_chars,
                calls=conch_words(", and none of its tool calls ran") if answer.calls else NOTHING,
            )
            return Decision(End(f"{answer.words}\n\n{note}".strip(), marked), state)

        offered = {t.name for t in given.tools}
        cut_short = answer.finish_reason == "length"
        actions: list[dict[str, Any]] = []
        for call in answer.calls:
            if cut_short:  # its arguments may stop anywhere: it is never run
                actions = [{"fail": ERR_CALL_AT_LENGTH.format(tool=short(call.name, 60))}]
                break
            if call.name not in offered:
                actions = [{"fail": ERR_UNKNOWN_TOOL.format(tool=short(call.name, 60))}]
                break
            try:
                args = json.loads(call.arguments) if call.arguments.strip() else {}
            except ValueError:
                args = None
            if not isinstance(args, dict):
                reason = ERR_BAD_ARGS.format(tool=call.name, raw=short(call.arguments))
                actions = [{"fail": reason}]
                break
            actions.append({"tool": call.name, "args": args})
        if cut_short and not actions:
            # Stopped at its length limit: never a completed reply, whatever it wrote.
            actions = [{"fail": ERR_CUT_AT_LENGTH if answer.words else ERR_NO_ROOM}]
        if actions and "tool" in actions[0]:
            state["carry"] = [*state.get("carry", []), *_carried(answer)]

        if not actions:
            return Decision(End(answer.words, marked), state)
        words = answer.words
        if answer.calls_refused and "tool" in actions[0]:
            asked = len(answer.calls) + answer.calls_refused
            words = "\n\n".join(
                part
                for part in (
                    words,
                    conch_note(
                        "this answer asked for {asked} tool calls; one answer may make at most "
                        "{n} (LIMITS.answer_tool_calls), so the first {n} run and the other "
                        "{over} were refused. Ask for the rest in your next answer.",
                        asked=asked,
                        n=LIMITS.answer_tool_calls,
                        over=answer.calls_refused,
                    ),
                )
                if part
            )
        if words:
            return Decision(Say(words, marked), {**state, "queue": actions})
        first, rest = actions[0], actions[1:]
        state["queue"] = rest
        if "fail" in first:
            return Decision(Fail(first["fail"]), state)
        return Decision(ToolCall(first["tool"], first["args"]), state)

    def _fit(
        self,
        given: EngineInput,
        config: ModelConfig,
        tools: list[dict[str, Any]],
        state: dict[str, Any],
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The messages for this request, within the context budget, and the state to keep."""
        lines = given.load_transcript()
        carry = Carry(given.turn.number, tuple(state.get("carry") or ()))
        system = given.system_text
        sends = request_tokens(system, tools)
        fixed = sends + config.reserve_tokens
        whole = messages_for(system, lines, carry=carry)
        if fixed + estimate_tokens(whole[1:]) <= config.context_tokens:
            return whole, {k: v for k, v in state.items() if k != "recap"}

        replies = split_replies(lines)
        sizes = [_reply_tokens(reply) for reply in replies]
        recap_room = min(RECAP_MAX_TOKENS, config.context_tokens // 8)
        cut = choose_cut(sizes, config.context_tokens - fixed - recap_room)
        if cut is None:
            raise EngineError(overflow_reason(config, fixed + sizes[-1] if sizes else fixed, sends))
        stored = given.conversation.context_recap or {}
        recap = recap_for(
            given.conversation.agent,
            replies,
            cut,
            min(LIMITS.summary_chars, recap_room * CHARS_PER_TOKEN),
            known=(state.get("recap"), stored),
        )
        if recap != stored and given.keep_recap is not None:
            given.keep_recap(recap)
        messages = messages_for(
            system,
            [line for reply in replies[cut:] for line in reply],
            recap=recap["text"],
            carry=carry,
        )
        need = fixed + estimate_tokens(messages[1:])
        if need > config.context_tokens:
            raise EngineError(overflow_reason(config, need, sends))
        return messages, {**state, "recap": recap}
