"""No secret shape crosses between chats, by any path.

The corpus is 60+ shapes: two of gitleaks' own true positives from each rule file it has
samples in (tests/fixtures/gitleaks_samples.json, see tests/fixtures/gitleaks_samples.py), and
the shapes once seen crossing between chats (tests/chats/test_secret_shapes.py). Each goes through every
path words take from one chat to another: a message (its stored words, the note the receiver
reads, the sender's step arguments), a wait that wakes, a wait_for that answers at once,
read_chat, and search_chats' snippets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chats.models import Entry, Step
from chats.runtime.runner import drain
from chats.secretshapes import secret_spans
from tests.chats.test_secret_shapes import ISSUE_SHAPES, NOT_ONE_LINE, PIECES_SHAPES
from tests.factories import ChatFactory
from tests.together.conftest import look, message, wait_chat
from tests.together.test_past import reply, run
from tests.together.test_waits import first_words, result, woken_turn
from together import past
from together.models import ChatMessage

_SAMPLES = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "gitleaks_samples.json").read_text()
)["samples"]


def _corpus() -> list[tuple[str, list[str]]]:
    """(text, the secret parts of it that must not cross): two gitleaks samples per rule file."""
    seen: list[str] = []
    shapes = []
    for sample in _SAMPLES:
        text = sample.get("text", "")
        if sample["kind"] != "literal" or seen.count(sample["from"]) >= 2 or text in NOT_ONE_LINE:
            continue
        if len(text) > 300 or "\n" in text:
            continue
        seen.append(sample["from"])
        shapes.append((text, [text[a:b] for a, b in secret_spans(text)]))
    shapes += [(text, [fragment]) for text, fragment in ISSUE_SHAPES.items()]
    shapes += [(text, [fragment]) for text, fragment in PIECES_SHAPES.items()]
    return shapes


CORPUS = _corpus()


def _crossed(words: str, shapes=CORPUS) -> list[str]:
    return [secret for _, secrets in shapes for secret in secrets if secret in words]


def _batches(limit: int) -> list[list[tuple[str, list[str]]]]:
    """The corpus in pieces that fit ``limit`` characters, one shape a line."""
    batches, batch, size = [], [], 0
    for shape in CORPUS:
        if batch and size + len(shape[0]) + 1 > limit:
            batches.append(batch)
            batch, size = [], 0
        batch.append(shape)
        size += len(shape[0]) + 1
    return [*batches, batch]


def _joined(batch) -> str:
    return "\n".join(text for text, _ in batch)


def test_the_corpus_has_at_least_50_shapes_each_with_a_secret_in_it():
    assert len(CORPUS) >= 50
    assert all(secrets for _, secrets in CORPUS)


def test_a_message_carries_no_secret_in_its_words_its_note_or_the_senders_step(live):
    receiver = ChatFactory(title="Receiver", script=[[look()]])
    words = _joined(CORPUS)
    assert len(words) < 8_000
    sender = ChatFactory(title="Sender", script=[[message(receiver, words)]])
    live.start(sender)
    drain()
    live.start(receiver)
    drain()
    stored = ChatMessage.objects.get().text
    note = "\n".join(
        Entry.objects.filter(conversation=receiver, text__contains="<chat-message>").values_list(
            "text", flat=True
        )
    )
    args = json.dumps(Step.objects.get(turn__conversation=sender, tool="message_chat").args)
    assert "<chat-message>" in note
    assert _crossed(stored) == [] and _crossed(note) == [] and _crossed(args) == []


@pytest.mark.parametrize("batch", range(len(_batches(800))))
def test_a_wait_that_wakes_and_one_that_answers_at_once_carry_no_secret(live, batch):
    shapes = _batches(800)[batch]
    said = _joined(shapes)
    # Woken: the waiter lets go, and hears the last reply when the other chat finishes.
    target = ChatFactory(title="Target", script=[[look(), {"say": said}]])
    live.start(target)
    waiter = ChatFactory(title="Waiter", script=[[wait_chat(target)], [look()]])
    live.start(waiter)
    live.step(waiter, 2)
    drain()
    woken = first_words(woken_turn(waiter))
    assert "<chat-reply" in woken and _crossed(woken, shapes) == []
    # Answered at once: the other chat had already finished.
    at_once = ChatFactory(title="Asks late", script=[[wait_chat(target), {"say": "ok"}]])
    live.start(at_once)
    drain()
    answer = result(at_once)[0]
    assert "finished its reply" in answer and _crossed(answer, shapes) == []


def test_read_chat_and_search_chats_carry_no_secret(owner, agent):
    reader = ChatFactory(owner=owner, title="Reader")
    other = ChatFactory(owner=owner, title="Keys")
    for text, _ in CORPUS:
        reply(other, "what is it", f"quokka {text}")
    read = "".join(
        run(past.READ_CHAT, reader, chat=other.public_id, offset=offset, limit=10)
        for offset in range(0, len(CORPUS), 10)
    )
    assert read.count("quokka") == len(CORPUS) and _crossed(read) == []
    # Each shape in a chat of its own, so every one is a hit of its own.
    for text, _ in CORPUS:
        reply(ChatFactory(owner=owner, title="Notes"), "what is it", f"wombat {text}")
    snippets = []
    for offset in range(0, len(CORPUS), 10):
        found = past.past_search(reader=reader, query="wombat", limit=10, offset=offset)
        snippets += [hit.snippet for hit in found.hits]
        answer = past.search_answer(found)
        assert _crossed(answer) == []
    assert len(snippets) == len(CORPUS) and _crossed("\n".join(snippets)) == []
