"""conch_demo: live demo chats, seeded once, whose scripts play to their ends."""

from __future__ import annotations

import io

from django.core.management import call_command

from chats.engines.scripted import validate_script
from chats.management.commands.conch_demo import DEMO_FILES, demo_chats
from chats.models import Conversation, Turn, TurnState
from chats.runtime.runner import drain


def _demo_ids() -> list[str]:
    return [demo.public_id for demo in demo_chats()]


def test_the_demo_seeds_live_chats_with_running_replies(owner, agent, workspace):
    call_command("conch_demo", stdout=io.StringIO())
    chats = Conversation.objects.filter(public_id__in=_demo_ids())
    assert chats.count() == len(_demo_ids()) >= 2
    for chat in chats:
        assert chat.owner == owner
        assert chat.folder == str(workspace / "demo")
        turn = chat.turns.get()
        assert (turn.state, turn.claimed_by) == (TurnState.RUNNING, "")
    for name, text in DEMO_FILES.items():
        assert (workspace / "demo" / name).read_text() == text


def test_running_the_demo_twice_does_not_duplicate_it(owner, agent, workspace):
    call_command("conch_demo", stdout=io.StringIO())
    (workspace / "demo" / "greet.py").write_text("edited by a demo chat\n")
    call_command("conch_demo", stdout=io.StringIO())
    assert Conversation.objects.filter(public_id__in=_demo_ids()).count() == len(_demo_ids())
    assert Conversation.objects.count() == len(_demo_ids())
    assert Turn.objects.count() == len(_demo_ids())
    assert (workspace / "demo" / "greet.py").read_text() == "edited by a demo chat\n"


def test_the_demo_scripts_pause_between_actions_and_play_to_their_ends(owner, agent, workspace):
    for demo in demo_chats():
        validate_script(demo.script)
        assert all(1 <= action["delay"] <= 3 for reply in demo.script for action in reply)
    call_command("conch_demo", stdout=io.StringIO())
    drain()  # without the delays
    states = {
        chat.public_id: chat.turns.get().state
        for chat in Conversation.objects.filter(public_id__in=_demo_ids())
    }
    assert states == {
        "c_demo_tidy": TurnState.COMPLETED,
        "c_demo_notes": TurnState.COMPLETED,
        "c_demo_ask": TurnState.NEEDS_YOU,
    }
    assert 'return f"Hello, {name}!"' in (workspace / "demo" / "greet.py").read_text()
    tidy_run = Turn.objects.get(conversation__public_id="c_demo_tidy").steps.get(tool="run_command")
    assert tidy_run.result == "exit status 0\nHello, world!\n"
