"""The workspace tools: confinement to the chat's folder, commands, arguments, edits."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chats.limits import LIMITS
from chats.models import TurnState
from chats.runtime.runner import drain
from chats.runtime.turns import message_send
from chats.tools.output import SCRUB_MARGIN, Kept
from chats.tools.registry import (
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    UnknownTool,
    get_tool,
    register,
    validate_args,
)
from chats.tools.workspace import confine
from tests.commands import PYTHON
from tests.factories import ChatFactory, ConversationFactory, TurnFactory

PATH_TOOLS = {
    "read_file": {},
    "write_file": {"content": "overwritten"},
    "edit_file": {"old": "secret", "new": "leaked"},
    "list_files": {},
}


@pytest.fixture
def ctx(owner, agent, workspace):
    chat = ConversationFactory(owner=owner, agent=agent, folder=str(workspace))
    return ToolContext(
        conversation=chat, turn=TurnFactory(conversation=chat), folder=str(workspace)
    )


@pytest.fixture
def outside(tmp_path):
    """A folder beside the chat's, with a file nobody in the chat may touch."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("secret\n")
    return folder


def run(name, ctx, **args):
    return get_tool(name).run(ctx, validate_args(get_tool(name), args))


def play(chat, text="go"):
    turn = message_send(conversation=chat, text=text)
    drain()
    turn.refresh_from_db()
    return turn


# ---------------------------------------------------------------------------
# Confinement


def _escapes(workspace, outside):
    """Paths that try to leave the folder, each in the way the test id says."""
    (workspace / "link-out").symlink_to(outside / "secret.txt")
    (workspace / "dir-out").symlink_to(outside, target_is_directory=True)
    return {
        "dot-dot": "../outside/secret.txt",
        "absolute": str(outside / "secret.txt"),
        "symlinked-file": "link-out",
        "through-symlinked-folder": "dir-out/secret.txt",
    }


@pytest.mark.parametrize(
    "how", ["dot-dot", "absolute", "symlinked-file", "through-symlinked-folder"]
)
@pytest.mark.parametrize("name", sorted(PATH_TOOLS))
def test_a_path_that_escapes_the_folder_is_refused_with_an_error_naming_it(
    ctx, workspace, outside, name, how
):
    path = _escapes(workspace, outside)[how]

    with pytest.raises(ToolError) as refused:
        run(name, ctx, path=path, **PATH_TOOLS[name])

    assert f"{path!r} is outside this chat's folder" in str(refused.value)
    assert (outside / "secret.txt").read_text() == "secret\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert ctx.files_changed == []


def test_a_path_that_escapes_through_a_symlink_is_refused_even_when_its_target_is_new(
    ctx, workspace, outside
):
    (workspace / "dangling").symlink_to(outside / "new.txt")

    with pytest.raises(ToolError, match="'dangling' is outside this chat's folder"):
        run("write_file", ctx, path="dangling", content="planted")

    assert not (outside / "new.txt").exists()


def test_a_symlink_that_stays_inside_the_folder_is_followed(ctx, workspace):
    (workspace / "real.txt").write_text("inside\n")
    (workspace / "alias.txt").symlink_to(workspace / "real.txt")

    assert run("read_file", ctx, path="alias.txt").text == "inside\n"
    run("write_file", ctx, path="alias.txt", content="changed\n")

    assert (workspace / "real.txt").read_text() == "changed\n"
    assert ctx.files_changed == [os.path.realpath(workspace / "real.txt")]


def test_an_absolute_path_inside_the_folder_is_allowed(ctx, workspace):
    (workspace / "a.txt").write_text("a\n")

    assert run("read_file", ctx, path=str(workspace / "a.txt")).text == "a\n"


def test_a_path_with_a_nul_or_an_unnameable_character_is_refused_clearly(ctx):
    with pytest.raises(ToolError, match="NUL"):
        run("read_file", ctx, path="a\x00b")
    with pytest.raises(ToolError, match="is not a path"):
        run("write_file", ctx, path="bad\ud800name", content="x")


def test_an_escape_through_a_scripted_reply_is_a_refused_step_and_the_reply_carries_on(
    agent, workspace, outside
):
    chat = ChatFactory(
        reply=[
            {"tool": "write_file", "args": {"path": "../outside/secret.txt", "content": "x"}},
            {"say": "Could not."},
        ]
    )

    turn = play(chat)

    step = turn.steps.get()
    assert "'../outside/secret.txt' is outside this chat's folder" in step.error
    assert step.files == []
    assert turn.files_changed == []
    assert turn.state == TurnState.COMPLETED
    assert (outside / "secret.txt").read_text() == "secret\n"


_PARTS = st.one_of(
    st.sampled_from(["..", ".", "", "inner", "file.txt", "out", "up", "in", "back", "home", "~"]),
    st.text(min_size=1, max_size=8).filter(lambda s: "/" not in s and "\x00" not in s),
)


@pytest.fixture(scope="module")
def maze(tmp_path_factory):
    """A chat's folder with an inner folder, a file, and links that lead in and out."""
    root = tmp_path_factory.mktemp("confine")
    home = root / "home"
    (home / "inner").mkdir(parents=True)
    (home / "file.txt").write_text("x")
    (root / "elsewhere").mkdir()
    (home / "out").symlink_to(root / "elsewhere", target_is_directory=True)
    (home / "up").symlink_to("..", target_is_directory=True)
    (home / "in").symlink_to(home / "inner", target_is_directory=True)
    (home / "inner" / "back").symlink_to("../..", target_is_directory=True)
    return home


def _inside(home: Path, path: str) -> None:
    root = Path(os.path.realpath(home))
    try:
        confined = confine(str(home), path)
    except ToolError as refused:
        assert str(refused)
        return
    assert confined == root or root in confined.parents
    assert confined == Path(os.path.realpath(confined))


@given(path=st.lists(_PARTS, min_size=1, max_size=8).map("/".join))
def test_confine_never_returns_a_path_outside_the_folder(maze, path):
    _inside(maze, path)


@given(path=st.text(max_size=40))
def test_confine_refuses_any_string_with_a_tool_error_or_keeps_it_inside(maze, path):
    _inside(maze, path)


# ---------------------------------------------------------------------------
# run_command


def test_a_command_runs_in_the_folder_and_reports_its_exit_status(ctx, workspace):
    result = run("run_command", ctx, command="pwd; echo oops >&2; exit 3")

    assert result.text.startswith("exit status 3\n")
    assert os.path.realpath(workspace) in result.text
    assert "stderr:\noops" in result.text


# A command that runs too long, and everything it started, is stopped: see
# test_commands.py, which watches it both in the sandbox and out of it.


def test_a_command_cannot_ask_for_more_time_than_the_setting_allows(ctx, settings):
    settings.CONCH_COMMAND_TIMEOUT = 0.5

    with pytest.raises(ToolError, match="within 0.5 s"):
        run("run_command", ctx, command="sleep 5", timeout=60)


def test_a_command_that_times_out_in_a_reply_is_a_clear_step_error_and_the_reply_carries_on(
    agent, settings
):
    settings.CONCH_COMMAND_TIMEOUT = 0.5
    chat = ChatFactory(
        reply=[
            {"tool": "run_command", "args": {"command": "sleep 5"}},
            {"say": "It took too long."},
        ]
    )

    turn = play(chat)

    step = turn.steps.get()
    assert step.error == "The command did not finish within 0.5 s and was stopped."
    assert step.ended_at is not None
    assert turn.state == TurnState.COMPLETED
    assert chat.entries.last().text == "It took too long."


@pytest.mark.parametrize("stream", ["stdout", "stderr", "both"])
def test_a_commands_output_is_cut_to_the_limit_keeping_its_head_and_tail(ctx, settings, stream):
    settings.CONCH_COMMAND_OUTPUT_LIMIT = 300
    body = "print('HEAD' + 'x' * 10_000 + 'TAIL'{})"
    targets = {"stdout": "", "stderr": ", file=sys.stderr"}
    chosen = ["stdout", "stderr"] if stream == "both" else [stream]
    code = "; ".join(["import sys", *(body.format(targets[s]) for s in chosen)])

    result = run("run_command", ctx, command=f'{PYTHON} -c "{code}"')

    assert len(result.text) <= 300
    assert result.text.startswith("exit status 0")
    assert result.text.count("HEAD") == len(chosen)
    assert result.text.count("TAIL") == len(chosen)
    assert "characters cut" in result.text
    assert ("stderr:\n" in result.text) == (stream != "stdout")


def test_short_output_is_given_whole(ctx, settings):
    settings.CONCH_COMMAND_OUTPUT_LIMIT = 300

    result = run("run_command", ctx, command="echo hello")

    assert result.text == "exit status 0\nhello\n"


# ---------------------------------------------------------------------------
# Arguments


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("read_file", {}, "read_file: missing argument 'path'."),
        ("write_file", {"path": "a.txt"}, "write_file: missing argument 'content'."),
        ("read_file", {"path": 3}, "read_file: argument 'path' must be string."),
        ("edit_file", {"path": "a", "old": "x", "new": "y", "all": "yes"}, "'all' must be boolean"),
        ("run_command", {"command": "ls", "timeout": True}, "'timeout' must be number"),
        ("run_command", {"command": "ls", "timeout": 0}, "'timeout' must be at least 0.1"),
        ("read_file", {"path": ""}, "argument 'path' must not be empty"),
        ("read_file", {"path": "a", "mode": "r"}, "read_file: unknown argument 'mode'."),
        ("list_files", ["a"], "list_files: arguments must be an object."),
    ],
)
def test_bad_arguments_get_a_clear_error_naming_the_argument(name, args, message):
    with pytest.raises(ToolError) as refused:
        validate_args(get_tool(name), args)

    assert message in str(refused.value)


def test_bad_arguments_in_a_reply_are_a_refused_step_and_nothing_runs(agent, workspace):
    chat = ChatFactory(
        reply=[
            {"tool": "write_file", "args": {"path": "a.txt"}},
            {"tool": "run_command", "args": {"command": "touch ran.txt", "shell": "bash"}},
            {"tool": "read_file", "args": {"path": 7}},
            {"say": "Sorry."},
        ]
    )

    turn = play(chat)

    assert [(s.tool, s.error) for s in turn.steps.order_by("number")] == [
        ("write_file", "write_file: missing argument 'content'."),
        ("run_command", "run_command: unknown argument 'shell'."),
        ("read_file", "read_file: argument 'path' must be string."),
    ]
    assert not (workspace / "a.txt").exists()
    assert not (workspace / "ran.txt").exists()
    assert turn.state == TurnState.COMPLETED


def test_an_unknown_tool_in_a_reply_is_a_refused_step(agent):
    chat = ChatFactory(reply=[{"tool": "x", "args": {}}, {"say": "Oh."}])

    turn = play(chat)

    step = turn.steps.get()
    assert (step.tool, step.error, step.family) == ("x", "There is no tool called 'x'.", "")
    assert step.ended_at is not None
    assert turn.state == TurnState.COMPLETED
    assert chat.entries.last().text == "Oh."


# ---------------------------------------------------------------------------
# Reading, writing and editing


def test_edit_file_refuses_text_that_is_not_there(ctx, workspace):
    (workspace / "a.txt").write_text("hello\n")

    with pytest.raises(ToolError, match="The text to replace was not found in 'a.txt'"):
        run("edit_file", ctx, path="a.txt", old="goodbye", new="x")

    assert (workspace / "a.txt").read_text() == "hello\n"
    assert ctx.files_changed == []


def test_edit_file_refuses_text_that_appears_twice_unless_all_is_set(ctx, workspace):
    (workspace / "a.txt").write_text("one two one\n")

    with pytest.raises(ToolError, match="appears 2 times in 'a.txt'"):
        run("edit_file", ctx, path="a.txt", old="one", new="1")
    assert (workspace / "a.txt").read_text() == "one two one\n"

    run("edit_file", ctx, path="a.txt", old="one", new="1", all=True)
    assert (workspace / "a.txt").read_text() == "1 two 1\n"


def test_edit_file_on_a_missing_file_says_to_use_write_file(ctx):
    with pytest.raises(ToolError, match="'nope.txt' does not exist; use write_file"):
        run("edit_file", ctx, path="nope.txt", old="a", new="b")


def test_write_file_creates_folders_and_reports_the_full_path_it_changed(ctx, workspace):
    result = run("write_file", ctx, path="deep/er/a.txt", content="hi")

    target = os.path.realpath(workspace / "deep" / "er" / "a.txt")
    assert result.text == "Created deep/er/a.txt (2 characters)."
    assert result.files_changed == (target,)
    assert ctx.files_changed == [target]


def test_reading_a_missing_file_or_a_folder_is_a_clear_error(ctx, workspace):
    (workspace / "sub").mkdir()

    with pytest.raises(ToolError, match="'missing.txt' does not exist"):
        run("read_file", ctx, path="missing.txt")
    with pytest.raises(ToolError, match="'sub' is a folder; use list_files"):
        run("read_file", ctx, path="sub")


def test_list_files_lists_the_folder_marking_subfolders(ctx, workspace):
    (workspace / "b.txt").write_text("")
    (workspace / "a").mkdir()

    assert run("list_files", ctx).text == "a/\nb.txt"


def _within(seconds: float, call, *, release):
    """Run ``call`` on a thread: what it returned or raised, or a failure if it hangs."""
    outcome: dict = {}

    def target():
        try:
            outcome["value"] = call()
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        release()
        thread.join(seconds)
        pytest.fail("the tool hung")
    return outcome


def _release_pipe(pipe: Path) -> None:
    """Open the other end of ``pipe`` so a tool blocked on it goes on."""
    fd = os.open(pipe, os.O_RDWR | os.O_NONBLOCK)
    os.close(fd)


@pytest.mark.parametrize(
    ("name", "args"), [("read_file", {}), ("write_file", {"content": "x"})], ids=["read", "write"]
)
def test_a_pipe_in_the_folder_is_refused_rather_than_hanging_the_reply(ctx, workspace, name, args):
    pipe = workspace / "pipe"
    os.mkfifo(pipe)

    outcome = _within(
        10, lambda: run(name, ctx, path="pipe", **args), release=lambda: _release_pipe(pipe)
    )

    assert "value" not in outcome, f"{name} used a pipe: {outcome.get('value')!r}"
    assert isinstance(outcome["error"], ToolError)
    assert str(outcome["error"]) == "'pipe' is not a regular file."


def test_reading_a_big_file_gives_its_start_and_says_where_it_was_cut(ctx, workspace):
    (workspace / "big.txt").write_bytes(b"a" * (LIMITS.file_read_bytes + 10_000))

    text = run("read_file", ctx, path="big.txt").text

    assert text == "a" * LIMITS.file_read_bytes + f"\n… (cut at {LIMITS.file_read_bytes} bytes)"


def test_a_tool_whose_family_no_app_added_is_refused():
    juggling = Tool(
        name="juggle",
        description="Test tool with a family nobody added.",
        schema={"type": "object", "properties": {}},
        family="juggling",
        effect="read",
        run=lambda ctx, args: ToolResult("juggled"),
    )
    with pytest.raises(ValueError, match="its family 'juggling' is not registered"):
        register(juggling)
    with pytest.raises(UnknownTool):
        get_tool("juggle")


# ---------------------------------------------------------------------------
# A command's output as it streams (chats/tools/output.py)


def _fed(kept, text, chunk):
    data = text.encode()
    for at in range(0, len(data), chunk):
        kept.add(data[at : at + chunk])
    kept.close()
    return kept


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_kept_output_decodes_characters_split_across_reads(chunk):
    text = "é€😀" * 500

    kept = _fed(Kept(10_000), text, chunk)

    assert kept.whole
    assert kept.chars == len(text)
    assert kept.shown(10_000) == text


def test_a_secret_where_the_shown_head_or_tail_ends_is_scrubbed_whole():
    secret = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
    limit = 300
    for edge in range(60, 200, 3):
        for text in (
            "x" * edge + secret + "y" * 100_000,  # straddles the head's end
            "y" * 100_000 + secret + "x" * edge,  # straddles the tail's start
        ):
            shown = _fed(Kept(limit + SCRUB_MARGIN), text, 4096).shown(limit)

            assert len(shown) <= limit
            assert "characters cut" in shown
            for start in range(0, len(secret) - 8):
                assert secret[start : start + 8] not in shown, (edge, shown)


def test_kept_output_holds_a_bounded_head_and_tail_whatever_comes():
    kept = Kept(1_000)
    for number in range(100_000):
        kept.add(f"line {number}\n".encode())
    kept.close()

    assert not kept.whole
    assert sum(map(len, kept._tail)) < 2_000  # bounded, however much came
    shown = kept.shown(200)
    assert shown.startswith("line 0\nline 1\n")
    assert shown.endswith("line 99999\n")
