from chats.models import Status, TurnState
from chats.runtime.runner import drain
from chats.runtime.turns import message_send
from tests.factories import ChatFactory


def test_a_scripted_reply_edits_a_file(owner, agent, workspace):
    (workspace / "a.txt").write_text("hello\n")
    chat = ChatFactory(
        owner=owner,
        title="Fix",
        folder=str(workspace),
        script=[
            [
                {"tool": "edit_file", "args": {"path": "a.txt", "old": "hello", "new": "bye"}},
                {"say": "Done."},
            ]
        ],
    )
    turn = message_send(conversation=chat, text="go")
    drain()
    turn.refresh_from_db()
    chat.refresh_from_db()
    assert turn.state == TurnState.COMPLETED
    assert chat.status == Status.IDLE
    assert turn.files_changed == [str((workspace / "a.txt").resolve())]
    assert (workspace / "a.txt").read_text() == "bye\n"
