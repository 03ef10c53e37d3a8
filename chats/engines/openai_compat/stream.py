"""One streamed answer: the request, the watch on its socket, and its pieces gathered
whatever dialect the server speaks.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chats.engines.openai_compat.config import NO_KEY, ModelConfig
from chats.engines.openai_compat.reasons import ERR_CUT_OFF, ERR_MALFORMED, ERR_TIMEOUT
from chats.limits import LIMITS

log = logging.getLogger(__name__)

# Each server speaks its own dialect of the stream. What is read here, and why (the
# recordings the tests replay are listed in tests/engines/recordings/SOURCES.md):
# - Ollama sends each of several calls in its own chunk, every one at ``index: 0``
#   with a fresh id: a fresh id at a taken index is a new call.
# - vLLM's GLM parsers repeat the id, type and name in the final chunk: a name or
#   id a call already has is not added again.
# - Gemini's OpenAI endpoint sends argument fragments with no ``index``: a fragment
#   with no index and no new id goes on the last call.
# - LiteLLM may send the arguments as a JSON object rather than a string.
# - Some servers think aloud inline (``<think>…</think>``); others in a field of
#   their own (``reasoning_content``, ``reasoning``), which DeepSeek wants back with
#   the calls it came with, as Gemini wants each call's ``extra_content``.
# - OpenAI sends a refusal as ``refusal`` pieces, with ``content`` null: they are the
#   answer's words, and the answer says it refused.
# - Some servers send ``finish_reason: ""`` on every chunk, the last one too, then
#   ``data: [DONE]``: an answer is whole once it has a finish reason or its stream said
#   ``[DONE]`` (the SDK stops at it without saying so: :class:`_Ends` watches for it).


@dataclass(frozen=True)
class AnswerCall:
    id: str
    name: str
    arguments: str
    extra_content: dict[str, Any] | None = None


@dataclass
class Answer:
    text: str = ""
    calls: list[AnswerCall] = field(default_factory=list)
    finish_reason: str | None = None
    stopped: bool = False
    reasoning: str = ""
    reasoning_field: str = ""  # the field the server thought aloud in, to send it back in
    cut: bool = False  # it went past LIMITS.answer_chars, and the rest wasn't read
    calls_refused: int = 0  # the calls past LIMITS.answer_tool_calls, never kept
    refusal: str = ""  # the model's words refusing the request, sent apart from its content

    @property
    def words(self) -> str:
        """What the answer says: its words, and its refusal's."""
        return "\n\n".join(part for part in (self.text, self.refusal) if part)


@dataclass
class _Slot:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    extra_content: dict[str, Any] | None = None
    kept: bool = True  # False: a call past LIMITS.answer_tool_calls, whose pieces go nowhere


_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL)
REASONING_FIELDS = ("reasoning_content", "reasoning")


def visible(text: str) -> str:
    """The words without the model's inline thinking (``<think>…</think>``): a block that
    closed, one still open at the end, and one whose opening tag was in the prompt."""
    text = _THINKING.sub("", text)
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    opened = text.find("<think>")
    return text if opened == -1 else text[:opened]


class _Reading:
    """A streamed answer's pieces, gathered whatever dialect the server speaks."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.reasoning_field = ""
        self.slots: list[_Slot] = []
        self.at: dict[int, _Slot] = {}
        self.finish_reason: str | None = None
        # Bounds (LIMITS.answer_chars, LIMITS.answer_tool_calls): what an answer may hold,
        # counted as it streams in, so a flood is never held whole.
        self.sizes: dict[int, int] = {}  # chars kept, by list
        self.cut = False
        self.calls_refused = 0

    def _keep(self, into: list[str], piece: str) -> None:
        """Add ``piece`` to ``into`` up to the bound; past it, the answer is cut."""
        size = self.sizes.get(id(into), 0)
        room = LIMITS.answer_chars - size
        if len(piece) > room:
            piece, self.cut = piece[: max(room, 0)], True
        if piece:
            into.append(piece)
            self.sizes[id(into)] = size + len(piece)

    def take(self, chunk: Any) -> None:
        if getattr(chunk, "object", None) == "error" or (
            not getattr(chunk, "choices", None) and "message" in (chunk.model_extra or {})
        ):
            # vLLM's error in the stream, at the top level: {"object": "error", "message": …}
            raise _StreamError(chunk.model_extra or {})
        for choice in (getattr(chunk, "choices", None) or [])[:1]:
            delta = getattr(choice, "delta", None)
            if delta is not None:
                self._delta(delta)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason

    def _delta(self, delta: Any) -> None:
        if isinstance(delta.content, str) and delta.content:
            self._keep(self.text, delta.content)
        refusal = getattr(delta, "refusal", None)
        if isinstance(refusal, str) and refusal:
            self._keep(self.refusal, refusal)
        for name in REASONING_FIELDS:
            piece = getattr(delta, name, None)
            if isinstance(piece, str) and piece:
                self._keep(self.reasoning, piece)
                self.reasoning_field = self.reasoning_field or name
        for call in getattr(delta, "tool_calls", None) or ():
            self._call(call)

    def _call(self, call: Any) -> None:
        function = getattr(call, "function", None)
        name = (getattr(function, "name", None) or "") if function is not None else ""
        arguments = getattr(function, "arguments", None) if function is not None else None
        if arguments is not None and not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)  # LiteLLM: an object
        call_id = getattr(call, "id", None) or ""
        slot = self._slot(getattr(call, "index", None), call_id, name)
        slot.id = slot.id or call_id
        slot.name = slot.name or name.strip()
        if arguments and slot.kept:
            self._keep(slot.arguments, arguments)
        extra = getattr(call, "extra_content", None)
        if isinstance(extra, dict):
            slot.extra_content = extra

    def _slot(self, index: int | None, call_id: str, name: str) -> _Slot:
        last = self.slots[-1] if self.slots else None
        if index is None:
            slot = last  # Gemini: a fragment with no index goes on the last call…
        else:
            slot = self.at.get(index)
        new = slot is None or (
            # … unless it is a new call: an id or a name other than the call's own (Ollama
            # sends every call at index 0, each with a fresh id).
            (call_id and slot.id and call_id != slot.id)
            or (name.strip() and slot.name and name.strip() != slot.name)
        )
        if new or slot is None:
            slot = _Slot()
            if len(self.slots) < LIMITS.answer_tool_calls:
                self.slots.append(slot)
            else:  # past the bound: its pieces go nowhere, and the answer says so
                slot.kept = False
                self.calls_refused += 1
            if index is not None:
                self.at[index] = slot
        return slot

    def words(self) -> str:
        """The words so far, whole. Kept joined, so asking after each chunk costs a copy
        of them, not a join of every piece again."""
        words = "".join(self.text)
        self.text[:] = [words] if words else []
        return words

    def answer(self) -> Answer:
        return Answer(
            text=visible("".join(self.text)).strip(),
            calls=[
                AnswerCall(s.id, s.name, "".join(s.arguments), s.extra_content) for s in self.slots
            ],
            finish_reason=self.finish_reason,
            reasoning="".join(self.reasoning),
            reasoning_field=self.reasoning_field,
            cut=self.cut,
            calls_refused=self.calls_refused,
            refusal="".join(self.refusal).strip(),
        )


class _Retry(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class _StreamError(Exception):
    """An error the server sent inside the stream, in a shape the SDK doesn't raise for.

    It carries what :func:`_transient` reads of the SDK's own errors (``body`` and
    ``code``), so Conch never builds one of the SDK's exceptions itself: their
    constructors are the SDK's business, and change between its releases.
    """

    def __init__(self, body: Any) -> None:
        super().__init__("error in the stream")
        self.body = body
        inner = body.get("error") if isinstance(body, dict) else None
        code = body.get("code") if isinstance(body, dict) else None
        if code is None and isinstance(inner, dict):
            code = inner.get("code")
        self.code = code


class _Halted(Exception):
    """Stop was pressed while the engine waited."""


_DONE = re.compile(rb"[\r\n]data: ?\[DONE\]")


class _Ends:
    """Whether the answer's stream said ``data: [DONE]``: it watches the response's bytes on
    their way to the SDK (an httpx response hook puts it round the body)."""

    def __init__(self) -> None:
        self.done = False

    def watch(self, response: Any) -> None:
        import httpx

        body = response.stream
        ends = self

        class Watched(httpx.SyncByteStream):
            def __iter__(self) -> Any:
                tail = b"\n"  # the body's start is a line's start
                for piece in body:
                    if not ends.done:
                        seen = tail + piece
                        ends.done = bool(_DONE.search(seen))
                        tail = seen[-16:]
                    yield piece

            def close(self) -> None:
                body.close()

        response.stream = Watched()


class _Watch:
    """Ends a request that makes no progress for ``timeout`` seconds, or whose reply was
    stopped, by shutting its socket: a read blocked on it returns at once.

    Progress is a chunk of the answer arriving; the time a whole answer takes is not
    limited.
    """

    def __init__(self, timeout: float, halt: threading.Event | None) -> None:
        self.timeout = timeout
        self.halt = halt
        self.sock: socket.socket | None = None
        self.last = time.monotonic()
        self.idle = False
        self.halted = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="conch-model-watch", daemon=True)

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's trace: the connection's socket, once it is connected."""
        if name == "connection.connect_tcp.complete" and info.get("return_value") is not None:
            self.sock = info["return_value"].get_extra_info("socket")
            self.progress()
            if self.halted or self.idle:  # stopped while it connected
                self._cut()

    def progress(self) -> None:
        self.last = time.monotonic()

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._done.wait(min(0.1, self.timeout / 4)):
            if self.halt is not None and self.halt.is_set():
                self.halted = True
            elif time.monotonic() - self.last > self.timeout:
                self.idle = True
            else:
                continue
            self._cut()
            return

    def _cut(self) -> None:
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _stream_once(
    config: ModelConfig,
    key: str,
    messages: list[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    on_text: Callable[[str], bool] | None,
    limit_field: str | None,
    max_tokens: int | None,
    halt: threading.Event | None,
) -> Answer:
    import httpx
    import openai
    from openai import OpenAI

    from chats.engines.http import http_client

    params: dict[str, Any] = {"model": config.model, "messages": messages, "stream": True}
    if tools:
        params["tools"] = list(tools)
    if config.temperature is not None:
        params["temperature"] = config.temperature
    if max_tokens and limit_field:
        params[limit_field] = max_tokens
    reading = _Reading()
    stopped = False
    watch = _Watch(config.timeout, halt)
    ends = _Ends()

    def traced(request: httpx.Request) -> None:
        request.extensions["trace"] = watch.trace

    # The read timeout is a backstop behind the watch, which measures chunks, not bytes.
    timeout = httpx.Timeout(config.timeout + 5, connect=config.timeout)
    try:
        with (
            watch,
            http_client(
                timeout=timeout, event_hooks={"request": [traced], "response": [ends.watch]}
            ) as http,
            OpenAI(
                base_url=config.base_url,
                api_key=key or NO_KEY,  # explicit, so the SDK never reaches for OPENAI_API_KEY
                max_retries=0,  # Conch retries itself, with its own bounds and readable reasons
                # The SDK's own annotations name its vendored httpx; the client is httpx's.
                timeout=timeout,  # type: ignore[arg-type]
                http_client=http,  # type: ignore[arg-type]
            ) as client,
        ):
            try:
                stream = client.chat.completions.create(**params)
            except httpx.TransportError as exc:
                # The server began its answer (an error's status line), then broke off
                # before its body ended: the SDK lets the transport's error out unwrapped.
                raise _Retry(ERR_CUT_OFF.format(url=config.base_url, tries="{tries}")) from exc
            watch.progress()
            with stream:
                chunks = iter(stream)
                while True:
                    try:
                        chunk = next(chunks)
                    except StopIteration:
                        break
                    except (openai.APITimeoutError, openai.APIStatusError):
                        raise
                    except openai.APIConnectionError as exc:
                        # The server answered, then the connection broke mid-answer.
                        raise _Retry(
                            ERR_CUT_OFF.format(url=config.base_url, tries="{tries}")
                        ) from exc
                    except openai.APIError:
                        raise  # the server's own words, sent as an error event
                    except ValueError as exc:  # a chunk that isn't JSON
                        if watch.halted or watch.idle:
                            break
                        raise _Retry(
                            ERR_MALFORMED.format(
                                url=config.base_url, why=str(exc)[:120], tries="{tries}"
                            )
                        ) from exc
                    except Exception as exc:
                        # Anything else the SDK's reader lets out (a new release's bug, a
                        # transport error it doesn't wrap): the answer broke off. It is
                        # never "an internal error": the server is where it went wrong.
                        if watch.halted or watch.idle:
                            break
                        log.warning("The model's stream broke off: %r", exc, exc_info=exc)
                        raise _Retry(
                            ERR_CUT_OFF.format(url=config.base_url, tries="{tries}")
                        ) from exc
                    watch.progress()
                    before = len(reading.text)
                    reading.take(chunk)
                    if reading.cut:  # LIMITS.answer_chars: the rest is never read
                        break
                    # Every chunk's words go to the page as they come: the sends that
                    # follow take only the newest of what waits (chats/events.py).
                    if on_text is not None and len(reading.text) > before:
                        if not on_text(visible(reading.words()).strip()):
                            stopped = True
                            break
    except Exception:
        if not (watch.halted or watch.idle):
            raise
    if watch.halted:
        return Answer(stopped=True)
    if watch.idle:
        raise _Retry(
            ERR_TIMEOUT.format(url=config.base_url, seconds=config.timeout, tries="{tries}")
        )
    answer = reading.answer()
    answer.stopped = stopped
    if not answer.stopped and not answer.finish_reason and not answer.cut:
        if not ends.done:
            # No finish reason and no [DONE]: the connection dropped mid-answer.
            raise _Retry(ERR_CUT_OFF.format(url=config.base_url, tries="{tries}"))
        answer.finish_reason = "stop"  # the stream said [DONE]: the answer is whole
    return answer
