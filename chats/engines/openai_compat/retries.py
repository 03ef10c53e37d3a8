"""Trying again: which failures are transient, how long to wait, and the completion that
retries them.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from email.utils import parsedate_to_datetime
from typing import Any

from django.conf import settings

from chats.engines.base import EngineError
from chats.engines.openai_compat.config import BACKOFF_CAP, RETRY_AFTER_CAP, ModelConfig
from chats.engines.openai_compat.reasons import (
    DETERMINISTIC_WORDS,
    ERR_BAD_KEY,
    ERR_HUNG_UP,
    ERR_NO_KEY,
    ERR_NOT_FOUND,
    ERR_OVERFLOW_SERVER,
    ERR_QUOTA,
    ERR_RATE_LIMITED,
    ERR_REFUSED,
    ERR_SERVER,
    ERR_SERVER_REFUSED,
    ERR_TIMEOUT,
    ERR_UNREACHABLE,
    OVERFLOW_WORDS,
    same_every_time,
)
from chats.engines.openai_compat.stream import Answer, _Halted, _Retry, _stream_once, _StreamError

log = logging.getLogger(__name__)


def _tries(n: int) -> str:
    return "1 try" if n == 1 else f"{n} tries"


def _message_in(body: Any, depth: int = 0) -> str:
    """The reason in an error body, whatever its shape: OpenAI's ``{"error": {"message"}}``,
    vLLM's top-level ``{"object": "error", "message"}``, Gemini's list ``[{"error": …}]``,
    a JSON text, or plain words."""
    if depth > 4 or body is None:
        return ""
    if isinstance(body, str):
        try:
            parsed = json.loads(body)
        except ValueError:
            return body
        return _message_in(parsed, depth + 1) if not isinstance(parsed, str) else parsed
    if isinstance(body, list):
        return next((m for m in (_message_in(b, depth + 1) for b in body) if m), "")
    if isinstance(body, dict):
        for key in ("error", "message", "detail", "msg"):
            if key in body:
                found = _message_in(body[key], depth + 1)
                if found:
                    return found
    return ""


def _server_words(exc: Exception, key: str) -> str:
    words = _message_in(getattr(exc, "body", None))
    if not words:
        response = getattr(exc, "response", None)
        try:
            words = _message_in(response.text) if response is not None else ""
        except Exception:  # a streamed response that was never read
            words = ""
    words = " ".join((words or getattr(exc, "message", "") or str(exc)).split())
    if key and len(key) >= 4:
        words = words.replace(key, "[redacted]")
    return words[:300] or "no reason given"


def _retry_after(exc: Exception) -> float | None:
    """How long the server asks us to wait: ``retry-after-ms`` (OpenAI, Azure) first, then
    ``retry-after`` in seconds or as a date (as openai-python's own client reads them)."""
    response = getattr(exc, "response", None)
    headers = response.headers if response is not None else {}
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if not value:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            try:
                seconds = parsedate_to_datetime(value).timestamp() - time.time()
            except (TypeError, ValueError):
                continue
        return min(RETRY_AFTER_CAP, max(0.0, seconds))
    return None


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    words = str(cause) if cause else str(exc)
    words = re.sub(r"^\[Errno -?\d+\]\s*", "", words).strip()
    return words[:200] or "no answer"


def _reached(exc: BaseException) -> bool:
    """Whether the connection was made before it failed, by the transport's own error in the
    exception's chain: the server closed it or broke off (httpx's RemoteProtocolError, or a
    read that failed), rather than nothing listening, or no route to it (ConnectError)."""
    import httpx

    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, (httpx.RemoteProtocolError, httpx.ReadError)):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False


def _refused_param(exc: Exception, param: str) -> bool:
    """Whether a 400 refuses this request parameter (o-series and gpt-5 refuse max_tokens)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and body.get("param") == param:
        return True
    words = _message_in(body) or str(exc)
    return param in words and bool(re.search(r"unsupported|not supported", words, re.I))


def _transient(
    exc: Exception, config: ModelConfig, key: str, agent: str
) -> tuple[str, float | None]:
    """What went wrong, as a reason with a ``{tries}`` slot and how long the server asks us to
    wait, for a failure worth trying again; raises EngineError for one that isn't."""
    import openai

    url = config.base_url
    if isinstance(exc, _Retry):
        return str(exc), exc.retry_after
    if isinstance(exc, openai.APITimeoutError):
        return ERR_TIMEOUT.format(url=url, seconds=config.timeout, tries="{tries}"), None
    if isinstance(exc, openai.APIConnectionError):
        template = ERR_HUNG_UP if _reached(exc) else ERR_UNREACHABLE
        return template.format(url=url, why=_cause(exc), tries="{tries}"), None
    words = _server_words(exc, key)
    code = str(getattr(exc, "code", "") or "")
    # Checked before any status: a server that says the context is full says it the same
    # way next time, whatever status it sends it with (llama.cpp used 500 for it).
    if code == "context_length_exceeded" or OVERFLOW_WORDS.search(words):
        raise EngineError(ERR_OVERFLOW_SERVER.format(url=url, words=words))
    repeats = same_every_time(words)
    if repeats:  # the server's own words say the next try fails the same way
        status = getattr(exc, "status_code", None) or "mid-answer"
        raise EngineError(repeats.format(url=url, status=status, words=words, model=config.model))
    if not isinstance(exc, openai.APIStatusError):  # an error event inside the stream
        raise EngineError(ERR_REFUSED.format(url=url, status="mid-answer", words=words))
    status = exc.status_code
    if status in (401, 403):
        template = ERR_BAD_KEY if key else ERR_NO_KEY
        raise EngineError(
            template.format(url=url, status=status, profile=config.auth_profile, agent=agent)
        )
    if status == 429:
        if code == "insufficient_quota" or "quota" in words.lower():
            raise EngineError(ERR_QUOTA.format(url=url, words=words))
        return ERR_RATE_LIMITED.format(url=url, tries="{tries}"), _retry_after(exc)
    if status >= 500 and DETERMINISTIC_WORDS.search(words):
        # The server's chat template refused these messages: the same request fails the
        # same way every time, so it is said at once.
        raise EngineError(ERR_SERVER_REFUSED.format(url=url, status=status, words=words))
    if status >= 500 or status in (408, 409):
        reason = ERR_SERVER.format(url=url, status=status, words=words, tries="{tries}")
        return reason, _retry_after(exc)
    if status == 404:
        raise EngineError(ERR_NOT_FOUND.format(url=url, words=words, model=config.model))
    raise EngineError(ERR_REFUSED.format(url=url, status=status, words=words))


def _pause(halt: threading.Event | None, seconds: float) -> bool:
    """Wait ``seconds`` between tries, or until Stop; True if Stop came. The tests put a
    recorder here."""
    return (halt or threading.Event()).wait(seconds)


class _Transient(Exception):
    def __init__(self, reason: str, wait: float | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.wait = wait


def _backoff(state: Any) -> float:
    exc = state.outcome.exception()
    delay = min(BACKOFF_CAP, settings.CONCH_MODEL_BACKOFF * 2 ** (state.attempt_number - 1))
    if isinstance(exc, _Transient) and exc.wait is not None:
        delay = max(delay, exc.wait)
    return delay


TOKEN_LIMITS = ("max_tokens", "max_completion_tokens", None)


def complete(
    config: ModelConfig,
    key: str,
    messages: list[dict[str, Any]],
    *,
    agent: str,
    tools: Sequence[dict[str, Any]] = (),
    on_text: Callable[[str], bool] | None = None,
    max_tokens: int | None = None,
    retries: int | None = None,
    halt: threading.Event | None = None,
    on_wait: Callable[[float, bool], None] | None = None,
) -> Answer:
    """One streamed completion, tried again with backoff while the failure is transient.

    Raises EngineError with a readable reason once it gives up, or at once for a
    failure that trying again would not mend (a bad key, an unknown model…). The
    waits between tries end at once when ``halt`` is set (Stop): the answer is then
    ``stopped``. ``on_wait(seconds, asked)`` hears each wait before it starts: ``asked``
    when the server said how long (a 429's ``Retry-After``), for the person's page.
    """
    import openai
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

    retries = config.retries if retries is None else retries
    tries = 0
    limits = list(TOKEN_LIMITS if max_tokens else (None,))

    def once() -> Answer:
        nonlocal tries
        tries += 1
        while True:
            try:
                return _stream_once(
                    config, key, messages, tools, on_text, limits[0], max_tokens, halt
                )
            except openai.BadRequestError as exc:
                if limits[0] and _refused_param(exc, limits[0]):
                    limits.pop(0)  # o-series and gpt-5: max_completion_tokens, or none at all
                    continue
                reason, wait = _transient(exc, config, key, agent)
            except (_Retry, _StreamError, openai.APIError) as exc:
                reason, wait = _transient(exc, config, key, agent)
            raise _Transient(reason, wait)

    def sleep(seconds: float) -> None:
        if _pause(halt, seconds):
            raise _Halted

    def say(state: Any) -> None:
        exc = state.outcome.exception()
        log.info(
            "%s Trying again in %.1f s.",
            exc.reason.replace("{tries}", _tries(state.attempt_number)),
            state.upcoming_sleep,
        )
        if on_wait is not None:
            on_wait(state.upcoming_sleep, exc.wait is not None)

    try:
        return Retrying(
            retry=retry_if_exception_type(_Transient),
            stop=stop_after_attempt(retries + 1),
            wait=_backoff,
            sleep=sleep,
            before_sleep=say,
            reraise=True,
        )(once)
    except _Transient as exc:
        raise EngineError(exc.reason.replace("{tries}", _tries(tries))) from None
    except _Halted:
        return Answer(stopped=True)
