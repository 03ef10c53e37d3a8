from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from chats import events
from chats.limits import LIMITS
from chats.models import Conversation, Entry, EntryKind, Origin, Status, Taint, Turn
from chats.runtime.chats import conversation_archive
from chats.runtime.turns import task_start
from chats.tools.registry import tools_offered
from tests.factories import ChatFactory
from tests.together.conftest import edit, look, write
from together.listing import CHATS_LISTED, list_chats
from together.visibility import is_yours, offers_together


def names(look):
    return [row.title for row in look.rows]


def test_busy_chats_come_first_then_those_that_need_you_then_recent(stage):
    me = ChatFactory(title="Me")
    idle = ChatFactory(title="Idle recently")
    needs = ChatFactory(title="Needs you", script=[[{"ask": "Which branch?"}]])
    stage.start(needs)
    stage.step(needs)
    busy = ChatFactory(title="Busy", script=[[write("a.py"), look()]])
    stage.start(busy)
    stage.step(busy)
    look_ = list_chats(conversation=me)
    assert names(look_) == ["Busy", "Needs you", "Idle recently"]
    assert look_.working == 1 and look_.needs_you == 1
    assert idle.public_id in [r.id for r in look_.rows]


def test_working_gives_only_the_busy_ones(stage):
    me = ChatFactory(title="Me")
    ChatFactory(title="Idle")
    busy = ChatFactory(title="Busy", script=[[look(), look()]])
    stage.start(busy)
    assert names(list_chats(conversation=me, which="working")) == ["Busy"]


def test_chats_idle_for_more_than_three_days_are_left_out(stage):
    me = ChatFactory(title="Me")
    old = ChatFactory(title="Old")
    Conversation.objects.filter(pk=old.pk).update(
        last_interaction_at=timezone.now() - timedelta(days=4)
    )
    assert "Old" not in names(list_chats(conversation=me))


def test_twelve_at_most_but_every_busy_chat_is_counted(stage):
    me = ChatFactory(title="Me")
    for n in range(15):
        chat = ChatFactory(title=f"Busy {n}", script=[[look(), look()]])
        stage.start(chat)
    look_ = list_chats(conversation=me)
    assert len(look_.rows) == LIMITS.list_chats_rows
    assert look_.working == 15
    assert look_.headline == "Checked on your other chats · 15 working"


def test_archived_chats_are_left_out_unless_working(stage):
    me = ChatFactory(title="Me")
    quiet = ChatFactory(title="Archived quiet")
    busy = ChatFactory(title="Archived busy", script=[[look(), look()]])
    stage.start(busy)
    conversation_archive(conversation=quiet)
    conversation_archive(conversation=busy)
    assert names(list_chats(conversation=me)) == ["Archived busy"]


def test_a_row_says_what_a_busy_chat_is_doing_and_which_files(stage, workspace):
    (workspace / "auth.ts").write_text("a")
    me = ChatFactory(title="Me")
    busy = ChatFactory(
        title="Fix login",
        script=[[write("a.ts"), write("b.ts"), edit("auth.ts", "a", "b"), look()]],
    )
    stage.start(busy)
    stage.step(busy, 3)
    Turn.objects.filter(conversation=busy).update(
        step_family="editing files", step_started_at=timezone.now()
    )
    row = list_chats(conversation=me).rows[0]
    assert row.state == Status.WORKING
    assert row.doing == "editing files"
    assert row.doing_seconds is not None and row.doing_seconds >= 0
    assert row.same_folder is True and row.folder == ""
    assert row.files_changed == ("a.ts", "b.ts", "auth.ts")
    assert row.changing == "Changing auth.ts +2"
    assert row.reply_started_at is not None
    assert row.came_from == "you"


def test_a_chat_in_another_folder_shows_its_folder_as_a_person_reads_it(stage, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    me = ChatFactory(title="Me")
    ChatFactory(title="Away", folder=elsewhere)
    row = list_chats(conversation=me).rows[0]
    assert row.same_folder is False
    assert row.folder == str(elsewhere.resolve())


def test_where_a_chat_came_from(stage):
    me = ChatFactory(title="Me")
    task_start(parent=me, title="Run the checks", script=[[look(), look()]])
    ChatFactory(title="Nightly", origin=Origin.ROUTINE)
    ChatFactory(title="Phone", chat_app=True)
    came = {row.title: row.came_from for row in list_chats(conversation=me).rows}
    assert came["Run the checks"] == "a task from this chat"
    assert came["Nightly"] == "a routine"
    assert came["Phone"] == "Telegram"
    other = ChatFactory(title="Other")
    came = {row.title: row.came_from for row in list_chats(conversation=other).rows}
    assert came["Run the checks"] == "a task from “Me”"


def test_a_row_counts_tasks_still_going_and_marks_untrusted(stage):
    me = ChatFactory(title="Me")
    reader = ChatFactory(title="Reader", taint=Taint.UNTRUSTED)
    task_start(parent=reader, title="Task", script=[[look(), look()]])
    row = next(r for r in list_chats(conversation=me).rows if r.title == "Reader")
    assert row.tasks_going == 1
    assert row.untrusted is True


def test_list_chats_is_offered_only_to_a_chat_you_are_in_or_your_own_chat_app_chat(stage, outsider):
    offered = {
        "own": ChatFactory(title="Own"),
        "own chat app": ChatFactory(title="DM", chat_app=True),
    }
    refused = {
        "routine": ChatFactory(title="Routine", origin=Origin.ROUTINE),
        "task": ChatFactory(title="Task", origin=Origin.TASK),
        "another app": ChatFactory(title="Client", origin=Origin.CLIENT),
        "outside agent": ChatFactory(title="Peer", origin=Origin.PEER),
        "artifact": ChatFactory(title="Artifact", origin=Origin.ARTIFACT),
        "someone else's words": outsider,
    }
    for chat in offered.values():
        assert offers_together(chat)
        assert "list_chats" in [t.name for t in tools_offered(chat)]
    for why, chat in refused.items():
        assert not offers_together(chat), why
        assert "list_chats" not in [t.name for t in tools_offered(chat)], why


def test_is_yours_leaves_out_peer_client_artifact_and_person_tainted_chats(stage, second_owner):
    mine = ChatFactory(title="Mine")
    assert is_yours(mine, owner_id=stage.owner.pk)
    assert not is_yours(mine, owner_id=second_owner.pk)
    for origin in (Origin.PEER, Origin.CLIENT, Origin.ARTIFACT):
        assert not is_yours(ChatFactory(title=origin, origin=origin), owner_id=stage.owner.pk)
    assert not is_yours(ChatFactory(title="Group", taint=Taint.PERSON), owner_id=stage.owner.pk)


def test_the_tool_records_the_other_chats_look_card_and_event(
    stage, django_capture_on_commit_callbacks
):
    seen = []
    unsubscribe = events.subscribe(lambda e: seen.append(e))
    try:
        with django_capture_on_commit_callbacks(execute=True):
            busy = ChatFactory(title="Busy", script=[[look(), look()]])
            stage.start(busy)
            needs = ChatFactory(title="Needs", script=[[{"ask": "?"}]])
            stage.start(needs)
            stage.step(needs)
            me = ChatFactory(title="Me", script=[[{"tool": "list_chats", "args": {}}]])
            stage.start(me)
            stage.step(me, 2)
    finally:
        unsubscribe()
    card = Entry.objects.get(conversation=me, kind=EntryKind.CARD)
    assert card.text == "Checked on your other chats · 1 working · 1 needs you"
    assert [r["id"] for r in card.data["rows"]] == [busy.public_id, needs.public_id]
    step = Turn.objects.get(conversation=me).steps.get()
    assert step.family == "looking at your other chats"
    assert f"{busy.public_id} “Busy”: working" in step.result
    assert any(e.type == CHATS_LISTED and e.conversation_id == me.public_id for e in seen)
