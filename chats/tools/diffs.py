"""What a change to a file looks like to the person: a unified diff, or a new file's words.

Made once, where the change is known (before an OK, from what the file holds and
what the tool would write; after a step ran, from what it held and what it holds
now), with secrets taken out before anything is cut, and bounded by ``LIMITS``.
The records are plain JSON, stored on the step (``Step.changes``) or on the
request waiting for an OK (``Turn.pending_action["preview"]``); the page shows
them as text, escaped like every other word.
"""

from __future__ import annotations

import difflib

from chats.limits import LIMITS
from chats.quoting import scrub_secrets

# Kinds of preview a request waiting for an OK carries.
PREVIEW_FILE = "file"
PREVIEW_COMMAND = "command"
PREVIEW_FAILS = "fails"

NOTE_TOO_LARGE = "The file is larger than {limit:,} bytes; its changes are not shown."
NOTE_CUT = "Cut at {limit:,} characters."
NOTE_SAME = "No change: the file already holds these words."


def unified(path: str, before: str, after: str) -> str:
    """``difflib``'s unified diff of two texts, named ``a/path`` and ``b/path`` as git does."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    # A last line without its newline still ends its line in the diff.
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def change_record(
    *,
    path: str,
    before: str | None,
    after: str,
    known: tuple[str, ...] = (),
    too_large: bool = False,
) -> dict:
    """One file's change, as stored and shown: ``before`` None for a file made new.

    ``path`` is relative to the chat's folder. Secrets go before the text is cut.
    """
    record = {"path": path, "created": before is None, "text": "", "note": ""}
    if too_large:
        record["note"] = NOTE_TOO_LARGE.format(limit=LIMITS.diff_file_bytes)
        return record
    text = after if before is None else unified(path, before, after)
    if before is not None and not text:
        record["note"] = NOTE_SAME
    text = scrub_secrets(text, known=known)
    if len(text) > LIMITS.diff_shown_chars:
        text = text[: LIMITS.diff_shown_chars]
        record["note"] = NOTE_CUT.format(limit=LIMITS.diff_shown_chars)
    record["text"] = text
    return record
