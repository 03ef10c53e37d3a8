"""A model engine for any OpenAI-compatible Chat Completions endpoint, on the official
``openai`` SDK.

Ollama, a llama.cpp server, vLLM, LM Studio and hosted APIs all speak it. A
persona uses it with ``Agent.engine = "openai"`` and ``Agent.engine_config``::

    {"base_url": "http://127.0.0.1:11434/v1",  # required
     "model": "qwen2.5-coder:7b",               # required
     "auth_profile": "ollama",     # one of THIS persona's auth profiles: its secret is the API key
     "context_tokens": 8192,       # the model's context size (default: what its server says,
                                   # else 8192; never more than the server says)
     "reserve_tokens": 1024,       # kept free for the answer (default: an eighth of the context)
     "timeout": 120, "retries": 3, "temperature": 0.2}

A stored ``stream_every`` (the seconds once left between the page's live updates) is
still accepted, and does nothing: each chunk's words go to the page as they come.

The key is read from the persona's own auth profile and nowhere else: never
another persona's, never the process environment (``OPENAI_API_KEY``). A
persona with no profile sends a placeholder, which local servers ignore.

Where the words go (ADR 0085, as ADR 0134 uses it)
---------------------------------------------------
Each request is built afresh from the stored transcript (entries and steps),
so the same history always gives the same bytes, and a provider's prompt
cache keeps matching:

- **system**: ``EngineInput.system_text``, the one static text (Conch's
  words, the persona's, ``TOGETHER_PROMPT``). It never carries notes, never
  changes while other chats start and stop, and is the only system message.
- **user**: each reply opens with one user message. The person's words are
  the last thing in it; in front of them, each on its own line, come Conch's
  notes for that reply's start (``data.at == "start"``: other chats in this
  folder, messages from other chats) and any Conch notes written since the
  last place that could carry them (a recap, "started fresh", "stopped by
  another chat"). Every note is in Conch's frame (``chats.quoting.conch_note``);
  one that isn't already, and every recap (a model wrote it), goes after a
  frame here, with any opening of Conch's frame in it written otherwise. A reply that no person started
  (a message from another chat, a wait ending, a task) opens with a user
  message that holds only Conch's framed words: Chat Completions has only
  system, user, assistant and tool roles, and system must stay static. So a
  message from another chat is always fenced and framed text inside Conch's
  note (``together.messages.frame``), never a user message of its own, and
  never the person's words.
- **assistant**: the assistant's words (``Say``/``End`` entries) and, for each
  step, one tool call (id ``call_<reply>_<step>``, the step's stored
  arguments). Words followed by a step share one assistant message.
- **tool**: each step's result (or ``Error: …``), with the notes gathered at
  the next step boundary (``data.at == "step"``, resource feedback) appended
  beside it, after a blank line.
- Cards are left out: they are the page's view of messages the notes already
  carry.

Context budget: when the whole transcript would not fit ``context_tokens``
(estimated at four characters a token), the oldest replies are summarized
into one recap by :func:`chats.summarize.summarize`, the summarizer
maintenance uses, and the recent replies are kept. The cut moves in steps of
:data:`CUT_EVERY` replies, so the kept part's bytes stay the same for a
while. When it moves, the recap folds on: the new one is made from the one
before (framed as the earlier recap) and the replies newly cut, never from the
whole transcript, so summary requests stay the same size however long the
chat. The chat keeps its latest recap through ``EngineInput.keep_recap``
(``Conversation.context_recap``), so the next reply and a restarted server
fold on from it, and the same history gives the same recap's bytes. The reply
being written is always kept whole; if it alone no longer fits, the reply
fails and says so.

Failures end the reply as failed, with a reason a person can read: an
unreachable endpoint, a bad key, a rate limit, a malformed tool call, an
unknown tool, context overflow, a template that refuses the messages, a server
that can't take tools (said with what to do, and never tried again). Transient
ones (connection errors, timeouts, 429, 5xx, an answer cut off mid-stream, a
chunk that isn't JSON) are retried with exponential backoff (tenacity), a
bounded number of times, honouring ``retry-after-ms`` and ``retry-after``. A
timeout is time without a chunk arriving, not the time a whole answer takes;
Stop (``EngineInput.halt``) ends the wait for an answer and the pause between
tries at once. An answer stopped at its length limit is never a completed
reply. A refusal (OpenAI's ``refusal`` field) is the reply's words, kept marked
``{"refusal": true}``. Nothing stored is lost: the engine never writes (the recap
it made, the runtime keeps).

The package's parts:

- :mod:`.config`: a persona's settings for the endpoint, and its key.
- :mod:`.context`: the model's real context size, as its server says it.
- :mod:`.messages`: the transcript as messages, and the context budget's arithmetic.
- :mod:`.stream`: one streamed answer, read whatever dialect the server speaks.
- :mod:`.reasons`: what went wrong, in words that say what to check.
- :mod:`.retries`: which failures are worth trying again, and the completion that does.
- :mod:`.recap`: the oldest part of a long chat, summarized by the persona's own model.
- :mod:`.engine`: the engine, choosing each action.
- :mod:`.connection`: "Test connection".
"""

from chats.engines.openai_compat.config import (
    CHARS_PER_TOKEN,
    CUT_EVERY,
    DEFAULT_CONTEXT,
    ENGINE_NAME,
    ModelConfig,
    api_key_for,
)
from chats.engines.openai_compat.connection import ConnectionResult, connection_test
from chats.engines.openai_compat.context import server_context
from chats.engines.openai_compat.engine import OpenAICompatEngine
from chats.engines.openai_compat.messages import (
    RECAP_FRAME,
    choose_cut,
    estimate_tokens,
    messages_for,
)
from chats.engines.openai_compat.reasons import (
    ERR_BAD_KEY,
    ERR_CUT_AT_LENGTH,
    ERR_CUT_OFF,
    ERR_NO_PROFILE,
    ERR_NOT_SET_UP,
    ERR_RATE_LIMITED,
    ERR_SERVER,
    ERR_TIMEOUT,
    ERR_UNKNOWN_TOOL,
)
from chats.engines.openai_compat.recap import ModelSummarizer, summarizer_factory
from chats.engines.openai_compat.retries import complete
from chats.engines.openai_compat.stream import Answer

__all__ = [
    "CHARS_PER_TOKEN",
    "CUT_EVERY",
    "DEFAULT_CONTEXT",
    "ENGINE_NAME",
    "ERR_BAD_KEY",
    "ERR_CUT_AT_LENGTH",
    "ERR_CUT_OFF",
    "ERR_NOT_SET_UP",
    "ERR_NO_PROFILE",
    "ERR_RATE_LIMITED",
    "ERR_SERVER",
    "ERR_TIMEOUT",
    "ERR_UNKNOWN_TOOL",
    "RECAP_FRAME",
    "Answer",
    "ConnectionResult",
    "ModelConfig",
    "ModelSummarizer",
    "OpenAICompatEngine",
    "api_key_for",
    "choose_cut",
    "complete",
    "connection_test",
    "estimate_tokens",
    "messages_for",
    "server_context",
    "summarizer_factory",
]
