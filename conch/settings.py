"""Conch's settings: one module, driven by the environment.

Every variable is read through a small typed helper, so a bad value stops
start-up with an error that names the variable rather than failing later.
The embedded default needs nothing: SQLite in ``CONCH_HOME`` and the
in-memory channel layer. ``DATABASE_URL`` and ``REDIS_URL`` scale it out.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else None


def envbool(name: str, default: bool) -> bool:
    value = _env(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false (got {value!r}).")


def envint(name: str, default: int, *, minimum: int = 0) -> int:
    value = _env(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number (got {value!r}).") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum} (got {number}).")
    return number


def envfloat(name: str, default: float, *, minimum: float = 0.0) -> float:
    value = _env(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number (got {value!r}).") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum} (got {number}).")
    return number


def envchoice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = _env(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)} (got {value!r}).")
    return lowered


def _conch_home() -> Path:
    raw = _env("CONCH_HOME") or "~/.conch"
    home = Path(raw).expanduser()
    try:
        home.mkdir(parents=True, exist_ok=True)
        (home / "logs").mkdir(exist_ok=True)
        (home / "workspaces").mkdir(exist_ok=True)
    except OSError as exc:
        raise ImproperlyConfigured(f"CONCH_HOME ({home}) cannot be created: {exc}") from None
    if not os.access(home, os.W_OK):
        raise ImproperlyConfigured(f"CONCH_HOME ({home}) is not writable.")
    return home.resolve()


CONCH_HOME = _conch_home()


def _secret_key() -> str:
    given = _env("CONCH_SECRET_KEY")
    if given:
        return given
    path = CONCH_HOME / "secret_key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = envbool("CONCH_DEBUG", False)
# Loopback names only: a DNS-rebinding page that points evil.example at
# 127.0.0.1 is refused by Host.
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
CSRF_TRUSTED_ORIGINS = [
    "http://127.0.0.1",
    "http://localhost",
    "http://[::1]",
]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "template_partials",
    "chats.apps.ChatsConfig",
    "together.apps.TogetherConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "conch.urls"
ASGI_APPLICATION = "conch.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _databases() -> dict:
    url = _env("DATABASE_URL")
    if url:
        import dj_database_url

        try:
            config = dj_database_url.parse(url, conn_max_age=0)
        except Exception as exc:  # the parser raises several kinds
            raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {exc}") from None
        if not config.get("ENGINE"):
            raise ImproperlyConfigured("DATABASE_URL names a database Conch cannot use.")
        test_name = _env("CONCH_TEST_DATABASE_NAME")
        if test_name:
            config["TEST"] = {"NAME": test_name}
        return {"default": config}
    return {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": CONCH_HOME / "conch.sqlite3",
            "OPTIONS": {
                # IMMEDIATE takes the write lock at BEGIN, so two writers queue on
                # the busy timeout instead of failing with "database is locked".
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": (
                    "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL;PRAGMA foreign_keys=ON;"
                ),
            },
            "TEST": {"NAME": _env("CONCH_TEST_SQLITE") or None},
        }
    }


DATABASES = _databases()
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def _channel_layers() -> dict:
    url = _env("REDIS_URL")
    if url:
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ImproperlyConfigured(
                f"REDIS_URL must start with redis://, rediss:// or unix:// (got {url!r})."
            )
        return {
            "default": {
                "BACKEND": "channels_redis.core.RedisChannelLayer",
                "CONFIG": {"hosts": [url], "prefix": _env("CONCH_CHANNEL_PREFIX") or "conch"},
            }
        }
    return {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


CHANNEL_LAYERS = _channel_layers()

AUTH_PASSWORD_VALIDATORS: list[dict] = []
LOGIN_URL = "/signin/"
LOGIN_REDIRECT_URL = "/"
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_SAMESITE = "Strict"
X_FRAME_OPTIONS = "DENY"

LANGUAGE_CODE = "en-us"
TIME_ZONE = _env("CONCH_TIME_ZONE") or "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = CONCH_HOME / "static"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
    },
    "loggers": {
        "conch": {"handlers": ["console"], "level": _env("CONCH_LOG_LEVEL") or "INFO"},
        "chats": {"handlers": ["console"], "level": _env("CONCH_LOG_LEVEL") or "INFO"},
        "together": {"handlers": ["console"], "level": _env("CONCH_LOG_LEVEL") or "INFO"},
    },
}

# Conch's own knobs.
CONCH_WORKSPACE = Path(
    _env("CONCH_WORKSPACE") or (CONCH_HOME / "workspaces" / "default")
).expanduser()
CONCH_SUBAGENT_LANE = envint("CONCH_SUBAGENT_LANE", 8, minimum=1)
CONCH_CRON_LANE = envint("CONCH_CRON_LANE", 2, minimum=1)
CONCH_RUNNER_THREADS = envint("CONCH_RUNNER_THREADS", 16, minimum=2)
CONCH_COMMAND_TIMEOUT = envfloat("CONCH_COMMAND_TIMEOUT", 120.0, minimum=0.1)
CONCH_COMMAND_OUTPUT_LIMIT = envint("CONCH_COMMAND_OUTPUT_LIMIT", 16_000, minimum=256)
# Where commands run: in bubblewrap's sandbox when it works (auto), always (required:
# a command is refused where it doesn't work) or never (off). See chats/tools/sandbox.py.
CONCH_SANDBOX = envchoice("CONCH_SANDBOX", "auto", ("auto", "off", "required"))
CONCH_SANDBOX_BWRAP = _env("CONCH_SANDBOX_BWRAP") or "bwrap"
CONCH_TURN_LEASE_SECONDS = envint("CONCH_TURN_LEASE_SECONDS", 60, minimum=2)
CONCH_WEBSOCKET_TIMEOUT = envint("CONCH_WEBSOCKET_TIMEOUT", 24 * 3600, minimum=60)
# fetch_page: reading a web page as text. Private, loopback and link-local addresses
# are refused unless this is set (the tests and conch_play's own loopback pages set it).
CONCH_FETCH_ALLOW_PRIVATE = envbool("CONCH_FETCH_ALLOW_PRIVATE", False)
CONCH_FETCH_TIMEOUT = envfloat("CONCH_FETCH_TIMEOUT", 15.0, minimum=0.1)
CONCH_FETCH_MAX_BYTES = envint("CONCH_FETCH_MAX_BYTES", 2_000_000, minimum=1_024)
# Model engines (chats/engines/openai_compat.py): the defaults a persona's engine_config
# may override. Transient failures are tried again after CONCH_MODEL_BACKOFF seconds,
# doubling each time.
CONCH_MODEL_TIMEOUT = envfloat("CONCH_MODEL_TIMEOUT", 120.0, minimum=1.0)
CONCH_MODEL_RETRIES = envint("CONCH_MODEL_RETRIES", 3, minimum=0)
CONCH_MODEL_BACKOFF = envfloat("CONCH_MODEL_BACKOFF", 1.0, minimum=0.0)
