"""A first run that talks: from a fresh home, through Connect a model, to a streamed answer.

The model server is tests/loopback_model.py on an ephemeral loopback port, answering
as Ollama's OpenAI-compatible API does (its ``/v1/models`` list and its SSE chunks);
the Conch server is told to look for servers on that port (``CONCH_MODEL_PORTS``),
as it looks on 11434, 8080, 1234 and 8000 out of the box.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from chats.models import Agent, Conversation
from tests.browser.a11y import axe_violations
from tests.browser.conftest import ConchServer, _start
from tests.engines.replay import RECORDINGS
from tests.loopback_model import LoopbackModel

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def loopback_model() -> Iterator[LoopbackModel]:
    with LoopbackModel(
        ["qwen2.5-coder:7b"], answer=("Hello", " from", " the", " loopback", " model.")
    ) as model:
        yield model


@pytest.fixture
def connect_server(django_db_setup, django_db_blocker, loopback_model) -> Iterator[ConchServer]:
    yield from _start(
        django_db_setup, django_db_blocker, env={"CONCH_MODEL_PORTS": str(loopback_model.port)}
    )


def test_a_fresh_home_connects_a_model_and_gets_a_streamed_answer(
    tab, sign_in, connect_server, loopback_model, owner
):
    page = tab.page
    assert not Agent.objects.exists() and not Conversation.objects.exists()  # a fresh home

    sign_in(tab, connect_server)
    notice = page.locator("#no-model")
    expect(notice).to_contain_text("No model is connected yet")
    notice.get_by_role("link", name="Connect a model").click()

    expect(page).to_have_url(f"{connect_server.url}/connect/")
    found = page.locator("#connect-found")
    expect(found).to_contain_text(loopback_model.base_url)
    found.get_by_role("link", name="qwen2.5-coder:7b").click()
    expect(page.get_by_role("textbox", name="Address")).to_have_value(loopback_model.base_url)
    expect(page.get_by_role("textbox", name="Model")).to_have_value("qwen2.5-coder:7b")

    page.get_by_role("button", name="Test connection").click()
    result = page.locator("#connect-result")
    expect(result).to_contain_text(f"Connected: “qwen2.5-coder:7b” at {loopback_model.base_url}")
    assert Agent.objects.filter(engine="openai").count() == 0, "Test connection saves nothing"
    assert axe_violations(page) == []  # the page with a server found, a model tried

    result.get_by_role("button", name="Save").click()
    expect(page).to_have_url(f"{connect_server.url}/")
    expect(page.locator("#no-model")).to_have_count(0)
    expect(page.locator(".new-chat")).to_contain_text("Conch answers with “qwen2.5-coder:7b”")

    page.get_by_label("Title").fill("First words")
    page.get_by_role("button", name="Start chat").click()
    expect(page.locator("#chat-heading")).to_have_text("First words")
    expect(page.locator("body")).to_have_attribute("data-socket", "open")
    expect(page.locator("#no-model")).to_have_count(0)

    loopback_model.hold()  # the answer stops after its first words until released
    composer = page.get_by_label("Message")
    composer.fill("Who is there?")
    composer.press("Enter")

    streaming = page.locator("#reply-1-text.is-streaming")
    expect(streaming).to_have_text("Hello")
    expect(page.locator("#reply-1 .reply-end")).to_contain_text("working")
    loopback_model.release()

    answer = page.locator("#reply-1 .msg.from-assistant .text")
    expect(answer).to_have_text("Hello from the loopback model.")
    expect(page.locator("#reply-1 .reply-end")).to_contain_text(re.compile(r"^\s*done"))
    expect(streaming).to_have_count(0)

    # Test connection and Save each tried it once; then the chat's reply, with its tools.
    asked = [r["body"] for r in loopback_model.completions]
    assert [bool(b.get("tools")) for b in asked] == [False, False, True]
    assert asked[-1]["model"] == "qwen2.5-coder:7b"
    assert asked[-1]["stream"] is True
    assert asked[-1]["messages"][-1] == {"role": "user", "content": "Who is there?"}
    page.goto("about:blank")  # leave before this test's own server stops: no socket left to retry


@pytest.fixture
def small_model() -> Iterator[LoopbackModel]:
    """Ollama with "mistral:latest" loaded with 2048 tokens of context (its recorded
    ``/api/show`` and ``/api/ps``, tests/engines/recordings/)."""
    pages = {
        "/api/show": json.loads((RECORDINGS / "ollama-api-show.json").read_text()),
        "/api/ps": json.loads((RECORDINGS / "ollama-api-ps.json").read_text()),
    }
    with LoopbackModel(["mistral:latest"], pages=pages) as model:
        yield model


@pytest.fixture
def small_server(django_db_setup, django_db_blocker, small_model) -> Iterator[ConchServer]:
    yield from _start(
        django_db_setup, django_db_blocker, env={"CONCH_MODEL_PORTS": str(small_model.port)}
    )


def test_a_context_too_small_to_work_in_is_said_and_saved_only_on_save_anyway(
    tab, sign_in, small_server, small_model, owner
):
    page = tab.page
    sign_in(tab, small_server)
    page.goto(f"{small_server.url}/connect/")
    page.locator("#connect-found").get_by_role("link", name="mistral:latest").click()
    expect(page.get_by_role("textbox", name="Model")).to_have_value("mistral:latest")

    page.get_by_role("button", name="Test connection").click()
    result = page.locator("#connect-result")
    expect(result).to_contain_text("Connected: “mistral:latest”")
    alert = result.get_by_role("alert")
    expect(alert).to_contain_text("has 2048 tokens of context (as Ollama says): too few to work in")
    expect(alert).to_contain_text(re.compile(r"OLLAMA_CONTEXT_LENGTH=\d+ ollama serve"))
    expect(result.get_by_role("button", name="Save", exact=True)).to_have_count(0)
    assert axe_violations(page) == []  # the warning and its button

    result.get_by_role("button", name="Save anyway").click()
    expect(page).to_have_url(f"{small_server.url}/")
    expect(page.locator(".new-chat")).to_contain_text("Conch answers with “mistral:latest”")
    assert Agent.objects.get(is_default=True).engine_config["model"] == "mistral:latest"
    page.goto("about:blank")
