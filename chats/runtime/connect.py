"""Connect a model: try a server's model, then make it the default persona's.

The Connect a model page (chats/views.py) and ``conch serve --model`` both end
here. A persona "has a model" when its engine isn't the scripted one
(``Agent.has_model``); until one does, the workspace says so and points here.

Saving sets the default persona (``default_agent``, "Conch", every new chat's)
on the ``openai`` engine with the base URL and model; a key goes into its auth
profile ``MODEL_KEY_PROFILE``, sealed at rest like every auth-profile secret
(chats/secretbox.py). Other engine settings (retries, temperature, the command
settings…) are kept; the context size is dropped when the model changes, as it
belonged to the old one.

Test connection (here and in the admin) also measures what a chat of the persona
sends with every request, its system text and the tools its owner's chats are
offered, against the context the model's server says it has: a model that answers
but leaves no room to work is saved only when asked twice ("Save anyway").
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from chats.engines.openai_compat import ENGINE_NAME, ConnectionResult, connection_test
from chats.models import SCRIPTED_ENGINE, Agent, AuthProfile, Conversation
from chats.runtime.chats import default_agent
from chats.runtime.stepping import system_text_for
from chats.secretbox import SecretsKeyError, secret_readable
from chats.tools.registry import Tool, tools_offered

MODEL_KEY_PROFILE = "model-key"
ERR_NOT_TESTED = "Test connection first: Conch saves a model only once it has answered."


@dataclass(frozen=True)
class ModelChoice:
    """What a person chose: a server's base URL, one of its models, and a key ("" for none)."""

    base_url: str
    model: str
    key: str = ""


def model_connected() -> bool:
    """Whether any persona has a model (if none does, no chat can be answered by one)."""
    return Agent.objects.exclude(engine=SCRIPTED_ENGINE).exists()


def _kept_key(agent: Agent, base_url: str) -> str:
    """The key already saved for this persona at this address, so it needn't be typed again."""
    config = agent.engine_config if isinstance(agent.engine_config, dict) else {}
    if agent.engine != ENGINE_NAME or config.get("base_url") != base_url:
        return ""
    profile = config.get("auth_profile")
    if not profile:
        return ""
    found = AuthProfile.objects.filter(agent=agent, name=profile).first()
    try:
        return secret_readable(found.secret) if found is not None else ""
    except SecretsKeyError:  # sealed with another key: as good as none
        return ""


def _config_for(agent: Agent, choice: ModelChoice) -> dict:
    config = dict(agent.engine_config) if isinstance(agent.engine_config, dict) else {}
    if (config.get("base_url"), config.get("model")) != (choice.base_url, choice.model):
        config.pop("context_tokens", None)
    config.update(base_url=choice.base_url, model=choice.model)
    config.pop("auth_profile", None)
    return config


def chat_sends(agent: Agent) -> tuple[str, list[Tool]]:
    """What every request of a new chat of the persona's owner sends before its transcript:
    the system text and the tools it is offered, as the runtime builds them."""
    chat = Conversation(agent=agent)  # never saved: a new chat of the owner's own, as it starts
    return system_text_for(chat), tools_offered(chat)


def model_test(agent: Agent, *, key: str | None = None) -> ConnectionResult:
    """Test connection for a persona: a tiny request, and whether what its chats send leaves
    the model room to work."""
    system_text, tools = chat_sends(agent)
    return connection_test(agent, key=key, system_text=system_text, tools=tools)


def model_try(*, choice: ModelChoice) -> ConnectionResult:
    """One tiny request to the chosen model, with the key given (or kept), saving nothing;
    measured with the default persona's system text and tools, which it will be saved on."""
    agent = default_agent()
    key = choice.key or _kept_key(agent, choice.base_url)
    trial = Agent.objects.get(pk=agent.pk)  # a copy to try the settings on, never saved
    trial.engine = ENGINE_NAME
    trial.engine_config = _config_for(agent, choice)
    return model_test(trial, key=key)


def model_connect(*, choice: ModelChoice) -> Agent:
    """Make the chosen model the default persona's. The caller has tried it (``model_try``)."""
    agent = default_agent()
    key = choice.key or _kept_key(agent, choice.base_url)
    with transaction.atomic():
        agent = Agent.objects.select_for_update().get(pk=agent.pk)
        config = _config_for(agent, choice)
        if key:
            AuthProfile.objects.update_or_create(
                agent=agent,
                name=MODEL_KEY_PROFILE,
                defaults={"secret": key, "provider": "openai-compatible"},
            )
            config["auth_profile"] = MODEL_KEY_PROFILE
        agent.engine = ENGINE_NAME
        agent.engine_config = config
        agent.save(update_fields=["engine", "engine_config"])
    return agent
