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
ERR_OVERFLOW = (
    "This reply no longer fits the model's context: it needs about {need} tokens and "
    "“{model}” has {have} (context_tokens). Start a fresh chat, or raise context_tokens "
    "if the model allows more."
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


def short(raw: str, limit: int = 120) -> str:
    raw = " ".join(str(raw).split())
    return repr(raw if len(raw) <= limit else raw[: limit - 1] + "…")
