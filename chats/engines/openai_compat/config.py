"""A persona's settings for the endpoint, checked, and the key from its own auth profile."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings

from chats.engines.base import EngineError
from chats.engines.openai_compat.reasons import ERR_BAD_SETTING, ERR_NO_PROFILE, ERR_NOT_SET_UP
from chats.limits import LIMITS
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
# Room a chat needs beyond what every request sends (the system text, the tool schemas) and
# the reserve for the answer: the person's message and the reply's steps so far. The
# reply being written is never folded into a recap, so this is what one reply may grow
# to before it fails: four tool results at their longest (LIMITS.tool_result_chars each),
# about 4,000 tokens. A context with less than this is too small to work in.
ROOM_TO_WORK = 4 * LIMITS.tool_result_chars // CHARS_PER_TOKEN
# The context sizes Conch advises are whole multiples of this.
CONTEXT_STEP = 1024

# The servers that say their context size, as :class:`ServerContext` names them.
OLLAMA = "Ollama"
LLAMACPP = "llama.cpp"
VLLM = "vLLM"


@dataclass(frozen=True)
class ServerContext:
    """The model's context size as its server says it, and which kind of server said it."""

    size: int
    kind: str = ""  # OLLAMA, LLAMACPP, VLLM; "" when only the number is known
    slots: int = 1  # llama.cpp: the slots its context may be shared among
    own_setting: bool = False  # Ollama: the model's own num_ctx sets it (not the server's)


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
    context_set: bool = False  # context_tokens was set by hand (else the server's is used)
    reserve_set: bool = False
    server: ServerContext | None = None  # what the server said, once fitted to it

    def fitted(self, server: int | ServerContext | None) -> ModelConfig:
        """These settings within the context the server says the model has: never more."""
        said = ServerContext(server) if isinstance(server, int) else server
        if not said or said.size <= 0:
            return self
        context = min(self.context_tokens, said.size) if self.context_set else said.size
        context = max(256, context)
        reserve = self.reserve_tokens if self.reserve_set else context // 8
        return dataclasses.replace(
            self, context_tokens=context, reserve_tokens=min(reserve, context - 128), server=said
        )

    def context_for(self, tokens: int) -> int:
        """The smallest context, in whole CONTEXT_STEPs, that holds ``tokens`` beside the
        reserve for the answer (an eighth of the context, unless reserve_tokens is set)."""
        whole = tokens + self.reserve_tokens if self.reserve_set else -(-tokens * 8 // 7)
        return -(-whole // CONTEXT_STEP) * CONTEXT_STEP

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
