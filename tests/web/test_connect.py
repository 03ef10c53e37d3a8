"""Connect a model: the page, its form, and what the workspace says while no persona has a model.

The model servers are real HTTP servers on loopback ports (tests/loopback_model.py,
answering as Ollama's OpenAI-compatible API does); the page looks for them on the
ports ``CONCH_MODEL_PORTS`` names, here theirs.
"""

from __future__ import annotations

import json
import re
import socket
from html import unescape

import pytest
from django.db import connection
from django.test import Client

from chats.forms import base_url_clean
from chats.models import Agent, AuthProfile
from chats.runtime.chats import default_agent
from chats.runtime.connect import MODEL_KEY_PROFILE
from chats.runtime.runner import drain
from chats.runtime.turns import message_send
from tests.engines.replay import RECORDINGS
from tests.factories import ChatFactory
from tests.loopback_model import LoopbackModel

pytestmark = pytest.mark.django_db

CONNECT = "/connect/"
TRY = "/connect/try/"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def model(settings):
    with LoopbackModel(["qwen2.5-coder:7b", "llama3.2:3b"]) as server:
        settings.CONCH_MODEL_PORTS = (server.port,)
        yield server


@pytest.fixture
def keyed_model(settings):
    with LoopbackModel(key="sk-test-0123456789") as server:
        settings.CONCH_MODEL_PORTS = (server.port,)
        yield server


@pytest.fixture
def small_model(settings):
    """Ollama running "mistral:latest" loaded with 2048 tokens of context: its own
    ``/api/show`` and ``/api/ps`` answers as recorded (tests/engines/recordings/)."""
    pages = {
        "/api/show": json.loads((RECORDINGS / "ollama-api-show.json").read_text()),
        "/api/ps": json.loads((RECORDINGS / "ollama-api-ps.json").read_text()),
    }
    with LoopbackModel(["mistral:latest"], pages=pages) as server:
        settings.CONCH_MODEL_PORTS = (server.port,)
        yield server


def form(base_url: str, model: str = "qwen2.5-coder:7b", action: str = "test", **more) -> dict:
    return {"base_url": base_url, "model": model, "key": "", "action": action, **more}


def agent_now() -> Agent:
    return Agent.objects.get(pk=default_agent().pk)


# -- the page --------------------------------------------------------------------


def test_the_page_and_its_post_need_the_sign_in(agent, model):
    anonymous = Client()

    page = anonymous.get(CONNECT)
    posted = anonymous.post(TRY, form(model.base_url, action="save"))

    assert page.status_code == 302 and page["Location"].startswith("/signin/")
    assert posted.status_code == 302 and posted["Location"].startswith("/signin/")
    assert not agent_now().has_model
    assert model.requests == []


def test_the_page_lists_the_models_of_a_server_on_a_usual_port(signed_in, model, settings):
    settings.CONCH_MODEL_PORTS = (closed_port(), model.port)

    html = signed_in.get(CONNECT).content.decode()

    assert f"<code>{model.base_url}</code>" in html
    for name in ("qwen2.5-coder:7b", "llama3.2:3b"):
        link = (
            f"?base_url=http%3A//127.0.0.1%3A{model.port}/v1&amp;model={name.replace(':', '%3A')}"
        )
        assert link in html, name
    assert "Now: no model is connected." in html


def test_the_page_says_in_words_when_nothing_answers_on_the_usual_ports(signed_in, settings):
    port = closed_port()
    settings.CONCH_MODEL_PORTS = (port,)

    html = signed_in.get(CONNECT).content.decode()

    assert f"No model server answered on 127.0.0.1 at {port} (A server)" in html


def test_picking_a_found_model_fills_the_form(signed_in, model):
    html = signed_in.get(CONNECT, {"base_url": model.base_url, "model": "llama3.2:3b"}).content
    html = html.decode()

    assert f'name="base_url" value="{model.base_url}"' in html
    assert 'name="model" value="llama3.2:3b"' in html
    assert model.completions == [], "picking tries nothing yet"


# -- Test connection and Save ----------------------------------------------------------


def test_test_connection_tries_the_model_and_saves_nothing(signed_in, model):
    response = signed_in.post(TRY, form(model.base_url))

    html = response.content.decode()
    assert response.status_code == 200
    assert f"Connected: “qwen2.5-coder:7b” at {model.base_url} answered" in html
    assert 'name="action" value="save"' in html
    assert [r["body"]["model"] for r in model.completions] == ["qwen2.5-coder:7b"]
    assert not agent_now().has_model


def test_save_tries_the_model_again_and_sets_the_default_persona(signed_in, model):
    response = signed_in.post(TRY, form(model.base_url, "llama3.2:3b", action="save"))

    assert response.status_code == 302 and response["Location"] == "/"
    agent = agent_now()
    assert agent.is_default and agent.engine == "openai"
    assert agent.engine_config == {"base_url": model.base_url, "model": "llama3.2:3b"}
    assert len(model.completions) == 1, "Save tried it first"
    home = signed_in.get("/").content.decode()
    assert "No model is connected" not in home
    assert "Conch answers with “llama3.2:3b”" in home


def test_save_saves_nothing_when_the_model_does_not_answer(signed_in, model):
    response = signed_in.post(TRY, form(model.base_url, "not-pulled:1b", action="save"))

    assert response.status_code == 400
    assert "not-pulled:1b" in response.content.decode()
    assert not agent_now().has_model


def test_a_key_is_tried_sent_as_the_bearer_token_and_sealed_at_rest(signed_in, keyed_model):
    url = keyed_model.base_url
    without = signed_in.post(TRY, form(url))
    assert without.status_code == 400
    assert "key" in without.content.decode().lower()

    tried = signed_in.post(TRY, form(url, key="sk-test-0123456789"))
    assert tried.status_code == 200
    assert "sk-test-0123456789" not in tried.content.decode(), "a key is never written back"

    saved = signed_in.post(TRY, form(url, action="save", key="sk-test-0123456789"))

    assert saved.status_code == 302
    agent = agent_now()
    assert agent.engine_config["auth_profile"] == MODEL_KEY_PROFILE
    profile = AuthProfile.objects.get(agent=agent, name=MODEL_KEY_PROFILE)
    assert profile.secret == "sk-test-0123456789"
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM chats_authprofile WHERE id = %s", [profile.pk])
        (stored,) = cursor.fetchone()
    assert "sk-test-0123456789" not in stored
    assert keyed_model.completions[-1]["authorization"] == "Bearer sk-test-0123456789"

    # The key is never shown again; left empty for the same address, the saved one is used.
    page = signed_in.get(CONNECT).content.decode()
    assert "sk-test-0123456789" not in page
    again = signed_in.post(TRY, form(url))
    assert again.status_code == 200, again.content.decode()


def test_test_connection_says_a_context_too_small_to_work_in_and_offers_save_anyway(
    signed_in, small_model
):
    response = signed_in.post(TRY, form(small_model.base_url, "mistral:latest"))

    html = unescape(response.content.decode())
    assert response.status_code == 200
    assert f"Connected: “mistral:latest” at {small_model.base_url} answered" in html
    assert "“mistral:latest” has 2048 tokens of context (as Ollama says): too few to work in" in (
        html
    )
    n = re.search(r"To give it (\d+) tokens: start Ollama with OLLAMA_CONTEXT_LENGTH=(\d+)", html)
    assert n and n.group(1) == n.group(2) and int(n.group(1)) > 2048, html
    assert 'name="action" value="save-anyway">Save anyway</button>' in html
    assert 'value="save"' not in html, "no plain Save for a model with no room to work"
    assert not agent_now().has_model


def test_a_context_too_small_to_work_in_is_saved_only_when_asked_twice(signed_in, small_model):
    data = form(small_model.base_url, "mistral:latest", action="save")

    once = signed_in.post(TRY, data)

    assert once.status_code == 400
    said = unescape(once.content.decode())
    assert "too few to work in" in said and "OLLAMA_CONTEXT_LENGTH=" in said
    assert 'value="save-anyway">Save anyway</button>' in said
    assert not agent_now().has_model

    twice = signed_in.post(TRY, {**data, "action": "save-anyway"})

    assert twice.status_code == 302 and twice["Location"] == "/"
    agent = agent_now()
    assert agent.engine == "openai"
    assert agent.engine_config == {"base_url": small_model.base_url, "model": "mistral:latest"}
    assert len(small_model.completions) == 2, "each press tried the model first"


def test_test_connection_measures_the_tools_the_persona_offers(signed_in, small_model, agent):
    # A persona that offers one tool sends a few hundred tokens, not 1,800: 2048 leaves it
    # too little all the same, and the words count what it really sends.
    agent.allowed_tools = ["read_file"]
    agent.save()

    response = signed_in.post(TRY, form(small_model.base_url, "mistral:latest"))
    html = unescape(response.content.decode())
    assert "(the system text and 1 tool schema)" in html, html


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("base_url", "", "Give the server's address"),
        ("base_url", "ftp://127.0.0.1/v1", "must start with http:// or https://"),
        ("base_url", "http://", "That isn't an address"),
        ("base_url", "http://127.0.0.1 :11434/v1", "That isn't an address"),
        ("base_url", "http://127.0.0.1:99999/v1", "a port that isn't a number from 1 to 65535"),
        ("base_url", "http://127.0.0.1:11434/v1?x=1", "without a ? or # part"),
        ("base_url", "http://user:pw@127.0.0.1:11434/v1", "a name and password"),
        ("model", "   ", "Pick one of the server's models"),
        ("key", "sk with spaces", "with no spaces"),
        ("key", "sk-ключ", "with no spaces"),
    ],
)
def test_bad_input_is_refused_in_words_and_tries_nothing(signed_in, model, field, value, words):
    data = form(model.base_url, action="save")
    data[field] = value

    response = signed_in.post(TRY, data)

    assert response.status_code == 400
    assert words in unescape(response.content.decode())
    assert model.requests == [] or all(r["method"] == "GET" for r in model.requests)
    assert model.completions == []
    assert not agent_now().has_model


def test_an_address_without_a_path_gets_v1():
    assert base_url_clean("127.0.0.1:11434") == "http://127.0.0.1:11434/v1"
    assert base_url_clean(" https://api.example/v1/ ") == "https://api.example/v1"
    assert base_url_clean("http://[::1]:8080/") == "http://[::1]:8080/v1"


def test_a_post_without_the_csrf_token_is_refused(owner, agent, model):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)

    response = client.post(TRY, form(model.base_url, action="save"))

    assert response.status_code == 403
    assert not agent_now().has_model
    assert model.completions == []


def test_under_htmx_test_connection_answers_with_the_result_alone_and_save_redirects(htmx, model):
    tried = htmx.post(TRY, form(model.base_url))
    html = tried.content.decode()
    assert tried.status_code == 200
    assert html.lstrip().startswith('<div id="connect-result"')
    assert "<html" not in html and 'name="key"' not in html  # the typed key stays in place

    saved = htmx.post(TRY, form(model.base_url, action="save"))
    assert saved.status_code == 204
    assert saved["HX-Redirect"] == "/"
    assert agent_now().has_model


def test_bad_input_under_htmx_names_the_field(htmx, model):
    response = htmx.post(TRY, form("ftp://x/v1"))
    assert response.status_code == 400
    assert "<li>Address: The address must start with http:// or https://" in (
        response.content.decode()
    )


# -- what the workspace says while no persona has a model --------------------------------


def test_the_new_chat_page_says_no_model_is_connected_and_links_the_page(signed_in):
    html = signed_in.get("/").content.decode()
    notice = re.search(r'<div id="no-model".*?</div>', html, re.S)
    assert notice, html
    assert "No model is connected yet, so nothing can answer a new chat" in notice.group(0)
    assert 'href="/connect/"' in notice.group(0)


def test_the_notice_goes_once_a_persona_has_a_model(signed_in, agent):
    agent.engine = "openai"
    agent.engine_config = {"base_url": "http://127.0.0.1:11434/v1", "model": "qwen2.5-coder:7b"}
    agent.save()

    html = signed_in.get("/").content.decode()

    assert 'id="no-model"' not in html
    assert "Conch answers with “qwen2.5-coder:7b”" in html


def test_a_chat_without_a_model_answers_that_it_has_none_with_the_link(signed_in, chat):
    page = signed_in.get(f"/c/{chat.public_id}/").content.decode()
    notice = re.search(r'<div id="no-model".*?</div>', page, re.S)
    assert notice, page
    assert "Conch, this chat's persona, has no model" in unescape(notice.group(0))
    assert 'href="/connect/"' in notice.group(0)

    message_send(conversation=chat, text="Hello?")
    drain()

    said = chat.entries.filter(role="assistant").get()
    assert said.text.startswith("No model is connected, so nothing can answer you here yet")
    assert "script has no more replies" not in said.text
    assert said.data == {"connect_model": True}
    page = signed_in.get(f"/c/{chat.public_id}/").content.decode()
    answer = re.search(
        r'<div class="msg from-assistant".*?</div>\s*</div>|'
        r'<div class="msg from-assistant".*?</a></div>',
        page,
        re.S,
    )
    assert answer, page
    assert 'href="/connect/"' in answer.group(0)
    assert "Connect a model</a>" in answer.group(0)


def test_a_scripted_chat_still_plays_its_script(signed_in, owner, agent, workspace):
    chat = ChatFactory(owner=owner, folder=str(workspace), reply=[{"say": "From the script."}])

    message_send(conversation=chat, text="go")
    drain()

    assert list(chat.entries.filter(role="assistant").values_list("text", "data")) == [
        ("From the script.", {})
    ]


def test_the_model_guide_starts_from_this_page():
    from pathlib import Path

    from django.urls import reverse

    guide = Path(__file__).resolve().parents[2] / "docs" / "guides" / "connect-a-model.md"
    section = guide.read_text()
    first_steps = section.split("## From the command line", 1)[0]
    assert "**Connect a model**" in first_steps
    assert f"http://127.0.0.1:8000{reverse('chats:connect')}" in first_steps
    assert "**Test connection**" in first_steps and "**Save**" in first_steps
    assert section.index("## From the command line") < section.index("## In the admin")
