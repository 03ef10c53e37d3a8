"""The file tools open what they checked: a link swapped in after the check is never followed.

Each test runs twice: with the kernel's ``openat2`` walk, and with the walk by
hand that Conch uses where ``openat2`` is missing.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time

import pytest

from chats.tools import beneath
from chats.tools import workspace as workspace_tools
from chats.tools.registry import ToolContext, ToolError, get_tool, validate_args
from chats.tools.workspace import ERR_LINK_ON_THE_WAY
from tests.factories import ConversationFactory, TurnFactory

SECRET = "the outside secret\n"
INSIDE = "inside\n"
TRIES = 10_000
# The race, a whole minute at most; it takes a few seconds on an idle machine.
RACE_DEADLINE = 60.0

# A separate process that swaps the chat's folder `d` and its twin `swap` as fast as it
# can, with renameat2(RENAME_EXCHANGE): one is a real folder, the other a link to outside.
SWAPPER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = (os.fsencode(p) for p in sys.argv[1:3])
AT_FDCWD, RENAME_EXCHANGE = -100, 2
def swap():
    if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        sys.exit(f"renameat2 failed: {os.strerror(code)}")
swap()
print("swapping", flush=True)
while True:
    swap()
"""


@pytest.fixture(params=["openat2", "walk"])
def how(request, monkeypatch):
    """Which walk ``open_beneath`` takes: the kernel's, or the one by hand."""
    if request.param == "openat2":
        if not beneath.openat2_available():
            pytest.fail("this Linux has no openat2: the kernel's walk cannot be tested here")
    else:
        monkeypatch.setattr(beneath, "_openat2_works", False)
    return request.param


@pytest.fixture
def ctx(owner, agent, workspace):
    chat = ConversationFactory(owner=owner, agent=agent, folder=str(workspace))
    return ToolContext(
        conversation=chat, turn=TurnFactory(conversation=chat), folder=str(workspace)
    )


@pytest.fixture
def outside(tmp_path):
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "f").write_text(SECRET)
    return folder


def run(name, ctx, **args):
    return get_tool(name).run(ctx, validate_args(get_tool(name), args))


# ---------------------------------------------------------------------------
# open_beneath itself


def test_open_beneath_refuses_a_link_anywhere_on_the_way(how, tmp_path, outside):
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "real" / "f").write_text(INSIDE)
    (root / "in-link").symlink_to(root / "real", target_is_directory=True)
    (root / "file-link").symlink_to(root / "real" / "f")
    (root / "out").symlink_to(outside, target_is_directory=True)
    fd = beneath.open_folder(str(root))
    try:
        opened = beneath.open_beneath(fd, "real/f", os.O_RDONLY)
        assert os.read(opened, 100) == INSIDE.encode()
        os.close(opened)
        for path in ("in-link/f", "file-link", "out/f", "out"):
            with pytest.raises(OSError) as refused:
                beneath.open_beneath(fd, path, os.O_RDONLY)
            assert refused.value.errno == errno.ELOOP, path
        with pytest.raises(OSError) as climbed:
            beneath.open_beneath(fd, "../outside/f", os.O_RDONLY)
        assert climbed.value.errno == errno.EXDEV
    finally:
        os.close(fd)


def test_makedirs_beneath_makes_missing_folders_but_never_goes_through_a_link(
    how, tmp_path, outside
):
    root = tmp_path / "root"
    root.mkdir()
    (root / "out").symlink_to(outside, target_is_directory=True)
    fd = beneath.open_folder(str(root))
    try:
        beneath.makedirs_beneath(fd, "a/b/c")
        assert (root / "a" / "b" / "c").is_dir()
        with pytest.raises(OSError) as refused:
            beneath.makedirs_beneath(fd, "out/planted")
        assert refused.value.errno == errno.ELOOP
    finally:
        os.close(fd)
    assert sorted(p.name for p in outside.iterdir()) == ["f"]


# ---------------------------------------------------------------------------
# The tools, with the swap made at the worst moment: right after the check


@pytest.fixture
def swapped_after_the_check(monkeypatch, workspace, outside):
    """``d`` is a real folder when ``confine`` looks, and a link to outside right after."""
    (workspace / "d").mkdir()
    (workspace / "d" / "f").write_text(INSIDE)
    checked = workspace_tools.confine

    def confine_then_swap(folder, path):
        real = checked(folder, path)
        os.rename(workspace / "d", workspace / "parked")
        os.symlink(outside, workspace / "d", target_is_directory=True)
        return real

    monkeypatch.setattr(workspace_tools, "confine", confine_then_swap)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("read_file", {"path": "d/f"}),
        ("write_file", {"path": "d/f", "content": "planted"}),
        ("write_file", {"path": "d/new/g", "content": "planted"}),
        ("edit_file", {"path": "d/f", "old": "secret", "new": "leaked"}),
        ("list_files", {"path": "d"}),
    ],
    ids=["read", "replace", "create", "edit", "list"],
)
def test_a_folder_swapped_for_a_link_after_the_check_is_refused_not_followed(
    how, ctx, outside, swapped_after_the_check, name, args
):
    with pytest.raises(ToolError) as refused:
        run(name, ctx, **args)

    assert str(refused.value) == ERR_LINK_ON_THE_WAY.format(path=args["path"])
    assert (outside / "f").read_text() == SECRET
    assert sorted(p.name for p in outside.iterdir()) == ["f"]
    assert ctx.files_changed == []


# ---------------------------------------------------------------------------
# The race, against a process that swaps as fast as it can


@pytest.fixture
def swapper(workspace, outside):
    """``d`` and ``swap`` in the chat's folder, exchanged without pause by another process."""
    (workspace / "d").mkdir()
    (workspace / "d" / "f").write_text(INSIDE)
    (workspace / "swap").symlink_to(outside, target_is_directory=True)
    process = subprocess.Popen(  # noqa: S603 - our own interpreter and script
        [sys.executable, "-c", SWAPPER, str(workspace / "d"), str(workspace / "swap")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        started = process.stdout.readline()  # blocks until the first swap is done, or it dies
        assert started == "swapping\n", process.stderr.read()
        yield process
    finally:
        process.kill()
        process.wait(timeout=10)


def test_a_folder_swapped_for_a_link_mid_call_lets_no_read_or_write_out_in_10000_tries(
    how, ctx, outside, swapper
):
    escaped_reads = escaped_writes = refused = inside = 0
    deadline = time.monotonic() + RACE_DEADLINE
    for attempt in range(TRIES):
        assert swapper.poll() is None, swapper.stderr.read()
        assert time.monotonic() < deadline, f"only {attempt} tries in {RACE_DEADLINE:g} s"
        try:
            if attempt % 2:
                run("write_file", ctx, path="d/g", content=f"write {attempt}")
            else:
                text = run("read_file", ctx, path="d/f").text
                escaped_reads += text == SECRET
                inside += text == INSIDE
        except ToolError:
            refused += 1
        if os.path.lexists(outside / "g"):
            escaped_writes += 1
            os.unlink(outside / "g")

    assert (escaped_reads, escaped_writes) == (0, 0)
    assert (outside / "f").read_text() == SECRET
    # The race was live: some calls met the link and were refused, some met the folder.
    assert refused > 0
    assert inside > 0
