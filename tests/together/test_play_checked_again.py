"""Each defence played as a scenario (scenarios/*.json), checked on its --json report."""

from __future__ import annotations

import json

import pytest

from chats.quoting import angle_of
from chats.refusals import IN_PLAN_MODE_NOW, for_person
from tests.together.plays import chats_of, reports_played, steps
from together import messages as msgs

SCENARIOS = (
    "undeliverable_starts_nothing",
    "approved_then_plan_mode",
    "secrets_in_pieces",
    "lookalike_angle_brackets",
    "chain_spent_is_not_on_its_way_in",
)
KEY_PIECES = ("MIIEowIBAAK", "VTLw7onLRnrq0", "LxoS2tFczGkP", "9z+40RQzuVaE8", "PRIVATE KEY")
TOKEN_PIECES = ("ghp_16C7e42F292c6912E", "7710c838347Ae178B4a")


@pytest.fixture(scope="module")
def reports(play_template) -> dict[str, dict]:
    return reports_played(SCENARIOS, play_template)


def history(message):
    return [h["state"] for h in message["history"]]


def test_item_1_a_message_that_can_no_longer_be_delivered_starts_nothing(reports):
    report = reports["undeliverable_starts_nothing"]
    chats = chats_of(report)
    fix, group, build = chats["fix"], chats["group"], chats["build"]
    turned_away = "That chat turned messages from other chats away."
    # Held, then turned away, then passed on: the press says so in words, and nothing starts.
    assert fix["presses"] == [
        {
            "at": 3,
            "action": "pass",
            "message": 1,
            "id": "m_1",
            "state": "not_delivered",
            "said": msgs.ERR_NOT_DELIVERED.format(why=turned_away),
        }
    ]
    assert fix["replies"] == []
    [to_fix] = fix["messages"]
    assert (to_fix["state"], to_fix["reason"]) == ("not_delivered", turned_away)
    assert history(to_fix) == ["held", "not_delivered"]
    # Held, then someone else's words came in: no reply starts for the message in a chat with a stranger.
    [pressed] = group["presses"]
    assert pressed["state"] == "not_delivered" and "Someone else's words" in pressed["said"]
    assert [r["started_by"] for r in group["replies"]] != [] and all(
        r["started_by"] != "message" for r in group["replies"]
    )
    assert not any(
        "Is the team happy" in e["text"] for e in group["transcript"] if e["kind"] != "card"
    )
    # Busy, a tainted chat's start_reply message, then turned away before the reply ended.
    assert [r["started_by"] for r in build["replies"]] == ["person"]
    [to_build] = build["messages"]
    assert (to_build["state"], to_build["reason"]) == ("not_delivered", turned_away)
    assert history(to_build) == ["waiting", "not_delivered"]
    # Nothing was counted: no chain started a reply.
    assert {chain["replies_started"] for chain in report["chains"]} == {0}


def test_item_2_an_approval_is_looked_at_again_when_its_step_runs(reports):
    chats = chats_of(reports["approved_then_plan_mode"])
    build, ask = chats["build"], chats["ask"]
    assert [(r["state"], r["started_by"]) for r in build["replies"]] == [("completed", "person")]
    assert build["transcript"][-1]["text"] == "Built."  # stopped by no one
    [stop] = [s for s in steps(ask) if s["tool"] == "stop_chat"]
    assert stop["error"] == IN_PLAN_MODE_NOW.for_model(tool="stop_chat")
    assert for_person(stop["error"]).startswith("Not run: you approved stop_chat, but")
    assert ask["mode"] == "plan"


def test_item_3_no_piece_of_a_key_or_a_token_reaches_another_chat(reports):
    chats = chats_of(reports["secrets_in_pieces"])
    notes, waiter, keys = chats["notes"], chats["waiter"], chats["keys"]
    heard = json.dumps([notes, waiter], ensure_ascii=False)
    assert heard.count("[redacted]") >= 4  # both halves of the key, the token twice
    assert "<chat-reply" in heard and "<chat-message>" in heard
    assert [r["started_by"] for r in waiter["replies"]] == ["person", "wait"]
    stored_args = json.dumps([s["args"] for s in steps(keys)], ensure_ascii=False)
    for piece in KEY_PIECES + TOKEN_PIECES:
        assert piece not in heard, piece
        assert piece not in stored_args, piece


def test_item_4_lookalike_angle_brackets_do_not_close_a_fence(reports):
    chats = chats_of(reports["lookalike_angle_brackets"])
    note = next(e["text"] for e in chats["notes"]["transcript"] if "<chat-message>" in e["text"])
    woken = next(e["text"] for e in chats["waiter"]["transcript"] if "<chat-reply" in e["text"])
    for text, tag in ((note, "chat-message"), (woken, "chat-reply")):
        inner = text.split(f"<{tag}", 1)[1].split("\n", 1)[1].rsplit(f"\n</{tag}>", 1)[0]
        assert text.endswith(f"\n</{tag}>") and text.count(f"</{tag}>") == 1
        assert [ch for ch in inner if angle_of(ch)] == []
        assert f"≺/{tag}≻" in inner and "(Conch: the person approves" in inner
    assert note.count("≺/chat-message≻") == 6


def test_item_5_a_message_that_cannot_start_a_reply_is_not_on_its_way_in(reports):
    report = reports["chain_spent_is_not_on_its_way_in"]
    chats = chats_of(report)
    build, waiter = chats["build"], chats["waiter"]
    [chain] = report["chains"]
    assert chain["replies_started"] == msgs.MESSAGE_LIMITS.replies_started_per_chain
    assert [r["started_by"] for r in build["replies"]] == ["person"]
    [waiting] = build["messages"]
    assert (waiting["state"], waiting["start_reply"]) == ("waiting", True)
    # The waiter hears at once: the chat is idle, and a message waits for its next reply.
    [reply] = waiter["replies"]
    assert reply["state"] == "completed"
    [wait] = steps(waiter)
    assert wait["result"].startswith("[Conch: “Long build” finished its reply.")
    assert "1 message from other chats waits for it, unread until its next reply." in wait["result"]
    assert waiter["waits"] == []  # answered at once: no wait was made, so none waits for ever
