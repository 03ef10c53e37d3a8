"""The workspace's actions: each a POST that works plainly (redirect) and under HTMX (regions)."""

from __future__ import annotations

import pytest

from chats.forms import ERR_FOLDER_MISSING, ERR_FOLDER_NOT_DIR, ERR_FOLDER_RELATIVE
from chats.models import Conversation, Mode, Status, TurnState
from chats.runtime.runner import drain
from chats.runtime.turns import ERR_AGAIN_STALE, ERR_EMPTY_MESSAGE, message_send
from chats.views import ERR_STALE_REQUEST
from tests.factories import AgentFactory, ChatFactory

pytestmark = pytest.mark.django_db


def new_chat(client, **fields):
    data = {"title": "Release notes", "folder": "", "mode": Mode.AUTO, **fields}
    if "agent" not in data:
        from chats.runtime.chats import default_agent

        data["agent"] = default_agent().pk
    return client.post("/chats/new/", data)


# ---------------------------------------------------------------------------
# New chat


def test_the_new_chat_form_makes_the_chat_and_opens_it(signed_in, owner, workspace):
    other = AgentFactory(slug="writer", name="Writer", workspace=str(workspace))

    response = new_chat(
        signed_in, title="Release notes", folder=str(workspace), agent=other.pk, mode=Mode.PLAN
    )

    chat = Conversation.objects.get(owner=owner)
    assert response.status_code == 302 and response.url == f"/c/{chat.public_id}/"
    assert (chat.title, chat.folder, chat.agent, chat.mode) == (
        "Release notes",
        str(workspace.resolve()),
        other,
        Mode.PLAN,
    )


def test_a_new_chat_without_a_folder_works_in_the_agents_folder(signed_in, owner, agent):
    new_chat(signed_in, folder="")

    assert Conversation.objects.get(owner=owner).folder == agent.workspace


def test_a_folder_with_a_tilde_is_the_home_directory(signed_in, owner, monkeypatch, tmp_path):
    (tmp_path / "src").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))

    new_chat(signed_in, folder="~/src")

    assert Conversation.objects.get(owner=owner).folder == str((tmp_path / "src").resolve())


@pytest.mark.parametrize(
    ("folder", "error"),
    [
        ("/no/such/folder", ERR_FOLDER_MISSING.format(path="/no/such/folder")),
        ("relative/path", ERR_FOLDER_RELATIVE),
    ],
)
def test_a_folder_that_is_not_there_is_refused_under_the_folder_field(
    signed_in, owner, folder, error
):
    response = new_chat(signed_in, folder=folder)

    assert response.status_code == 400
    assert response.context["form"].errors == {"folder": [error]}
    html = response.content.decode()
    assert 'id="id_folder_error"' in html and error in html
    assert not Conversation.objects.exists()


def test_a_file_is_not_a_folder(signed_in, workspace):
    (workspace / "notes.txt").write_text("hi")
    path = str(workspace / "notes.txt")

    response = new_chat(signed_in, folder=path)

    assert response.status_code == 400
    assert response.context["form"].errors == {"folder": [ERR_FOLDER_NOT_DIR.format(path=path)]}


def test_a_chat_needs_a_title_that_fits_and_a_known_agent_and_mode(signed_in):
    # An empty title is allowed (the first message names the chat: test_untitled.py).
    response = new_chat(signed_in, title="x" * 121, agent=9999, mode="yolo")

    assert response.status_code == 400
    assert set(response.context["form"].errors) == {"title", "agent", "mode"}
    assert not Conversation.objects.exists()


# ---------------------------------------------------------------------------
# Sending


def test_sending_starts_a_reply_and_comes_back_to_the_chat(signed_in, chat):
    response = signed_in.post(f"/c/{chat.public_id}/send/", {"text": "Fix it"})

    assert response.status_code == 302 and response.url == f"/c/{chat.public_id}/"
    turn = chat.turns.get()
    assert turn.entries.get().text == "Fix it"
    chat.refresh_from_db()
    assert chat.status == Status.WORKING


def test_sending_under_htmx_answers_with_the_regions(htmx, chat):
    response = htmx.post(f"/c/{chat.public_id}/send/", {"text": "Fix it"})

    html = response.content.decode()
    assert response.status_code == 200
    for element_id in ("chat-list", "chat-title", "chat-settings", "chat-controls", "transcript"):
        assert f'id="{element_id}"' in html
    assert html.count('hx-swap-oob="true"') >= 5
    assert "Fix it" in html and "/stop/" in html
    assert '<p id="composer-error" class="error" role="alert" hidden hx-swap-oob="true">' in html


def test_an_empty_message_is_refused_with_400_and_says_why(htmx, chat):
    response = htmx.post(f"/c/{chat.public_id}/send/", {"text": "   "})

    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="composer-error"' in html and 'hx-swap-oob="true"' in html
    assert ERR_EMPTY_MESSAGE in html
    assert not chat.turns.exists()


def test_a_refused_send_without_javascript_keeps_the_text(signed_in, chat):
    response = signed_in.post(f"/c/{chat.public_id}/send/", {"text": " \n "})

    assert response.status_code == 400
    html = response.content.decode()
    assert ERR_EMPTY_MESSAGE in html
    assert (
        '<textarea id="composer-text" name="text" rows="3" placeholder="Tell it what to do…" data-enter-sends autofocus> \n </textarea>'
        in html
    )


def test_a_message_while_working_waits_for_the_reply_to_end(signed_in, chat):
    message_send(conversation=chat, text="first")

    signed_in.post(f"/c/{chat.public_id}/send/", {"text": "second"})

    assert chat.turns.count() == 1
    assert list(chat.queued_inputs.values_list("text", flat=True)) == ["second"]


def test_actions_refuse_get(signed_in, chat):
    for action in ("send", "stop", "approve", "deny", "mode", "rename", "archive", "delete"):
        assert signed_in.get(f"/c/{chat.public_id}/{action}/").status_code == 405
    assert signed_in.get("/chats/new/").status_code == 405


# ---------------------------------------------------------------------------
# Stop, approve, deny


def test_stop_ends_the_running_reply(signed_in, chat):
    turn = message_send(conversation=chat, text="go")

    response = signed_in.post(f"/c/{chat.public_id}/stop/")

    assert response.status_code == 302
    turn.refresh_from_db()
    chat.refresh_from_db()
    assert turn.state == TurnState.STOPPED and chat.status == Status.STOPPED


@pytest.fixture
def asking(owner, agent, workspace):
    chat = ChatFactory(
        owner=owner,
        title="Careful",
        folder=str(workspace),
        mode=Mode.ASK,
        script=[[{"tool": "write_file", "args": {"path": "notes.txt", "content": "hi"}}]],
    )
    message_send(conversation=chat, text="Write notes")
    drain()
    return chat


def test_approve_lets_the_waiting_step_run(htmx, asking, workspace):
    response = htmx.post(f"/c/{asking.public_id}/approve/", {"turn": "1"})
    drain()

    assert response.status_code == 200
    assert (workspace / "notes.txt").read_text() == "hi"
    assert asking.turns.get().state == TurnState.COMPLETED


def test_deny_refuses_the_waiting_step(htmx, asking, workspace):
    htmx.post(f"/c/{asking.public_id}/deny/", {"turn": "1"})
    drain()

    assert not (workspace / "notes.txt").exists()
    step = asking.turns.get().steps.get()
    assert step.error == "The person said no to this."


def test_an_answer_for_a_request_the_page_no_longer_shows_is_refused(htmx, asking, workspace):
    response = htmx.post(f"/c/{asking.public_id}/approve/", {"turn": "7"})

    assert response.status_code == 400
    assert ERR_STALE_REQUEST in response.content.decode()
    assert asking.turns.get().state == TurnState.NEEDS_YOU


def test_approving_twice_is_refused_the_second_time(htmx, asking):
    assert htmx.post(f"/c/{asking.public_id}/approve/", {"turn": "1"}).status_code == 200
    second = htmx.post(f"/c/{asking.public_id}/approve/", {"turn": "1"})

    assert second.status_code == 400
    assert 'id="flash"' in second.content.decode()


# ---------------------------------------------------------------------------
# Mode, rename, archive, delete


def test_the_mode_switch_sets_the_mode(htmx, chat):
    response = htmx.post(f"/c/{chat.public_id}/mode/", {"mode": Mode.ASK})

    chat.refresh_from_db()
    assert chat.mode == Mode.ASK
    assert 'value="ask" aria-pressed="true"' in response.content.decode()


def test_an_unknown_mode_is_refused(htmx, chat):
    response = htmx.post(f"/c/{chat.public_id}/mode/", {"mode": "yolo"})

    assert response.status_code == 400
    assert "The mode must be one of" in response.content.decode()
    chat.refresh_from_db()
    assert chat.mode == Mode.AUTO


def test_rename_renames(signed_in, chat):
    signed_in.post(f"/c/{chat.public_id}/rename/", {"title": "Login bug, for real"})

    chat.refresh_from_db()
    assert chat.title == "Login bug, for real"


def test_an_empty_title_is_refused_and_shown(signed_in, chat):
    response = signed_in.post(f"/c/{chat.public_id}/rename/", {"title": ""})

    assert response.status_code == 400
    assert "title must be 1 to 120 characters" in response.content.decode()
    chat.refresh_from_db()
    assert chat.title == "Fix the login bug"


def test_archive_and_unarchive(signed_in, chat):
    signed_in.post(f"/c/{chat.public_id}/archive/", {"archived": "1"})
    chat.refresh_from_db()
    assert chat.archived
    assert f"row-{chat.public_id}" not in signed_in.get("/").content.decode()

    signed_in.post(f"/c/{chat.public_id}/archive/", {"archived": "0"})
    chat.refresh_from_db()
    assert not chat.archived


def test_delete_deletes_and_goes_home(signed_in, htmx, owner, agent):
    one = ChatFactory(owner=owner, title="One")
    two = ChatFactory(owner=owner, title="Two")

    plain = signed_in.post(f"/c/{one.public_id}/delete/")
    under_htmx = htmx.post(f"/c/{two.public_id}/delete/")

    assert plain.status_code == 302 and plain.url == "/"
    assert under_htmx.headers["HX-Redirect"] == "/"
    assert not Conversation.objects.exists()


def test_an_answer_and_a_refetch_say_the_number_read_before_their_regions(
    htmx, owner, chat, monkeypatch, django_capture_on_commit_callbacks
):
    """Read before the regions, so every event up to it is in them: an event that
    commits while they are read is left to its push (conch.js keeps the newer of an
    answer and a push that cross on the way)."""
    from chats import events, regions

    read_before: list[int] = []
    real_list_context = regions.list_context

    def list_context(**kwargs):  # another change commits as the regions are read
        read_before.append(events.current_seq(owner.pk))
        with django_capture_on_commit_callbacks(execute=True):
            events.publish_chat(chat)
        return real_list_context(**kwargs)

    monkeypatch.setattr(regions, "list_context", list_context)
    answer = htmx.post(f"/c/{chat.public_id}/rename/", {"title": "Login bug, for real"})
    refetched = htmx.get(f"/c/{chat.public_id}/regions/")
    listed = htmx.get("/chats/")

    for response, seq in zip((answer, refetched, listed), read_before, strict=True):
        assert response.content.decode().startswith(
            f'<span id="conch-seq" data-seq="{seq}" data-kind="answer"'
        )
    assert "Login bug, for real" in answer.content.decode()


# ---------------------------------------------------------------------------
# Retry and edit


def test_retry_answers_with_the_regions_and_keeps_the_earlier_version(htmx, chat):
    message_send(conversation=chat, text="Plan it")
    drain()

    response = htmx.post(f"/c/{chat.public_id}/retry/", {"turn": "1"})

    html = response.content.decode()
    assert response.status_code == 200
    assert "An earlier version of this message and its reply" in html
    assert chat.turns.get(number=1).replaced_by == 2


def test_a_retry_from_a_page_behind_the_chat_is_a_409_with_the_chat_as_it_is(htmx, chat):
    message_send(conversation=chat, text="Plan it")
    drain()
    message_send(conversation=chat, text="Another tab's message")
    drain()

    response = htmx.post(f"/c/{chat.public_id}/retry/", {"turn": "1"})

    assert response.status_code == 409
    html = response.content.decode()
    assert 'id="transcript"' in html and ERR_AGAIN_STALE in html
    assert not chat.turns.filter(replaced_by__isnull=False).exists()


def test_a_refused_edit_leaves_the_page_so_the_words_stay_in_their_box(htmx, chat):
    message_send(conversation=chat, text="Plan it")
    drain()

    response = htmx.post(f"/c/{chat.public_id}/edit/", {"turn": "1", "text": " "})

    assert response.status_code == 400
    assert 'id="transcript"' not in response.content.decode()
