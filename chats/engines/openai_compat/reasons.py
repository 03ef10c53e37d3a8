"""Readable reasons for what went wrong, each naming what to check, and the server words
that tell a failure that will repeat from one worth trying again.
"""

from __future__ import annotations

import re

# Readable reasons. Each names what to check.
ERR_NOT_SET_UP = (
    "The persona “{agent}” has no model endpoint set up: its engine settings need {missing}."
)
ERR_BAD_SETTING = "The persona “{agent}” has a bad engine setting: {field} {why}."
ERR_NO_PROFILE = "The persona “{agent}” has no auth profile called “{profile}”."
ERR_UNREACHABLE = (
    "Conch couldn't reach the model at {url} ({why}), after {tries}. Is the server running there?"
)
ERR_TIMEOUT = (
    "The model at {url} sent nothing for {seconds:g} seconds (its timeout), after {tries}."
)
ERR_MALFORMED = "The model at {url} kept sending a chunk that isn't JSON ({why}), after {tries}."
ERR_CUT_OFF = "The model at {url} kept breaking off mid-answer, after {tries}."
ERR_BAD_KEY = (
    "The model at {url} refused the API key ({status}): check the auth profile “{profile}” "
    "of the persona “{agent}”."
)
ERR_NO_KEY = (
    "The model at {url} wants an API key ({status}), and the persona “{agent}” sends none: "
    "add an auth profile with the key and name it in auth_profile."
)
ERR_RATE_LIMITED = (
    "The model at {url} is rate-limiting Conch (429) and still was after {tries}. "
    "Try again in a while."
)
ERR_QUOTA = "The model at {url} says the key is out of quota (429): {words}"
ERR_NOT_FOUND = (
    "The model at {url} answered 404 ({words}). Check the model name “{model}” and that "
    "the base URL ends where its API starts (usually …/v1)."
)
ERR_REFUSED = "The model at {url} refused the request ({status}): {words}"
ERR_SERVER = "The model at {url} kept failing ({status}: {words}), after {tries}."
ERR_SERVER_REFUSED = (
    "The model at {url} can't take these messages ({status}: {words}). Its chat template "
    "refused them; trying again would not help."
)
# A context too small to work in: Test connection's words and a chat's, each naming the
# setting of the server that said the size (chats/engines/openai_compat/context.py).
ERR_OVERFLOW = (
    "This reply no longer fits the model's context: it needs about {need} tokens and "
    "“{model}” has {have}{whose}. {advice}"
)
ERR_TOO_SMALL = (
    "“{model}” has {have} tokens of context{whose}: too few to work in. Each request of a "
    "chat sends about {sends} tokens before the conversation (the system text and {tools}) "
    "and keeps {reserve} free for the answer, which leaves {left} for the "
    "person's message and the reply's steps; a reply needs about {room}. {advice}"
)
SAID_BY_SERVER = " (as {kind} says)"
SAID_BY_SETTING = " (context_tokens)"
OVERFLOW_FRESH_CHAT = (
    "Start a fresh chat and ask for less in one message, or give the model more context. "
)
MORE_CONTEXT_OLLAMA = (
    "To give it {n} tokens: start Ollama with OLLAMA_CONTEXT_LENGTH={n} ollama serve, or "
    "set num_ctx {n} for the model (PARAMETER num_ctx {n} in its Modelfile, or "
    "/set parameter num_ctx {n} then /save {model} in ollama run {model})."
)
MORE_CONTEXT_OLLAMA_OWN = (
    "To give it {n} tokens: set the model's own num_ctx to {n} (PARAMETER num_ctx {n} in "
    "its Modelfile, then ollama create; or /set parameter num_ctx {n} then /save {model} in "
    "ollama run {model}). OLLAMA_CONTEXT_LENGTH doesn't change a model that sets its own."
)
MORE_CONTEXT_LLAMACPP = "To give it {n} tokens: restart llama-server with -c {n}."
MORE_CONTEXT_LLAMACPP_SLOTS = (
    " It has {slots} slots: if they share -c (--parallel without --kv-unified), give -c {total}."
)
MORE_CONTEXT_VLLM = (
    "To give it {n} tokens: restart vLLM with --max-model-len {n} (if the model allows that "
    "many; else choose one with a longer context)."
)
MORE_CONTEXT_SETTING = (
    "Raise context_tokens to {n} in the persona's engine settings (the admin's Agents): it "
    "holds the model to {have}, less than its server gives."
)
MORE_CONTEXT_UNSAID = (
    "Its server doesn't say how much context the model has, so Conch takes context_tokens "
    "({have}). If the model really has {n} tokens or more, set context_tokens to that in the "
    "persona's engine settings (the admin's Agents); otherwise run it with a longer context."
)
ERR_OVERFLOW_SERVER = "The model at {url} says this reply no longer fits its context: {words}"
ERR_BAD_ARGS = "The model called {tool} with arguments that aren't a JSON object: {raw}"
ERR_UNKNOWN_TOOL = "The model called a tool this chat isn't offered: {tool}."
ERR_NO_ROOM = "The model ran out of room before it answered (it stopped at its length limit)."
ERR_CUT_AT_LENGTH = (
    "The model stopped at its length limit mid-answer: what it wrote so far is above, unfinished."
)
ERR_CALL_AT_LENGTH = (
    "The model stopped at its length limit while writing a call to {tool}: the call was not run."
)


# A 5xx that says the server's chat template refused the messages (llama.cpp's minja
# raise_exception): the same request fails the same way every time.
DETERMINISTIC_WORDS = re.compile(
    r"jinja|raise_exception|chat template|roles must alternate|template error", re.IGNORECASE
)
OVERFLOW_WORDS = re.compile(
    r"context[ _](length|window|size)|maximum context|too many tokens|prompt is too long|"
    r"exceeds? (the )?(available )?context|n_ctx",
    re.IGNORECASE,
)


# A server that was reached, and closed the connection before it answered: not "couldn't
# reach", which is for a connection never made.
ERR_HUNG_UP = (
    "The model at {url} took the request, then closed the connection without answering "
    "({why}), after {tries}. The server may have crashed or run out of memory: its log says why."
)
# What a server says when it will fail the same way on every try, beside the template
# refusals of DETERMINISTIC_WORDS, and what to do about it: its own words decide, whatever
# status it sends them with (llama.cpp says them with a 500, which would otherwise be tried
# again). tests/engines/test_server_words.py replays each server's real body
# (tests/engines/recordings/SOURCES.md says where each comes from).
ERR_STREAM_TOOLS = (
    "The llama.cpp server at {url} can't stream an answer that may call tools ({status}: "
    "{words}): its build is older than streamed tool calls. Update llama.cpp and start "
    "llama-server again."
)
ERR_TOOLS_NEED_JINJA = (
    "The llama.cpp server at {url} takes tools only with its chat templates on ({status}: "
    "{words}): start llama-server with --jinja."
)
ERR_MODEL_NO_TOOLS = (
    "“{model}” at {url} can't use tools ({status}: {words}), and a persona works through "
    "them. Pick a model that supports tools (Ollama's library marks them “tools”)."
)
ERR_VLLM_NO_TOOLS = (
    "The vLLM server at {url} isn't set up for tool calls ({status}: {words}): start it "
    "with --enable-auto-tool-choice and the --tool-call-parser for this model."
)
ERR_ROUTE_NO_TOOLS = (
    "No provider of “{model}” at {url} takes tools ({status}: {words}). Pick a model "
    "that supports tool use."
)
SAME_EVERY_TIME = (
    # llama.cpp before streamed tool calls (its oaicompat_completion_params_parse).
    (re.compile(r"cannot use tools with stream", re.IGNORECASE), ERR_STREAM_TOOLS),
    # llama.cpp started without --jinja.
    (re.compile(r"tools param requires --jinja", re.IGNORECASE), ERR_TOOLS_NEED_JINJA),
    # Ollama, for a model whose template has no tools: "<name> does not support tools".
    (re.compile(r"does not support tools", re.IGNORECASE), ERR_MODEL_NO_TOOLS),
    # vLLM started without --enable-auto-tool-choice and --tool-call-parser.
    (
        re.compile(r"tool choice requires --enable-auto-tool-choice", re.IGNORECASE),
        ERR_VLLM_NO_TOOLS,
    ),
    # OpenRouter, for a model none of whose providers take tools (a 404).
    (re.compile(r"no endpoints found that support tool use", re.IGNORECASE), ERR_ROUTE_NO_TOOLS),
)


def same_every_time(words: str) -> str | None:
    """The reason for a server's words that say the request will fail the same way on every
    try, with ``{url}``, ``{status}``, ``{words}`` and ``{model}`` slots; None for others."""
    return next((reason for found, reason in SAME_EVERY_TIME if found.search(words)), None)


def short(raw: str, limit: int = 120) -> str:
    raw = " ".join(str(raw).split())
    return repr(raw if len(raw) <= limit else raw[: limit - 1] + "…")
