"""A model's answer is bounded as it streams in (chats/limits.py).

A 100 MB answer was kept whole as one entry (a 104 MB page, 1 GB of memory); one answer of
10,000 write_file calls was queued whole. Now an answer's words are cut at
LIMITS.answer_chars, with a note saying so, and the calls past LIMITS.answer_tool_calls are
refused in words, to the model and to the person.
"""

from __future__ import annotations

from chats.limits import LIMITS
from chats.models import Entry, EntryRole, Step, TurnState
from chats.quoting import is_conch_note
from chats.runtime.runner import drain
from chats.runtime.turns import message_send
from tests.engines.fake_openai import Text, calls
from tests.factories import ChatFactory


def test_an_answer_past_its_bound_is_cut_as_it_streams_with_a_note(model_agent, fake):
    chunk = "flood " * 2_000  # 12,000 characters a piece
    pieces = 100  # 1.2 million characters offered; far fewer are read
    fake.play(Text(chunk * pieces, pieces=pieces))
    chat = ChatFactory(agent=model_agent, title="Flood")
    turn = message_send(conversation=chat, text="say a lot")
    drain()
    turn.refresh_from_db()
    assert turn.state == TurnState.COMPLETED
    said = Entry.objects.filter(conversation=chat, role=EntryRole.ASSISTANT).get().text
    words, note = said.rsplit("\n\n", 1)
    assert len(words) <= LIMITS.answer_chars and words.startswith("flood flood")
    assert len(words) > LIMITS.answer_chars - len(chunk)
    assert is_conch_note(note)
    assert f"cut at {LIMITS.answer_chars} characters" in note


def test_calls_past_the_bound_in_one_answer_are_refused_in_words(model_agent, fake, workspace):
    many = LIMITS.answer_tool_calls + 40
    fake.play(
        calls(*[("write_file", {"path": f"f{n}.txt", "content": "x"}) for n in range(many)]),
        Text("Wrote what I could."),
    )
    chat = ChatFactory(agent=model_agent, title="Many files")
    turn = message_send(conversation=chat, text="write many files")
    drain()
    turn.refresh_from_db()
    assert turn.state == TurnState.COMPLETED
    assert Step.objects.filter(turn=turn, tool="write_file").count() == LIMITS.answer_tool_calls
    written = sorted(p.name for p in workspace.glob("f*.txt"))
    assert len(written) == LIMITS.answer_tool_calls
    assert not (workspace / f"f{LIMITS.answer_tool_calls}.txt").exists()
    note = Entry.objects.filter(conversation=chat, role=EntryRole.ASSISTANT).first().text
    assert is_conch_note(note)
    assert f"asked for {many} tool calls" in note and "the other 40 were refused" in note
    # The model reads the refusal too: it is in what the next request carried.
    second = fake.completions[1]
    assert any("the other 40 were refused" in str(m.get("content")) for m in second.messages)
