"""server-everything, from npm, over stdio and streamable HTTP: the protocol's features.

Progress, a changed tool list, an error result, a large result, Stop, a timeout, one
process per server and folder, and idle servers ended.
"""

from __future__ import annotations

import http.server
import threading
import time

import pytest
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from chats.mcp import client
from chats.tools import sandbox
from tests.mcp.conftest import (
    kill_marked,
    marked,
    marked_ended,
    servers_started,
)

LONG = "trigger-long-running-operation"


@pytest.fixture(autouse=True)
def _sandboxed(settings):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_REQUIRED


@pytest.fixture(params=["stdio", "http"])
def spec(request, everything_both) -> client.ServerSpec:
    if request.param == "stdio":
        return everything_both.stdio(marked())
    return everything_both.http()


@pytest.fixture
def cancels_sent(monkeypatch) -> list[dict]:
    """Every notifications/cancelled the client sends, as the SDK writes it."""
    sent: list[dict] = []
    notify = JSONRPCDispatcher.notify

    async def spy(self, method, params, *args, **kwargs):
        if method == "notifications/cancelled":
            sent.append(dict(params or {}))
        return await notify(self, method, params, *args, **kwargs)

    monkeypatch.setattr(JSONRPCDispatcher, "notify", spy)
    return sent


def test_progress_notifications_reach_on_progress(spec):
    seen: list[tuple] = []

    result = client.call_tool(
        spec, LONG, {"duration": 0.6, "steps": 3}, on_progress=lambda *update: seen.append(update)
    )

    assert not result.is_error
    assert "Long running operation completed" in result.text
    assert seen == [(1.0, 3.0, ""), (2.0, 3.0, ""), (3.0, 3.0, "")]


def test_progress_is_passed_on_in_the_callers_thread(spec):
    threads = set()

    client.call_tool(
        spec,
        LONG,
        {"duration": 0.2, "steps": 2},
        on_progress=lambda *update: threads.add(threading.current_thread()),
    )

    assert threads == {threading.current_thread()}


def test_a_changed_tool_list_reaches_the_callback(everything):
    """server-everything adds tools once it knows the client, and says so.

    Over stdio only: over HTTP it says so before the client has opened the stream that
    would carry it (the spec's standalone SSE stream), and the notice is lost.
    """
    spec = everything.stdio(marked())
    changed: list[str] = []
    heard = threading.Event()

    def hear(key: str) -> None:
        changed.append(key)
        heard.set()

    forget = client.on_list_changed(hear)
    try:
        names = {tool.name for tool in client.list_tools(spec)}
        assert heard.wait(10)
    finally:
        forget()
    assert "echo" in names
    assert set(changed) == {spec.key}


def test_an_error_result_comes_back_as_an_error(spec):
    result = client.call_tool(spec, "get-sum", {"a": "one", "b": 2})

    assert result.is_error is True
    assert "Invalid arguments for tool get-sum" in result.text


def test_a_large_result_is_bounded_like_a_commands_output(spec, settings):
    settings.CONCH_COMMAND_OUTPUT_LIMIT = 1_000
    message = "head " + "x" * 5_000 + " tail"

    result = client.call_tool(spec, "echo", {"message": message})

    assert result.truncated is True
    assert len(result.text) <= 1_000
    assert result.text.startswith("Echo: head ") and result.text.endswith(" tail")
    assert "characters cut" in result.text

    small = client.call_tool(spec, "echo", {"message": "hello"})
    assert (small.text, small.truncated) == ("Echo: hello", False)


def test_parts_that_are_not_text_are_described(spec):
    result = client.call_tool(spec, "get-tiny-image", {})

    assert "[image, image/png, about" in result.text


def test_a_timeout_cancels_the_call_in_words(spec, cancels_sent):
    # Started first: a call's time counts its server's start too, and a start slower than
    # the timeout (a loaded machine) would leave no request sent to cancel.
    client.list_tools(spec)
    started = time.monotonic()

    with pytest.raises(client.McpError) as failed:
        client.call_tool(spec, LONG, {"duration": 30, "steps": 30}, timeout=1)

    assert type(failed.value) is client.McpError
    assert failed.value.words == (
        f"The MCP server 'everything' did not answer calling '{LONG}' within 1 s, "
        "so it was cancelled."
    )
    assert time.monotonic() - started < 10
    assert [sent["reason"] for sent in cancels_sent] == ["caller cancelled"]


def test_stop_cancels_the_call_and_ends_a_stdio_servers_process(everything, cancels_sent):
    mark = marked()
    spec = everything.stdio(mark)
    client.list_tools(spec)
    [server] = servers_started(mark)
    started = time.monotonic()

    with pytest.raises(client.McpInterrupted) as stopped:
        client.call_tool(
            spec,
            LONG,
            {"duration": 30, "steps": 30},
            interrupted=lambda: "Stopped." if time.monotonic() - started > 0.5 else "",
        )

    assert stopped.value.words == (
        f"The call to '{LONG}' on the MCP server 'everything' was stopped: Stopped."
    )
    assert time.monotonic() - started < 10
    assert len(cancels_sent) == 1
    assert marked_ended(mark, 5), "the server's group is gone"

    again = client.call_tool(spec, "echo", {"message": "again"})  # started afresh
    assert again.text == "Echo: again"
    assert servers_started(mark) not in ([], [server])


def test_stop_cancels_the_call_and_keeps_an_http_session(everything_both, cancels_sent):
    spec = everything_both.http()
    client.list_tools(spec)
    [session] = [s for s in client._pool.values() if s.spec.key == spec.key]
    started = time.monotonic()

    with pytest.raises(client.McpInterrupted):
        client.call_tool(
            spec,
            LONG,
            {"duration": 30, "steps": 30},
            interrupted=lambda: "Stopped." if time.monotonic() - started > 0.5 else "",
        )

    assert time.monotonic() - started < 10
    assert len(cancels_sent) == 1
    assert client.call_tool(spec, "echo", {"message": "still here"}).text == "Echo: still here"
    assert [s for s in client._pool.values() if s.spec.key == spec.key] == [session]


def test_one_process_per_server_and_folder_shared_by_calls_at_once(everything, tmp_path, settings):
    settings.CONCH_SANDBOX = sandbox.SANDBOX_OFF  # the other folder doesn't hold the server
    mark = marked()
    spec = everything.stdio(mark)
    results: list[str] = []

    def call(word: str) -> None:
        results.append(client.call_tool(spec, "echo", {"message": word}).text)

    callers = [threading.Thread(target=call, args=(word,)) for word in ("one", "two", "three")]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(60)

    assert sorted(results) == ["Echo: one", "Echo: three", "Echo: two"]
    assert len(servers_started(mark)) == 1

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = everything.stdio(mark, key=spec.key, folder=elsewhere)
    assert client.call_tool(other, "echo", {"message": "four"}).text == "Echo: four"
    assert len(servers_started(mark)) == 2


def test_an_idle_server_is_ended_and_started_again_when_needed(everything, settings):
    settings.CONCH_MCP_IDLE_SECONDS = 60
    mark = marked()
    spec = everything.stdio(mark)
    client.call_tool(spec, "echo", {"message": "hello"})
    [first] = servers_started(mark)

    client.close_idle(time.monotonic() + 30)  # not idle long enough
    assert servers_started(mark) == [first]

    client.close_idle(time.monotonic() + 61)
    assert marked_ended(mark, 5)

    assert client.call_tool(spec, "echo", {"message": "back"}).text == "Echo: back"
    assert servers_started(mark) not in ([], [first])


def test_the_client_ends_idle_servers_by_itself(everything, settings):
    settings.CONCH_MCP_IDLE_SECONDS = 1
    mark = marked()
    client.call_tool(everything.stdio(mark), "echo", {"message": "hello"})
    assert servers_started(mark)

    assert marked_ended(mark, 10)


def test_a_server_in_use_is_not_ended_as_idle(everything, settings):
    settings.CONCH_MCP_IDLE_SECONDS = 1
    mark = marked()
    spec = everything.stdio(mark)

    result = client.call_tool(spec, LONG, {"duration": 3, "steps": 3})

    assert "completed" in result.text


def test_an_address_that_does_not_answer_is_an_error_in_words(everything_both):
    spec = client.ServerSpec(
        key=marked("gone"),
        name="gone",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        key_secret="bearer-secret-0123456789",
    )

    with pytest.raises(client.McpError) as failed:
        client.list_tools(spec)

    assert failed.value.words.startswith("The MCP server 'gone' did not start: ")
    assert "could not be reached" in failed.value.words
    assert "bearer-secret" not in failed.value.words


@pytest.fixture
def refusing_address():
    """An address that answers every request 401, and the Authorization headers it got."""
    heard: list[str] = []

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            heard.append(self.headers.get("Authorization", ""))
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_DELETE = do_POST  # noqa: N815

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/mcp", heard
    server.shutdown()
    server.server_close()


def test_an_http_server_gets_its_key_and_its_refusal_is_words_without_it(refusing_address):
    url, heard = refusing_address
    key = "bearer-secret-0123456789"
    spec = client.ServerSpec(
        key=marked("http"), name="tracker", transport="http", url=url, key_secret=key
    )

    with pytest.raises(client.McpError) as failed:
        client.list_tools(spec)

    assert heard and set(heard) == {f"Bearer {key}"}
    assert failed.value.words.startswith("The MCP server 'tracker' did not start: ")
    assert "401" in failed.value.words
    assert key not in failed.value.words


def test_a_server_that_died_is_started_again_at_the_next_call(everything):
    mark = marked()
    spec = everything.stdio(mark)
    client.call_tool(spec, "echo", {"message": "one"})
    [first] = servers_started(mark)
    # Its stderr is held open here, as a program it left behind might hold it: the client
    # can't have seen that end, only the process itself being gone.
    with open(f"/proc/{first}/fd/2", "w"):
        kill_marked(mark)
        assert marked_ended(mark, 5)

        assert client.call_tool(spec, "echo", {"message": "two"}).text == "Echo: two"
        assert servers_started(mark) not in ([], [first])


def test_a_call_sent_before_its_server_died_fails_and_is_never_sent_again(everything):
    mark = marked()
    spec = everything.stdio(mark)
    client.list_tools(spec)
    progressed: list[tuple] = []

    def die(*update) -> None:  # the call is on the server: it says how far it got
        if not progressed:
            kill_marked(mark)
        progressed.append(update)

    with pytest.raises(client.McpError) as failed:
        client.call_tool(spec, LONG, {"duration": 3, "steps": 3}, on_progress=die)

    assert progressed == [(1.0, 3.0, "")]
    assert failed.value.words == (
        f"The MCP server 'everything' failed while calling '{LONG}': "
        "the connection ended (the server exited or closed it)."
    )
    assert marked_ended(mark, 5), "no server was started again for the call"
