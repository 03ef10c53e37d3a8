"""conch_demo: live demo chats, seeded once, whose scripts play to their ends."""

from __future__ import annotations

import io

from django.core.management import call_command
from django.test import Client

from chats.demo import demo_start_pending
from chats.engines.scripted import validate_script
from chats.management.commands.conch_demo import DEMO_FILES, demo_chats
from chats.models import Conversation, Turn, TurnState
from chats.runtime.runner import drain


def _demo_ids() -> list[str]:
    return [demo.public_id for demo in demo_chats()]


def test_the_demo_seeds_chats_whose_replies_start_on_the_first_visit(
    owner, agent, workspace, settings, tmp_path
):
    settings.CONCH_HOME = tmp_path
    out = io.StringIO()
    call_command("conch_demo", stdout=out)
    assert "Run `conch serve`" in out.getvalue()  # run alone, it says how to watch them
    chats = Conversation.objects.filter(public_id__in=_demo_ids())
    assert chats.count() == len(_demo_ids()) >= 2
    assert not Turn.objects.exists()  # nothing plays before anyone looks

    client = Client()
    client.force_login(owner)
    assert client.get("/").status_code == 200  # the first visit starts them
    assert client.get("/").status_code == 200  # and a second starts nothing more
    for chat in chats:
        assert chat.owner == owner
        assert chat.folder == str(workspace / "demo")
        turn = chat.turns.get()
        assert (turn.state, turn.claimed_by) == (TurnState.RUNNING, "")
    for name, text in DEMO_FILES.items():
        assert (workspace / "demo" / name).read_text() == text


def test_serve_demo_does_not_tell_you_to_run_conch_serve(owner, agent, settings, tmp_path):
    settings.CONCH_HOME = tmp_path
    out = io.StringIO()
    call_command("conch_demo", serving=True, stdout=out)
    assert "their replies start when you first open Conch" in out.getvalue()
    assert "conch serve" not in out.getvalue()


def test_running_the_demo_twice_does_not_duplicate_it(owner, agent, workspace, settings, tmp_path):
    settings.CONCH_HOME = tmp_path
    call_command("conch_demo", stdout=io.StringIO())
    demo_start_pending()
    (workspace / "demo" / "greet.py").write_text("edited by a demo chat\n")
    call_command("conch_demo", stdout=io.StringIO())
    demo_start_pending()
    assert Conversation.objects.filter(public_id__in=_demo_ids()).count() == len(_demo_ids())
    assert Conversation.objects.count() == len(_demo_ids())
    assert Turn.objects.count() == len(_demo_ids())
    assert (workspace / "demo" / "greet.py").read_text() == "edited by a demo chat\n"


def test_the_demo_scripts_pause_between_actions_and_play_to_their_ends(
    owner, agent, workspace, settings, tmp_path
):
    settings.CONCH_HOME = tmp_path
    for demo in demo_chats():
        validate_script(demo.script)
        assert all(1 <= action["delay"] <= 3 for reply in demo.script for action in reply)
    call_command("conch_demo", stdout=io.StringIO())
    demo_start_pending()
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
