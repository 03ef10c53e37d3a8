"""What the server's answer was, in the right words: a refusal is the reply's words, marked.

Each replays a real server's bytes (tests/engines/recordings/SOURCES.md).
"""

from __future__ import annotations

from chats.models import EntryRole, TurnState
from tests.engines.replay import Replay, stream
from tests.engines.test_failures import run
from tests.engines.test_wire import DONE, answer_of, chat_on

REFUSED = "I'm sorry, I can't assist with that request."


def test_a_refusal_is_read_as_the_answers_refusal():
    with Replay(stream("openai-refusal.sse")) as replay:
        answer = answer_of(replay)
    assert answer.refusal == REFUSED
    assert answer.text == "" and answer.words == REFUSED
    assert answer.finish_reason == "stop"


def test_a_refusal_is_the_replys_words_marked_and_the_model_reads_them_back(model_agent):
    with Replay(stream("openai-refusal.sse"), DONE) as replay:
        chat = chat_on(model_agent, replay)
        turn = run(chat)
        run(chat, text="Then tell me something else")
    assert turn.state == TurnState.COMPLETED, turn.end_reason
    first = chat.entries.filter(role=EntryRole.ASSISTANT, turn=turn).get()
    assert (first.text, first.data) == (REFUSED, {"refusal": True})
    # Next time the model reads its refusal as its own words.
    messages = replay.completions[1]["messages"]
    assert {"role": "assistant", "content": REFUSED} in messages
    assert messages[-1]["role"] == "user"
