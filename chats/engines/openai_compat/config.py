"""A persona's settings for the endpoint, checked, and the key from its own auth profile."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings

from chats.engines.base import EngineError
from chats.engines.openai_compat.reasons import ERR_BAD_SETTING, ERR_NO_PROFILE, ERR_NOT_SET_UP
from chats.models import AuthProfile
from chats.secretbox import SecretsKeyError, secret_readable

if TYPE_CHECKING:
    from chats.models import Agent


ENGINE_NAME = "openai"
NO_KEY = "no-key"  # the SDK insists on a key; servers that need none ignore it
CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4  # tokens each message costs beyond its words
DEFAULT_CONTEXT = 8192
CUT_EVERY = 4  # the recap's cut moves this many replies at a time
RECAP_MAX_TOKENS = 1_000
BACKOFF_CAP = 30.0
RETRY_AFTER_CAP = 60.0
MAX_RETRIES = 8


@dataclass(frozen=True)
class ModelConfig:
    base_url: str
    model: str
    auth_profile: str = ""
    context_tokens: int = DEFAULT_CONTEXT
    reserve_tokens: int = DEFAULT_CONTEXT // 8
    timeout: float = 120.0
    retries: int = 3
    temperature: float | None = None
    stream_every: float = 0.25
    context_set: bool = False  # context_tokens was set by hand (else the server's is used)
    reserve_set: bool = False

    def fitted(self, server: int | None) -> ModelConfig:
        """These settings within the context the server says the model has: never more."""
        if not server:
            return self
        context = min(self.context_tokens, server) if self.context_set else server
        context = max(256, context)
        reserve = self.reserve_tokens if self.reserve_set else context // 8
        return dataclasses.replace(
            self, context_tokens=context, reserve_tokens=min(reserve, context - 128)
        )

    @classmethod
    def of(cls, agent: Agent) -> ModelConfig:
        """The persona's settings, checked; EngineError names the setting at fault."""
        config = agent.engine_config if isinstance(agent.engine_config, dict) else {}
        name = agent.slug
        missing = [key for key in ("base_url", "model") if not str(config.get(key) or "").strip()]
        if missing:
            raise EngineError(ERR_NOT_SET_UP.format(agent=name, missing=" and ".join(missing)))
        base_url = str(config["base_url"]).strip()
        if not re.match(r"^https?://[^/\s]+", base_url):
            raise EngineError(
                ERR_BAD_SETTING.format(
                    agent=name, field="base_url", why="must be an http:// or https:// URL"
                )
            )

        def number(
            key: str, default: float | None, low: float, high: float, kind: type = int
        ) -> Any:
            value = config.get(key)
            if value in (None, ""):
                return default
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise EngineError(
                    ERR_BAD_SETTING.format(agent=name, field=key, why="must be a number")
                )
            if not low <= value <= high:
                raise EngineError(
                    ERR_BAD_SETTING.format(
                        agent=name, field=key, why=f"must be from {low:g} to {high:g}"
                    )
                )
            return kind(value)

        context = number("context_tokens", DEFAULT_CONTEXT, 256, 10_000_000)
        return cls(
            base_url=base_url,
            model=str(config["model"]).strip(),
            auth_profile=str(config.get("auth_profile") or "").strip(),
            context_tokens=context,
            reserve_tokens=number("reserve_tokens", context // 8, 0, context - 128),
            timeout=number("timeout", settings.CONCH_MODEL_TIMEOUT, 1, 3600, float),
            retries=min(
                MAX_RETRIES, number("retries", settings.CONCH_MODEL_RETRIES, 0, MAX_RETRIES)
            ),
            temperature=number("temperature", None, 0, 2, float),
            stream_every=number("stream_every", 0.25, 0, 10, float),
            context_set=config.get("context_tokens") not in (None, ""),
            reserve_set=config.get("reserve_tokens") not in (None, ""),
        )


def api_key_for(agent: Agent, config: ModelConfig) -> str:
    """The secret of the persona's own auth profile named in its settings ("" if none is named)."""
    if not config.auth_profile:
        return ""
    secret = (
        AuthProfile.objects.filter(agent_id=agent.pk, name=config.auth_profile)
        .values_list("secret", flat=True)
        .first()
    )
    if secret is None:
        raise EngineError(ERR_NO_PROFILE.format(agent=agent.slug, profile=config.auth_profile))
    try:
        return secret_readable(secret)
    except SecretsKeyError as exc:  # sealed with another key: say which, never send it
        raise EngineError(str(exc)) from None
