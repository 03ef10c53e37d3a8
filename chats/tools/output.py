"""A command's output as it streams in: a bounded head and tail of each pipe, and its size.

``run_command`` used to read everything a command printed (``communicate()``), scrub all
of it and only then cut it to ``CONCH_COMMAND_OUTPUT_LIMIT``: 100 MB of output was held
whole and scrubbed whole. Now each pipe is read as it comes, into a :class:`Kept`, which
holds its first and last characters and counts the rest; only what is kept is scrubbed,
and only when it is shown. A command that prints more than
``CONCH_COMMAND_OUTPUT_MAX_BYTES`` in all is ended (:attr:`Output.flooded`).

Each end keeps :data:`SCRUB_MARGIN` characters more than it can ever show, so a secret
that straddles where the shown part ends is whole when it is scrubbed.
"""

from __future__ import annotations

import codecs
import os
import selectors
import subprocess
import time
from collections import deque
from collections.abc import Iterable

from chats.quoting import scrub_secrets

__all__ = ["Kept", "Output", "cut"]

# More than the longest secret shape scrubbing knows whole (a private key's body lines are
# taken out line by line), so a secret at the edge of what is shown is scrubbed whole.
SCRUB_MARGIN = 2_048
READ_BYTES = 65_536


def cut_note(count: int) -> str:
    return f"\n… ({count} characters cut) …\n"


def cut(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: its head and its tail, and what was cut."""
    if len(text) <= limit:
        return text
    return _joined(text, text, len(text), limit)


def _joined(head: str, tail: str, total: int, limit: int) -> str:
    """The start of ``head``, a note, the end of ``tail``: at most ``limit`` characters.

    ``total`` is how long the whole was; the note says how much of it is not shown.
    """
    # The longest the note can be, so the head, the note and the tail fit in the limit.
    keep = max(limit - len(cut_note(total)), 0)
    first = keep // 2
    last = keep - first
    return head[:first] + cut_note(total - keep) + (tail[-last:] if last else "")


class Kept:
    """One pipe's output: its first ``keep`` characters, its last ``keep``, and its size."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head: list[str] = []
        self._head_chars = 0
        self._tail: deque[str] = deque()
        self._tail_chars = 0
        self.chars = 0  # all it printed, in characters
        self.bytes = 0

    def add(self, data: bytes, *, final: bool = False) -> None:
        self.bytes += len(data)
        text = self._decoder.decode(data, final=final)
        self.chars += len(text)
        room = self.keep - self._head_chars
        if room > 0:
            self._head.append(text[:room])
            self._head_chars += len(self._head[-1])
            text = text[room:]
        if not text:
            return
        self._tail.append(text)
        self._tail_chars += len(text)
        while self._tail and self._tail_chars - len(self._tail[0]) >= self.keep:
            self._tail_chars -= len(self._tail.popleft())

    def close(self) -> None:
        self.add(b"", final=True)

    @property
    def whole(self) -> bool:
        """Whether nothing it printed was let go."""
        return self._head_chars + self._tail_chars == self.chars

    def shown(self, limit: int, known: Iterable[str] = ()) -> str:
        """What it printed, scrubbed, in at most ``limit`` characters (head, note, tail)."""
        known = tuple(known)
        head = "".join(self._head)
        tail = "".join(self._tail)
        if self.whole:
            return cut(scrub_secrets(head + tail, known=known), limit)
        tail = tail[-self.keep :]
        return _joined(
            scrub_secrets(head, known=known), scrub_secrets(tail, known=known), self.chars, limit
        )


class Output:
    """A running command's stdout and stderr, read as they come, each into a :class:`Kept`."""

    def __init__(self, process: subprocess.Popen, *, keep: int, max_bytes: int) -> None:
        self.process = process
        self.max_bytes = max_bytes
        self.stdout = Kept(keep + SCRUB_MARGIN)
        self.stderr = Kept(keep + SCRUB_MARGIN)
        self._selector = selectors.DefaultSelector()
        for pipe, kept in ((process.stdout, self.stdout), (process.stderr, self.stderr)):
            if pipe is not None:
                self._selector.register(pipe.fileno(), selectors.EVENT_READ, kept)

    @property
    def flooded(self) -> bool:
        return self.stdout.bytes + self.stderr.bytes > self.max_bytes

    @property
    def finished(self) -> bool:
        """Both pipes are at their end and the command has exited."""
        return not self._selector.get_map() and self.process.poll() is not None

    def read(self, seconds: float) -> None:
        """Read what comes for up to ``seconds``; back sooner if it ends or floods."""
        until = time.monotonic() + seconds
        while not self.flooded:
            left = until - time.monotonic()
            if left <= 0:
                return
            if not self._selector.get_map():
                try:
                    self.process.wait(timeout=left)
                except subprocess.TimeoutExpired:
                    pass
                return
            for key, _ in self._selector.select(timeout=left):
                kept: Kept = key.data
                data = os.read(key.fd, READ_BYTES)
                if data:
                    kept.add(data)
                else:
                    self._selector.unregister(key.fd)
                    kept.close()
            if self.finished:
                return

    def close(self) -> None:
        """Stop reading: what is still in the pipes is let go, and the pipes are closed."""
        for key in list(self._selector.get_map().values()):
            self._selector.unregister(key.fd)
            key.data.close()
        self._selector.close()
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()
