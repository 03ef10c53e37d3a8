"""Every fixed bound in Conch, frozen, in one place.

Each field's name says what it bounds and in which unit (``_chars``,
``_bytes``, ``_rows``…). Error words that name a bound are formatted from
these values, so a bound changed here changes what Conch says about it.
Bounds an operator may change are settings (``conch/settings.py``), not here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

__all__ = [
    "LIMITS",
    "MESSAGE_LIMITS",
    "Limits",
    "MessageLimits",
    "duration_words",
    "size_words",
]


@dataclass(frozen=True)
class Limits:
    # Names as Conch shows them in its own line.
    title_chars: int = 120  # a chat's or a task's title
    name_chars: int = 200  # a file name, or a value in a fence's attributes
    id_chars: int = 40  # a chat's or a task's id as a model gives it
    url_shown_chars: int = 200  # an address inside Conch's line or an error

    # Words between chats (ADR 0134).
    message_chars: int = 8_000  # message_chat's words
    stop_reason_chars: int = 300  # stop_chat's reason
    last_reply_chars: int = 800  # a finished chat's last reply, when a wait on it ends
    list_chats_rows: int = 12
    reader_lines_per_turn: int = 4  # notes about other chats in one reply

    # Reading past chats (search_chats, read_chat).
    search_query_chars: int = 300
    search_query_shown_chars: int = 80
    search_title_chars: int = 60
    search_results: int = 5
    search_results_max: int = 10
    read_chat_replies: int = 5
    read_chat_replies_max: int = 10
    past_offset_max: int = 100_000
    snippet_chars: int = 160

    # A reply's steps and tools.
    tool_result_chars: int = 4_000  # what one step hands the model and keeps
    # One answer from a model: its words (and its thinking, and its calls' arguments, each)
    # are cut here as they stream in, and the calls past the first ones are refused in words.
    answer_chars: int = 100_000
    answer_tool_calls: int = 32
    stream_chars: int = 20_000  # the most of a reply's live words one event carries
    file_read_bytes: int = 200_000  # read_file
    folder_list_names: int = 500  # list_files
    url_chars: int = 2_000  # fetch_page's address
    page_text_chars: int = 3_000  # one fetch_page answer; its frame and fence fit the rest
    page_redirects: int = 5
    deny_reason_chars: int = 1_000  # the person's reason for a Deny, which the model reads
    # What a file change shows the person (before an OK, and after the step ran).
    diff_file_bytes: int = 200_000  # a file larger than this is not read for a diff
    diff_shown_chars: int = 12_000  # one file's diff, or a new file's words, as shown

    # Summaries (compaction's recap, and the recap of a chat too long for its model).
    summary_chars: int = 4_000
    # What one summary request reads beside the earlier recap; a longer stretch is folded
    # in at most summary_folds requests, each one's summary the next one's earlier recap.
    summary_read_chars: int = 32_000
    summary_folds: int = 8
    summary_line_chars: int = 200

    # The gateway's doors.
    inbound_text_chars: int = 32_000
    inbound_id_chars: int = 128
    inbound_message_id_chars: int = 200
    inbound_roles: int = 256  # a member's role ids in one message
    in_reply_to_chars: int = 2_000  # the message a chat app's message answers, as quoted
    # An inbound message is at most inbound_text_chars of words (six bytes each as
    # \uXXXX escapes) and a few ids; a Telegram Update carrying one is far smaller.
    inbound_body_bytes: int = 1_000_000
    # An inbound message nests two levels and a Telegram Update about six; Python's
    # parser stops near a thousand with a RecursionError.
    inbound_depth_levels: int = 32
    request_body_bytes: int = 2 * 1024 * 1024  # any request, at the ASGI door
    telegram_message_chars: int = 4_096  # the Bot API's own bound on sendMessage
    playground_bindings: int = 60
    playground_log_messages: int = 40
    # An archive's word on a session's trust timeline, kept by conch_import as its claims:
    # so many rises, each detail so many keys, each of its words cut at name_chars.
    import_claims_rows: int = 20
    import_claim_detail_keys: int = 8

    # A chat's trust timeline (chats/timeline.py). Taint only grows, so a chat has a rise
    # or two; the path back through other chats is followed this many chats at most.
    trust_rows: int = 12
    trust_path_hops: int = 6


@dataclass(frozen=True)
class MessageLimits:
    """Fixed bounds on chats talking to each other (ADR 0134's ``MESSAGE_LIMITS``).

    A chain's count goes through every reply it leads to.
    """

    messages_per_chain: int = 8
    replies_started_per_chain: int = 4
    messages_per_pair: int = 3
    waiting_per_chat: int = 5
    same_words_window: timedelta = timedelta(minutes=10)


LIMITS = Limits()
MESSAGE_LIMITS = MessageLimits()


def duration_words(span: timedelta) -> str:
    """A span as a person says it: "10 minutes", "1 hour", "90 seconds"."""
    seconds = int(span.total_seconds())
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{seconds} second{'' if seconds == 1 else 's'}"


def size_words(count: int) -> str:
    """A size in bytes as a person says it: "32 MB", "64 KB", "100 bytes"."""
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if count >= size:
            whole, part = divmod(count, size)
            return f"{whole} {unit}" if not part else f"{count / size:.1f} {unit}"
    return f"{count} byte{'' if count == 1 else 's'}"
