"""Setting a persona's model endpoint in the admin, and its "Test connection" action."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.messages import get_messages
from django.urls import reverse

from tests.engines.conftest import MAIN_KEY, use_model
from tests.engines.fake_openai import Status, Text, closed_port_url
from tests.engines.replay import RECORDINGS, Replay, stream
from tests.factories import agent_admin_form


def said(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_the_endpoint_fields_are_kept_in_engine_config_beside_the_other_settings(
    admin_client, model_agent
):
    url = reverse("admin:chats_agent_change", args=[model_agent.pk])
    response = admin_client.post(
        url,
        agent_admin_form(
            model_agent,
            engine="openai",
            engine_config='{"retries": 1, "temperature": 0.2}',
            model_base_url="http://127.0.0.1:11434/v1",
            model_name="qwen2.5-coder:7b",
            model_context_tokens="32768",
            model_auth_profile="main-key",
        ),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    model_agent.refresh_from_db()
    assert model_agent.engine_config == {
        "retries": 1,
        "temperature": 0.2,
        "base_url": "http://127.0.0.1:11434/v1",
        "model": "qwen2.5-coder:7b",
        "context_tokens": 32768,
        "auth_profile": "main-key",
    }
    page = admin_client.get(url).content.decode()
    assert 'value="qwen2.5-coder:7b"' in page
    assert "Model endpoint" in page


def test_an_openai_persona_without_an_endpoint_is_refused_naming_the_field(
    admin_client, model_agent
):
    url = reverse("admin:chats_agent_change", args=[model_agent.pk])
    response = admin_client.post(
        url, agent_admin_form(model_agent, engine="openai", model_name="m")
    )
    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors["model_base_url"] == ["A persona on the openai engine needs this."]
    model_agent.refresh_from_db()
    assert model_agent.engine_config["model"] == "fake-model"  # nothing was saved


def test_test_connection_makes_a_tiny_request_and_says_it_worked(admin_client, model_agent, fake):
    fake.play(Text("OK"))
    response = admin_client.post(
        reverse("admin:chats_agent_changelist"),
        {"action": "check_connection", "_selected_action": [model_agent.pk]},
        follow=True,
    )
    [message] = said(response)
    assert message.startswith(f"coder: Connected: “fake-model” at {fake.base_url} answered in ")
    assert message.endswith(": 'OK'.")
    [request] = fake.completions
    assert request.body["max_tokens"] == 16
    assert "tools" not in request.body
    assert request.authorization == f"Bearer {MAIN_KEY}"


def test_test_connection_says_plainly_when_the_key_is_refused(admin_client, model_agent, fake):
    fake.play(Status(401, "invalid api key"))
    response = admin_client.post(
        reverse("admin:chats_agent_changelist"),
        {"action": "check_connection", "_selected_action": [model_agent.pk]},
        follow=True,
    )
    [message] = said(response)
    assert "refused the API key (401)" in message
    assert "auth profile “main-key”" in message
    assert MAIN_KEY not in response.content.decode()


def test_test_connection_to_nothing_says_so_at_once(admin_client, model_agent, slept):
    use_model(model_agent, closed_port_url())
    response = admin_client.post(
        reverse("admin:chats_agent_changelist"),
        {"action": "check_connection", "_selected_action": [model_agent.pk]},
        follow=True,
    )
    [message] = said(response)
    assert "couldn't reach the model" in message and "after 1 try" in message
    assert slept == []  # the button answers now; it doesn't wait out retries


def test_test_connection_on_a_scripted_persona_says_there_is_nothing_to_test(admin_client, agent):
    response = admin_client.post(
        reverse("admin:chats_agent_changelist"),
        {"action": "check_connection", "_selected_action": [agent.pk]},
        follow=True,
    )
    assert said(response) == ["main: uses the “scripted” engine, which has no endpoint."]


def test_test_connection_warns_of_a_context_too_small_to_work_in(admin_client, model_agent):
    # vLLM serving the model with max_model_len 2048, as recorded.
    pages = {"/v1/models": json.loads((RECORDINGS / "vllm-models.json").read_text())}
    with Replay(stream("llamacpp-inline-think.sse"), pages=pages) as replay:
        use_model(model_agent, replay.base_url, model="Qwen/Qwen2.5-Coder-7B-Instruct")
        response = admin_client.post(
            reverse("admin:chats_agent_changelist"),
            {"action": "check_connection", "_selected_action": [model_agent.pk]},
            follow=True,
        )
    [message] = get_messages(response.wsgi_request)
    assert message.level == messages.WARNING
    assert str(message).startswith("coder: Connected: “Qwen/Qwen2.5-Coder-7B-Instruct”")
    assert "has 2048 tokens of context (as vLLM says): too few to work in" in str(message)
    assert "restart vLLM with --max-model-len " in str(message)
