"""Finding model servers on this computer's usual ports, against real servers on loopback ports.

Each server is a real HTTP server on an ephemeral port: a model server answering as
Ollama does (tests/loopback_model.py), and servers that are not model servers, the
kind that may well sit on 8000 or 8080 (a web page, a hung program, nothing at all).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from chats.engines.base import EngineError
from chats.engines.discovery import FoundServer, models_list, servers_find, usual_ports
from tests.loopback_model import LoopbackModel


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def web_page(
    status: int = 200, body: bytes = b"<!doctype html><p>Not a model</p>"
) -> Iterator[int]:
    """Another program's web server: any path gets this page."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def silent_port() -> Iterator[int]:
    """A program that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def test_it_finds_the_model_servers_among_what_listens_in_the_order_given():
    with (
        LoopbackModel(["qwen2.5-coder:7b", "llama3.2:3b"]) as ollama,
        LoopbackModel(["gguf-model"]) as llama_cpp,
        web_page() as page,
        web_page(status=404) as not_found,
        silent_port() as silent,
    ):
        ports = {
            ollama.port: "Ollama",
            page: "LM Studio",
            closed_port(): "vLLM",
            not_found: "A server",
            silent: "Another",
            llama_cpp.port: "llama.cpp",
        }

        found = servers_find(ports, timeout=1.0)

    assert found == [
        FoundServer("Ollama", ollama.base_url, ("qwen2.5-coder:7b", "llama3.2:3b")),
        FoundServer("llama.cpp", llama_cpp.base_url, ("gguf-model",)),
    ]
    assert [r["path"] for r in ollama.requests] == ["/v1/models"]


def test_a_server_that_lists_no_models_is_not_offered():
    with LoopbackModel([]) as empty:
        assert servers_find({empty.port: "Ollama"}) == []
        with pytest.raises(EngineError, match="lists no models. Load or pull one there first"):
            models_list(empty.base_url)


def test_the_ports_looked_on_are_the_servers_defaults_or_conch_model_ports(settings):
    settings.CONCH_MODEL_PORTS = (11434, 8080, 1234, 8000)
    assert usual_ports() == {11434: "Ollama", 8080: "llama.cpp", 1234: "LM Studio", 8000: "vLLM"}

    with LoopbackModel() as model:
        settings.CONCH_MODEL_PORTS = (model.port,)
        assert usual_ports() == {model.port: "A server"}
        assert servers_find() == [FoundServer("A server", model.base_url, ("qwen2.5-coder:7b",))]


def test_what_went_wrong_is_said_in_words():
    with pytest.raises(EngineError, match=r"Nothing answered at .* \(connection refused\)"):
        models_list(f"http://127.0.0.1:{closed_port()}/v1")
    with web_page() as page, pytest.raises(EngineError, match="doesn't answer like an OpenAI"):
        models_list(f"http://127.0.0.1:{page}/v1")
    with web_page(404) as page, pytest.raises(EngineError, match=r"\(404 for .*/v1/models\)"):
        models_list(f"http://127.0.0.1:{page}/v1")
    with silent_port() as port, pytest.raises(EngineError, match="didn't answer within 0.5"):
        models_list(f"http://127.0.0.1:{port}/v1", timeout=0.5)
    with LoopbackModel(key="sk-right") as keyed:
        with pytest.raises(EngineError, match=r"refused the key \(401\)"):
            models_list(keyed.base_url, "sk-wrong")
        assert models_list(keyed.base_url, "sk-right") == ("qwen2.5-coder:7b",)
