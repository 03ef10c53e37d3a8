"""What a command can reach, and a Stop that stops it.

The sandbox tests run for real: bubblewrap is installed here and in CI
(``.ci/run``), and ``CONCH_SANDBOX=required`` makes them fail, not pass
quietly, where it doesn't work.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import threading
import uuid
from pathlib import Path

import pytest
from django.urls import reverse

from chats import processes
from chats.models import AuthProfile, Conversation, EntryRole, Step, Taint, Turn, TurnState
from chats.quoting import REDACTED
from chats.runtime.runner import Runner, drain
from chats.runtime.turns import (
    ERR_COMMAND_SHUTDOWN,
    ERR_COMMAND_STOPPED,
    conversation_delete,
    conversation_stop,
    message_send,
)
from chats.tools import sandbox
from chats.tools.registry import ToolContext, ToolError, get_tool, validate_args
from tests.commands import (
    PYTHON,
    drain_in_a_thread,
    kill_all,
    processes_running,
    sleep_marker,
    wait_for_fifo,
    wait_until_ended,
)
from tests.factories import ChatFactory, ConversationFactory, TurnFactory, agent_admin_form
from tests.scaleout.processes import wait_until

SERVER_SECRETS = {
    "CONCH_SECRET_KEY": "conch-secret-key-that-must-stay-home",
    "DATABASE_URL": "postgres://conch:db-password-1234@127.0.0.1:5432/conch",
    "REDIS_URL": "redis://:redis-password-1234@127.0.0.1:6379/0",
    "OPENAI_API_KEY": "openai-key-value-that-must-stay-home",
    "CONCH_SOMETHING_ELSE": "conch-setting-value",
}


@pytest.fixture
def ctx(owner, agent, workspace):
    chat = ConversationFactory(owner=owner, agent=agent, folder=str(workspace))
    return ToolContext(
        conversation=chat, turn=TurnFactory(conversation=chat), folder=str(workspace)
    )


@pytest.fixture(autouse=True)
def fresh_probe():
    """Each test asks afresh whether bwrap works, and leaves no answer behind."""
    sandbox.sandbox_probe_forget()
    yield
    sandbox.sandbox_probe_forget()


@pytest.fixture(params=[sandbox.SANDBOX_OFF, sandbox.SANDBOX_REQUIRED], ids=["plain", "sandboxed"])
def mode(request, settings):
    settings.CONCH_SANDBOX = request.param
    return request.param


@pytest.fixture
def sandboxed(settings):
    """Commands must run in the sandbox: a test fails, rather than passes, where it can't."""
    settings.CONCH_SANDBOX = sandbox.SANDBOX_REQUIRED


@pytest.fixture
def marker():
    mark = sleep_marker()
    yield mark
    kill_all(mark)


@pytest.fixture
def in_home():
    """A folder in the owner's own home, which the sandbox shows (read-only)."""
    folder = Path(tempfile.mkdtemp(prefix="conch-test-", dir=Path.home()))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def run(ctx, **args):
    tool = get_tool("run_command")
    return tool.run(ctx, validate_args(tool, args))


def command(cmd, **args):
    return {"tool": "run_command", "args": {"command": cmd, **args}}


def say(text):
    return {"say": text}


# ---------------------------------------------------------------------------
# 4. The environment


def _names(env_output: str) -> set[str]:
    return {line.split("=", 1)[0] for line in env_output.splitlines() if "=" in line}


def test_a_command_gets_none_of_conchs_settings_or_keys_only_the_allowed_environment(
    ctx, mode, monkeypatch
):
    for name, value in SERVER_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SOMETHING_UNLISTED", "not-passed")
    monkeypatch.setenv("LC_TIME", "C")

    result = run(ctx, command="env")

    names = _names(result.text)
    assert not names & set(SERVER_SECRETS)
    assert "SOMETHING_UNLISTED" not in names
    assert {"PATH", "HOME", "LC_TIME"} <= names
    assert not any(value in result.text for value in SERVER_SECRETS.values())


def test_a_persona_may_pass_a_variable_it_names(ctx, agent, monkeypatch):
    monkeypatch.setenv("GOPATH", "/opt/go-for-conch")
    agent.engine_config = {"command_env": ["GOPATH"]}
    agent.save()

    result = run(ctx, command='echo "gopath=$GOPATH"')

    assert "gopath=/opt/go-for-conch" in result.text


@pytest.mark.parametrize(
    "name", ["CONCH_SECRET_KEY", "DATABASE_URL", "REDIS_URL", "OPENAI_API_KEY", "DJANGO_SETTINGS"]
)
def test_a_persona_cannot_pass_conchs_settings_or_keys_to_commands_even_by_name(
    ctx, agent, workspace, monkeypatch, name
):
    monkeypatch.setenv(name, "must-stay-home")
    agent.engine_config = {"command_env": [name]}
    agent.save()

    with pytest.raises(ToolError) as refused:
        run(ctx, command="env > seen.txt")

    assert sandbox.ERR_COMMAND_ENV_REFUSED.format(name=name) in str(refused.value)
    assert "never passed to commands" in str(refused.value)
    assert not (workspace / "seen.txt").exists()  # nothing ran


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"command_env": "GOPATH"}, sandbox.ERR_COMMAND_ENV_SHAPE),
        ({"command_env": ["GO-PATH"]}, sandbox.ERR_COMMAND_ENV_NAME.format(name="GO-PATH")),
        ({"command_network": "yes"}, sandbox.ERR_COMMAND_NETWORK),
    ],
)
def test_bad_command_settings_are_a_clear_error_naming_the_setting(ctx, agent, config, error):
    agent.engine_config = config
    agent.save()

    with pytest.raises(ToolError, match="bad command settings") as refused:
        run(ctx, command="true")

    assert error in str(refused.value)


def test_the_admin_refuses_a_persona_that_would_pass_conchs_key_to_commands(admin_client, agent):
    url = reverse("admin:chats_agent_change", args=[agent.pk])

    response = admin_client.post(
        url, agent_admin_form(agent, engine_config='{"command_env": ["CONCH_SECRET_KEY"]}')
    )

    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors["engine_config"] == [
        sandbox.ERR_COMMAND_ENV_REFUSED.format(name="CONCH_SECRET_KEY")
    ]
    agent.refresh_from_db()
    assert "command_env" not in agent.engine_config  # nothing was saved


def test_the_admin_keeps_good_command_settings(admin_client, agent):
    url = reverse("admin:chats_agent_change", args=[agent.pk])

    response = admin_client.post(
        url,
        agent_admin_form(
            agent, engine_config='{"command_env": ["GOPATH"], "command_network": true}'
        ),
    )

    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.engine_config == {"command_env": ["GOPATH"], "command_network": True}


def test_a_commands_output_is_stored_with_keys_and_passwords_taken_out(agent, workspace, settings):
    AuthProfile.objects.create(agent=agent, name="deploy", secret="plain-words-deploy-secret")
    (workspace / "leak.txt").write_text(
        "sk-proj-AAAAAAAAAAAAAAAAAAAAAAAA\n"
        "password=hunter2hunter2\n"
        "plain-words-deploy-secret\n"
        f"{settings.SECRET_KEY}\n"
        "an ordinary line\n"
    )
    chat = ChatFactory(reply=[command("cat leak.txt"), say("Read it.")])

    message_send(conversation=chat, text="go")
    drain()

    step = Step.objects.get(turn__conversation=chat)
    for secret in (
        "sk-proj-AAAAAAAAAAAAAAAAAAAAAAAA",
        "hunter2hunter2",
        "plain-words-deploy-secret",
        settings.SECRET_KEY,
    ):
        assert secret not in step.result
    assert step.result.count(REDACTED) == 4
    assert "an ordinary line" in step.result


@pytest.mark.parametrize(
    ("secret", "tail_of_it"),
    [("sk-proj-" + "A" * 24, "A" * 12), ("plain-words-deploy-secret", "deploy-secret")],
)
def test_a_commands_output_is_scrubbed_before_it_is_cut(ctx, agent, settings, secret, tail_of_it):
    AuthProfile.objects.create(agent=agent, name="deploy", secret="plain-words-deploy-secret")
    settings.CONCH_COMMAND_OUTPUT_LIMIT = 300
    # The output's kept tail (about 125 characters) starts inside the secret.
    command = f"printf '%s' {'x' * 5_000}; echo ' {secret}'; printf '%s' {'y' * 100}"

    result = run(ctx, command=command)

    assert "characters cut" in result.text
    assert tail_of_it not in result.text


def test_every_steps_stored_result_is_scrubbed(agent, workspace):
    AuthProfile.objects.create(agent=agent, name="deploy", secret="plain-words-deploy-secret")
    (workspace / ".env").write_text(
        "OPENAI_API_KEY=sk-proj-AAAAAAAAAAAAAAAAAAAAAAAA\nDEPLOY=plain-words-deploy-secret\n"
    )
    chat = ChatFactory(reply=[{"tool": "read_file", "args": {"path": ".env"}}, say("Read it.")])

    message_send(conversation=chat, text="go")
    drain()

    step = Step.objects.get(turn__conversation=chat)
    assert "AAAAAAAAAAAA" not in step.result
    assert "plain-words-deploy-secret" not in step.result
    assert step.result.count(REDACTED) == 2


def test_a_stopped_commands_output_is_scrubbed_too(agent, settings):
    settings.CONCH_COMMAND_TIMEOUT = 0.5
    chat = ChatFactory(reply=[command("echo ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A; sleep 5")])

    message_send(conversation=chat, text="go")
    drain()

    step = Step.objects.get(turn__conversation=chat)
    assert step.error.startswith("The command did not finish within 0.5 s")
    assert "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A" not in step.error
    assert REDACTED in step.error


# ---------------------------------------------------------------------------
# 5. The sandbox


def test_in_the_sandbox_a_command_cannot_read_conch_home(ctx, sandboxed, settings, in_home):
    settings.CONCH_HOME = in_home  # where nothing else would hide it: the owner's home shows
    (in_home / "secret_key").write_text("the-conch-secret\n")

    result = run(ctx, command=f"cat {in_home}/secret_key; ls -A {in_home}")

    assert "the-conch-secret" not in result.text
    assert "secret_key" not in result.text.replace(f"{in_home}/secret_key", "")


def test_in_the_sandbox_a_command_cannot_read_another_persons_home(ctx, sandboxed, workspace):
    other = Path(tempfile.mkdtemp(prefix="conch-test-other-", dir="/home"))
    try:
        (other / "diary.txt").write_text("someone else's words\n")

        result = run(ctx, command=f"cat {other}/diary.txt; ls -A /home > home.txt")

        assert "someone else's words" not in result.text
        assert other.name not in (workspace / "home.txt").read_text()
    finally:
        shutil.rmtree(other, ignore_errors=True)


def test_in_the_sandbox_a_command_cannot_read_the_owners_keys(ctx, sandboxed, in_home, monkeypatch):
    (in_home / ".ssh").mkdir()
    (in_home / ".ssh" / "id_ed25519").write_text("the owner's private key\n")
    (in_home / ".netrc").write_text("machine example.com password the-netrc-password\n")
    (in_home / "notes.txt").write_text("the owner's notes\n")
    monkeypatch.setenv("HOME", str(in_home))

    result = run(
        ctx,
        command=f"cat {in_home}/.ssh/id_ed25519 {in_home}/.netrc {in_home}/notes.txt",
    )

    assert "the owner's private key" not in result.text
    assert "the-netrc-password" not in result.text
    assert "the owner's notes" in result.text  # the rest of the home reads as it is


def test_in_the_sandbox_a_command_can_change_only_its_own_folder(
    ctx, sandboxed, workspace, tmp_path, in_home
):
    sibling = tmp_path / "sibling"
    sibling.mkdir()
    name = f"conch-test-{uuid.uuid4().hex}"
    targets = [
        sibling / "x.txt",  # a folder beside the chat's
        Path("/tmp") / name,  # the machine's shared /tmp
        in_home / "x.txt",  # the owner's home
        Path("/usr/local") / name,  # the system
        Path("/var/tmp") / name,
    ]
    try:
        writes = "; ".join(f"echo written > {target}" for target in targets)
        run(ctx, command=f"{writes}; echo written > inside.txt")

        assert [t for t in targets if t.exists()] == []
        assert (workspace / "inside.txt").read_text() == "written\n"
    finally:
        for target in targets:
            target.unlink(missing_ok=True)


def test_in_the_sandbox_tmp_is_the_commands_own(ctx, sandboxed, tmp_path):
    theirs = Path(tempfile.mkdtemp(prefix="conch-test-tmp-", dir="/tmp"))
    name = f"conch-test-{uuid.uuid4().hex}"
    try:
        (theirs / "left.txt").write_text("another program's temporary file\n")

        result = run(
            ctx, command=f"cat {theirs}/left.txt; echo mine > /tmp/{name}; cat /tmp/{name}"
        )

        assert "another program's temporary file" not in result.text
        assert result.text.startswith("exit status 0\nmine\n")  # a scratch /tmp of its own
        assert not (Path("/tmp") / name).exists()
    finally:
        shutil.rmtree(theirs, ignore_errors=True)
        (Path("/tmp") / name).unlink(missing_ok=True)


def test_in_the_sandbox_conchs_own_python_shows_where_tmp_would_hide_it(
    ctx, sandboxed, monkeypatch, workspace
):
    """A checkout or virtualenv in /tmp (a clone, a CI run) holds the interpreter Conch's
    MCP servers run with: the sandbox shows it, read-only, and nothing else of /tmp."""
    from chats.tools import sandbox

    ours = Path(tempfile.mkdtemp(prefix="conch-test-venv-", dir="/tmp"))
    theirs = Path(tempfile.mkdtemp(prefix="conch-test-tmp-", dir="/tmp"))
    try:
        (ours / "python").write_text("Conch's interpreter\n")
        (theirs / "left.txt").write_text("another program's temporary file\n")
        here = sandbox.conch_itself()
        monkeypatch.setattr(sandbox, "conch_itself", lambda: (*here, str(ours)))

        result = run(
            ctx,
            command=f"cat {ours}/python {theirs}/left.txt; echo changed > {ours}/python",
        )

        assert "Conch's interpreter" in result.text
        assert "another program's temporary file" not in result.text
        assert (ours / "python").read_text() == "Conch's interpreter\n"  # read-only
    finally:
        shutil.rmtree(ours, ignore_errors=True)
        shutil.rmtree(theirs, ignore_errors=True)


def test_in_the_sandbox_root_cannot_make_the_system_writable(ctx, sandboxed, settings):
    name = f"conch-test-{uuid.uuid4().hex}"
    try:
        run(
            ctx,
            command=f"mount -o remount,bind,rw / ; umount /home ; echo written > /usr/local/{name}",
        )

        assert not (Path("/usr/local") / name).exists()
    finally:
        (Path("/usr/local") / name).unlink(missing_ok=True)


@pytest.fixture
def listener():
    """A TCP server on loopback that records nothing: the backlog shows who connected."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def _connected(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def _connect_command(port: int) -> str:
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('reached')"
    return f'{PYTHON} -c "{code}"'


def test_in_the_sandbox_a_command_cannot_reach_the_network(ctx, sandboxed, listener):
    result = run(ctx, command=_connect_command(listener.getsockname()[1]))

    assert "reached" not in result.text
    # It ran, and was refused: not a command that never started.
    assert result.text.startswith("exit status 1") and "ConnectionRefusedError" in result.text
    assert not _connected(listener)


def test_a_persona_that_allows_the_network_reaches_it_from_the_sandbox(
    ctx, sandboxed, agent, listener
):
    agent.engine_config = {"command_network": True}
    agent.save()

    result = run(ctx, command=_connect_command(listener.getsockname()[1]))

    assert "reached" in result.text
    assert _connected(listener)


def test_in_the_sandbox_a_command_cannot_reach_a_socket_in_run(ctx, sandboxed):
    path = Path("/run") / f"conch-test-{uuid.uuid4().hex[:12]}.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)
    server.setblocking(False)
    try:
        code = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{path}'); print('reached')"
        result = run(ctx, command=f'{PYTHON} -c "{code}"')

        assert "reached" not in result.text
        assert result.text.startswith("exit status 1") and "FileNotFoundError" in result.text
        assert not _connected(server)
    finally:
        server.close()
        path.unlink(missing_ok=True)


def test_a_sandboxed_command_is_recorded_as_one(agent, sandboxed):
    chat = ChatFactory(reply=[command("true")])

    message_send(conversation=chat, text="go")
    drain()

    step = Step.objects.get(turn__conversation=chat)
    assert step.sandboxed is True
    assert step.process_group
    assert step.result == "exit status 0"


def test_required_refuses_to_run_a_command_where_the_sandbox_does_not_work(
    ctx, settings, broken_bwrap, workspace
):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_REQUIRED

    with pytest.raises(ToolError) as refused:
        run(ctx, command="touch ran.txt")

    assert str(refused.value).startswith(
        "CONCH_SANDBOX is 'required' and the sandbox does not work on this computer"
    )
    assert "No permissions to create a new namespace" in str(refused.value)
    assert not (workspace / "ran.txt").exists()


def test_required_refuses_where_bwrap_is_not_installed(ctx, settings, workspace):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_REQUIRED
    settings.CONCH_SANDBOX_BWRAP = "no-such-bwrap-here"

    with pytest.raises(ToolError, match="no-such-bwrap-here is not installed"):
        run(ctx, command="touch ran.txt")

    assert not (workspace / "ran.txt").exists()


def test_auto_runs_plainly_where_the_sandbox_does_not_work_and_says_so_in_the_first_command_only(
    agent, settings, broken_bwrap, workspace
):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_AUTO
    chat = ChatFactory(
        script=[
            [command("echo one > one.txt"), command("echo two > two.txt"), say("Done.")],
            [command("echo three > three.txt")],
        ]
    )

    message_send(conversation=chat, text="go")
    drain()
    message_send(conversation=chat, text="again")
    drain()

    first, second, third = Step.objects.filter(turn__conversation=chat).order_by(
        "turn__number", "number"
    )
    assert first.result.startswith("Note: commands in this chat run without a sandbox")
    assert "No permissions to create a new namespace" in first.result
    assert first.result.endswith("exit status 0")
    assert second.result == third.result == "exit status 0"
    assert [s.sandboxed for s in (first, second, third)] == [False, False, False]
    assert {p.name for p in workspace.iterdir()} >= {"one.txt", "two.txt", "three.txt"}


def test_auto_uses_the_sandbox_where_it_works_and_says_nothing(agent, settings):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_AUTO
    chat = ChatFactory(reply=[command("true")])

    message_send(conversation=chat, text="go")
    drain()

    step = Step.objects.get(turn__conversation=chat)
    assert (step.sandboxed, step.result) == (True, "exit status 0")


def test_off_runs_commands_plainly_and_says_nothing(ctx, settings, in_home):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_OFF
    settings.CONCH_HOME = in_home
    (in_home / "secret_key").write_text("readable when off\n")

    result = run(ctx, command=f"cat {in_home}/secret_key")

    assert result.text == "exit status 0\nreadable when off\n"


# ---------------------------------------------------------------------------
# 9. A Stop that stops


def _long_command(marker: str) -> str:
    return f"echo ready > ready.fifo; sleep {marker}; echo late > proof.txt"


def _started(workspace: Path, marker: str) -> list[int]:
    assert wait_for_fifo(workspace / "ready.fifo", timeout=60) == "ready", "the command never ran"
    # The shell said it is ready; its sleep is one fork and exec away.
    return wait_until(
        lambda: processes_running(marker), timeout=30, what="the command's sleep to start"
    )


@pytest.mark.django_db(transaction=True)
def test_stop_ends_the_running_command_and_everything_it_started(agent, workspace, mode, marker):
    os.mkfifo(workspace / "ready.fifo")
    chat = ChatFactory(reply=[command(_long_command(marker)), say("After.")])
    message_send(conversation=chat, text="go")
    driver = drain_in_a_thread("stop-test")
    pids = _started(workspace, marker)

    conversation_stop(conversation=chat)

    assert wait_until_ended(pids, timeout=10) == [], "the command outlived the Stop"
    driver.join(30)
    assert not driver.is_alive()
    assert not (workspace / "proof.txt").exists()  # nothing is left that could write it
    step = Step.objects.get(turn__conversation=chat)
    assert step.error == ERR_COMMAND_STOPPED
    assert step.ended_at is not None
    turn = Turn.objects.get(conversation=chat)
    assert turn.state == TurnState.STOPPED
    assert not chat.entries.filter(role=EntryRole.ASSISTANT).exists()


@pytest.mark.django_db(transaction=True)
def test_a_stop_pressed_in_another_process_ends_the_command_at_the_runners_next_look(
    agent, workspace, marker, monkeypatch
):
    # Another server process changes only the database: nothing reaches this one's commands.
    monkeypatch.setattr(processes, "commands_stop", lambda **kwargs: 0)
    os.mkfifo(workspace / "ready.fifo")
    chat = ChatFactory(reply=[command(_long_command(marker)), say("After.")])
    message_send(conversation=chat, text="go")
    driver = drain_in_a_thread("cross-process-test")
    pids = _started(workspace, marker)

    conversation_stop(conversation=chat)

    assert wait_until_ended(pids, timeout=10) == [], "the command outlived the Stop"
    driver.join(30)
    assert not (workspace / "proof.txt").exists()
    assert Step.objects.get(turn__conversation=chat).error == ERR_COMMAND_STOPPED


@pytest.mark.django_db(transaction=True)
def test_deleting_a_chat_ends_its_running_command(agent, workspace, marker):
    os.mkfifo(workspace / "ready.fifo")
    chat = ChatFactory(reply=[command(_long_command(marker))])
    message_send(conversation=chat, text="go")
    driver = drain_in_a_thread("delete-test")
    pids = _started(workspace, marker)

    conversation_delete(conversation=chat)

    assert wait_until_ended(pids, timeout=10) == []
    driver.join(30)
    assert not driver.is_alive()
    assert not (workspace / "proof.txt").exists()


def test_a_command_that_ignores_sigterm_is_killed_after_the_grace(
    ctx, mode, settings, marker, monkeypatch, workspace
):
    settings.CONCH_COMMAND_TIMEOUT = 0.5
    monkeypatch.setattr(processes, "STOP_GRACE_SECONDS", 0.5)

    with pytest.raises(ToolError, match="did not finish within 0.5 s"):
        # Ignored signals are inherited: the sleep ignores SIGTERM too.
        run(ctx, command=f"trap '' TERM; sleep {marker}; echo late > proof.txt")

    assert processes_running(marker) == []
    assert not (workspace / "proof.txt").exists()


def test_a_stopped_command_gets_sigterm_first_so_it_can_tidy_up(ctx, mode, marker, workspace):
    ctx.interrupted = lambda: ERR_COMMAND_STOPPED  # the reply is stopped at once

    with pytest.raises(ToolError) as stopped:
        # Tidying takes a moment: it must be given that moment, within the grace.
        run(
            ctx,
            command=f"trap 'sleep 0.3; echo tidied > tidy.txt; exit 0' TERM; sleep {marker} & wait",
        )

    assert str(stopped.value) == ERR_COMMAND_STOPPED
    assert (workspace / "tidy.txt").read_text() == "tidied\n"
    assert processes_running(marker) == []


@pytest.mark.django_db(transaction=True)
def test_a_command_stopped_from_another_thread_gets_sigterm_first_too(ctx, mode, marker, workspace):
    """The Stop button's way in: the command's waiter is busy, another thread asks.

    Without the sandbox the command could reach the network, so its waiter's thread marks
    the chat before it starts: a write another thread can make only outside a test's
    transaction.
    """
    os.mkfifo(workspace / "ready.fifo")
    ended: list[str] = []

    def wait_on_it() -> None:
        try:
            run(
                ctx,
                command="trap 'sleep 0.3; echo tidied > tidy.txt; exit 0' TERM; "
                f"echo ready > ready.fifo; sleep {marker} & wait",
            )
        except ToolError as exc:
            ended.append(str(exc))

    waiter = threading.Thread(target=wait_on_it, daemon=True)
    waiter.start()
    pids = _started(workspace, marker)
    # The shell can say it is ready before the waiter's thread has listed it as running.
    wait_until(
        lambda: processes.commands_running(turn_id=ctx.turn.pk),
        timeout=30,
        what="the command to be listed as running",
    )

    assert processes.commands_stop(turn_id=ctx.turn.pk, reason="Stopped here.") == 1

    assert wait_until_ended(pids, timeout=10) == []
    waiter.join(30)
    assert ended == ["Stopped here."]
    assert (workspace / "tidy.txt").read_text() == "tidied\n"
    plain = mode == sandbox.SANDBOX_OFF
    taint = Conversation.objects.get(pk=ctx.conversation.pk).taint
    assert taint == (Taint.UNTRUSTED if plain else Taint.NONE)


def test_a_command_that_runs_too_long_is_stopped_with_everything_it_started(
    ctx, mode, settings, marker
):
    settings.CONCH_COMMAND_TIMEOUT = 0.5

    with pytest.raises(ToolError) as stopped:
        run(ctx, command=f"echo started; sleep {marker} & wait")

    assert str(stopped.value).startswith("The command did not finish within 0.5 s")
    assert "started" in str(stopped.value)  # what it printed before it was stopped
    assert processes_running(marker) == [], "the command's own child was left running"


@pytest.mark.django_db(transaction=True)
def test_shutting_down_a_runner_ends_its_commands_and_the_reply_carries_on_later(
    agent, workspace, mode, marker
):
    os.mkfifo(workspace / "ready.fifo")
    chat = ChatFactory(reply=[command(_long_command(marker)), say("After the restart.")])
    turn = message_send(conversation=chat, text="go")
    runner = Runner(name="shutting-down", poll=0.05).start()
    try:
        pids = _started(workspace, marker)
    finally:
        runner.stop(timeout=30)

    assert wait_until_ended(pids, timeout=10) == []
    assert not (workspace / "proof.txt").exists()
    step = Step.objects.get(turn=turn)
    assert step.error == ERR_COMMAND_SHUTDOWN
    turn.refresh_from_db()
    assert (turn.state, turn.claimed_by, turn.ended_at) == (TurnState.RUNNING, "", None)
    drain()  # the next start picks the reply up where it was
    turn.refresh_from_db()
    assert turn.state == TurnState.COMPLETED
    assert chat.entries.filter(role=EntryRole.ASSISTANT).last().text == "After the restart."


# ---------------------------------------------------------------------------
# The recorded group: only ever ours


@pytest.fixture
def lone_sleep(marker):
    """A process in a session of its own, as a command left behind by a dead Conch is."""
    import subprocess

    process = subprocess.Popen(["sleep", marker], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def test_recovery_ends_the_group_it_recorded(lone_sleep, marker):
    mark = processes.group_mark(lone_sleep.pid)

    found = processes.group_end_recorded(lone_sleep.pid, mark, grace=0.5)

    assert found == processes.ENDED
    assert lone_sleep.wait(timeout=10) is not None
    assert processes_running(marker) == []


@pytest.mark.parametrize("differs", ["start time", "boot", "computer"])
def test_recovery_never_ends_a_process_that_is_not_the_one_it_recorded(lone_sleep, differs):
    host, boot, ticks = processes.group_mark(lone_sleep.pid).split(" ")
    mark = {
        "start time": f"{host} {boot} {int(ticks) + 1}",  # the id was reused by another process
        "boot": f"{host} {uuid.uuid4()} {ticks}",  # recorded before this computer restarted
        "computer": f"elsewhere.example {boot} {ticks}",  # recorded by another computer
    }[differs]

    found = processes.group_end_recorded(lone_sleep.pid, mark, grace=0.5)

    assert found == (processes.ELSEWHERE if differs == "computer" else processes.GONE)
    assert lone_sleep.poll() is None  # left alone


def test_recovery_never_ends_a_process_older_than_the_group_it_recorded(marker):
    """The leader is gone and the id was reused: what is left started before ours."""
    import subprocess

    shell = subprocess.Popen(
        ["sh", "-c", f"sleep {marker} >/dev/null & echo $!"],
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    older = int(shell.communicate(timeout=30)[0])  # the leader has exited: only its child is left
    host, boot, ticks = processes.group_mark(older).split(" ")

    found = processes.group_end_recorded(shell.pid, f"{host} {boot} {int(ticks) + 1}", grace=0.5)

    assert found == processes.GONE
    assert processes_running(marker) == [older]  # left alone


# ---------------------------------------------------------------------------
# With no sandbox, what leaves the group with setsid ends too


@pytest.mark.django_db(transaction=True)
def test_without_the_sandbox_stop_ends_what_left_the_group_with_setsid(
    agent, workspace, settings, marker
):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_OFF
    os.mkfifo(workspace / "ready.fifo")
    escape = f"setsid sleep {marker} > /dev/null 2>&1 < /dev/null &"
    chat = ChatFactory(reply=[command(f"{escape} {_long_command(marker)}"), say("After.")])
    message_send(conversation=chat, text="go")
    driver = drain_in_a_thread("setsid-test")
    pids = _started(workspace, marker)
    wait_until(lambda: len(processes_running(marker)) >= 2, timeout=30, what="both sleeps")
    pids = processes_running(marker)
    assert len(pids) == 2
    escaped = [pid for pid in pids if os.getsid(pid) == pid]
    assert escaped, "the setsid sleep leads a session of its own"

    conversation_stop(conversation=chat)

    try:
        assert wait_until_ended(pids, timeout=10) == [], "a setsid child outlived the Stop"
    finally:
        kill_all(marker)
    driver.join(30)
    assert Step.objects.get(turn__conversation=chat).error == ERR_COMMAND_STOPPED


@pytest.mark.django_db(transaction=True)
def test_without_the_sandbox_a_command_that_ends_leaves_nothing_running(
    agent, workspace, settings, marker
):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_OFF
    chat = ChatFactory(
        reply=[command(f"setsid sleep {marker} > /dev/null 2>&1 < /dev/null & echo started")]
    )
    try:
        message_send(conversation=chat, text="go")
        drain()
        step = Step.objects.get(turn__conversation=chat)
        assert step.result == "exit status 0\nstarted\n"
        assert wait_until_ended(processes_running(marker), timeout=10) == []
    finally:
        kill_all(marker)


# ---------------------------------------------------------------------------
# Output that floods: read as it comes, a bounded head and tail kept.


def test_a_command_that_floods_is_ended_at_the_bound_and_says_so(ctx, mode, settings):
    settings.CONCH_COMMAND_OUTPUT_MAX_BYTES = 1024 * 1024
    settings.CONCH_COMMAND_TIMEOUT = 60  # were the flood not seen, this is what would end it

    with pytest.raises(ToolError) as ended:
        run(ctx, command="yes flooding")

    said = str(ended.value)
    assert said.startswith("The command printed more than 1 MB and was stopped.\nflooding\n")
    assert "characters cut" in said
    assert len(said) <= settings.CONCH_COMMAND_OUTPUT_LIMIT


def test_a_command_printing_50_mb_is_never_held_whole(ctx, settings):
    import tracemalloc

    settings.CONCH_SANDBOX = sandbox.SANDBOX_OFF
    settings.CONCH_COMMAND_OUTPUT_MAX_BYTES = 64 * 1024 * 1024
    printing = "import sys\nfor _ in range(800): sys.stdout.write('x' * 65536)\nprint('END')"
    script = ctx.folder + "/print.py"
    Path(script).write_text(printing)

    tracemalloc.start()
    try:
        result = run(ctx, command=f"{shutil.which('python3')} print.py")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert result.text.startswith("exit status 0\nxxx")
    assert result.text.endswith("END\n")
    cut = int(re.search(r"\((\d+) characters cut\)", result.text).group(1))
    assert 52_400_000 < cut < 52_428_804  # the note counts what was cut: nearly all of it
    assert peak < 4 * 1024 * 1024, f"peaked at {peak} bytes for 50 MB of output"
