"""Conch's settings: one module, driven by the environment.

Every variable is read through a small typed helper, so a bad value stops
start-up with an error that names the variable rather than failing later.
The embedded default needs nothing: SQLite in ``CONCH_HOME`` and the
in-memory channel layer. ``DATABASE_URL`` and ``REDIS_URL`` scale it out.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

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


def envurl(name: str, default: str) -> str:
    """An http:// or https:// address, without its trailing slash."""
    value = _env(name)
    if value is None:
        return default
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImproperlyConfigured(
            f"{name} must be an http:// or https:// address (got {value!r})."
        )
    return value.strip().rstrip("/")


def envzone(name: str, default: str) -> str:
    """A time zone's name, as the tz database knows it."""
    value = (_env(name) or default).strip()
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ImproperlyConfigured(
            f"{name} must be a time zone name, such as Europe/Berlin (got {value!r})."
        ) from None
    return value


def _make_private(path: Path) -> None:
    """Take group's and others' access away from ``path``, if it exists and is ours.

    Conchs before this one made their folder 0755 and their files 0644, so any
    local user could read the database's transcripts and keys: this fixes them.
    """
    try:
        found = path.stat()
    except FileNotFoundError:
        return
    mode = stat.S_IMODE(found.st_mode)
    if found.st_uid == os.geteuid() and mode & 0o077:
        path.chmod(mode & ~0o077)


def _private_folder(path: Path) -> None:
    # mkdir's mode is cut by the umask, never widened: 0700 at most, then no one else's.
    path.mkdir(mode=0o700, exist_ok=True)
    _make_private(path)


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
        home.parent.mkdir(parents=True, exist_ok=True)
        _private_folder(home)
        _private_folder(home / "logs")
        for log in (home / "logs").iterdir():
            if log.is_file():
                _make_private(log)
        _private_folder(home / "workspaces")
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
    _make_private(path)
    return path.read_text().strip()


SECRET_KEY = _secret_key()


def _secrets_keys() -> tuple[str, ...]:
    """CONCH_SECRETS_KEY: Fernet keys, comma-separated, the first sealing stored secrets.

    Unset, the key is the file CONCH_HOME/secrets.key (chats.secretbox makes it).
    """
    given = _env("CONCH_SECRETS_KEY")
    if not given:
        return ()
    from cryptography.fernet import Fernet

    keys = tuple(key.strip() for key in given.split(",") if key.strip())
    for key in keys:
        try:
            Fernet(key)
        except (ValueError, TypeError):
            raise ImproperlyConfigured(
                "CONCH_SECRETS_KEY must be Fernet keys (32 url-safe base64-encoded bytes each), "
                "separated by commas."
            ) from None
    return keys


CONCH_SECRETS_KEYS = _secrets_keys()
_make_private(CONCH_HOME / "secrets.key")  # made by an older Conch, perhaps readable by all

DEBUG = envbool("CONCH_DEBUG", False)
# Loopback names only: a DNS-rebinding page that points evil.example at
# 127.0.0.1 is refused by Host.
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
# None: Django then trusts only scheme://Host, the server's own origin, port and
# all. An entry without a port would trust port 80, where any other program may
# serve a page that sets the CSRF cookie and posts (another port is the same site).
CSRF_TRUSTED_ORIGINS: list[str] = []

INSTALLED_APPS = [
    "conch.apps.DaphneWhenServing",  # Daphne's runserver; Twisted only where it serves
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
    "chats.gateway.apps.GatewayAppConfig",
    "together.apps.TogetherConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "conch.csp.ContentSecurityPolicyMiddleware",  # every response, the admin's and errors too
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "conch.csrf.OwnOriginCsrfViewMiddleware",  # Django's, and no Origin needs our Referer
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


# How long a thread keeps its SQLite connection (seconds). PostgreSQL's still close
# after each use (0): a connection kept by every thread would take a server slot each.
SQLITE_CONN_MAX_AGE = 600


def _databases() -> dict:
    url = _env("DATABASE_URL")
    if url:
        import dj_database_url

        try:
            config = dj_database_url.parse(url, conn_max_age=0)
        except Exception as exc:  # the parser raises several kinds
            raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {exc}") from None
        # PostgreSQL is the one database Conch runs several processes on, and psycopg the
        # one driver it declares: mysql:// would otherwise fail later, as Django's traceback.
        if config.get("ENGINE") != "django.db.backends.postgresql":
            raise ImproperlyConfigured(
                "DATABASE_URL must be a PostgreSQL URL, such as "
                f"postgres://conch@127.0.0.1:5432/conch (got {url.split(':', 1)[0]}://…)."
            )
        test_name = _env("CONCH_TEST_DATABASE_NAME")
        if test_name:
            config["TEST"] = {"NAME": test_name}
        return {"default": config}
    database = CONCH_HOME / "conch.sqlite3"
    for suffix in ("", "-wal", "-shm", "-journal"):
        _make_private(database.with_name(database.name + suffix))
    return {
        "default": {
            # Django's SQLite, making a new database file 0600 before SQLite opens it.
            "ENGINE": "conch.sqlite3",
            "NAME": database,
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
            # Each thread keeps its connection (the views', the socket's render thread,
            # the runners'), rather than opening the file and running the PRAGMAs above
            # again for every request and every push. Checked before it is reused.
            "CONN_MAX_AGE": SQLITE_CONN_MAX_AGE,
            "CONN_HEALTH_CHECKS": True,
        }
    }


DATABASES = _databases()
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


# How long a read from Redis may wait: redis-py 8 gives every read 5 s by default. The
# Pub/Sub layer's reads wait 0.1 s at most; a command on a Redis that went silent fails
# after this long, and the pages see the gap.
REDIS_SOCKET_TIMEOUT = 15.0


def redis_channel_layer(url: str, *, prefix: str) -> dict:
    """The Redis channel layer's settings for this URL (``REDIS_URL``).

    channels_redis's Pub/Sub layer: a send is one PUBLISH, heard by every process with a
    page in its group. Its list-based layer took four round trips a send and three a
    receive, and kept each message until read, which Conch doesn't need: an event is a
    hint, delivered at most once, and a page that misses one sees the gap and fetches
    what it missed (chats/events.py).
    """
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ImproperlyConfigured(
            f"REDIS_URL must start with redis://, rediss:// or unix:// (got {url!r})."
        )
    host = {"address": url, "socket_timeout": REDIS_SOCKET_TIMEOUT}
    return {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [host], "prefix": prefix},
    }


def _channel_layers() -> dict:
    url = _env("REDIS_URL")
    if url:
        return {"default": redis_channel_layer(url, prefix=_env("CONCH_CHANNEL_PREFIX") or "conch")}
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
TIME_ZONE = envzone("CONCH_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = CONCH_HOME / "static"

# Conch's own logs' level: validated here, as logging's own complaint is a traceback.
LOG_LEVEL = envchoice(
    "CONCH_LOG_LEVEL", "info", ("debug", "info", "warning", "error", "critical")
).upper()

# Every error with its traceback, DEBUG or not: a request's 500 (django.request),
# an exception that escapes the app, a socket's included (Daphne reports those),
# and Conch's own. The console says them too, but nobody may be watching it.
ERROR_LOG = CONCH_HOME / "logs" / "errors.log"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "errors": {
            "class": "conch.logs.PrivateRotatingFileHandler",
            "filename": str(ERROR_LOG),
            "maxBytes": 5_000_000,
            "backupCount": 5,
            "encoding": "utf-8",
            "delay": True,  # no file until there is an error to write
            "level": "ERROR",
            "formatter": "plain",
        },
    },
    "loggers": {
        "conch": {"handlers": ["console", "errors"], "level": LOG_LEVEL},
        "chats": {"handlers": ["console", "errors"], "level": LOG_LEVEL},
        "together": {
            "handlers": ["console", "errors"],
            "level": LOG_LEVEL,
        },
        # No level here: their warnings (a 404, a 400) still reach Django's console.
        "django.request": {"handlers": ["errors"]},
        "daphne": {"handlers": ["errors"]},
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
# A command that prints more than this in all (stdout and stderr) is ended: only a head
# and a tail of what it prints are ever kept (chats/tools/output.py).
CONCH_COMMAND_OUTPUT_MAX_BYTES = envint(
    "CONCH_COMMAND_OUTPUT_MAX_BYTES", 32 * 1024 * 1024, minimum=64 * 1024
)
# How fast the gateway takes messages in from anyone but the owner (chats/gateway/floods.py):
# at most this many in a window from one sender, on one bot account, and in all.
CONCH_INBOUND_PER_SENDER = envint("CONCH_INBOUND_PER_SENDER", 20, minimum=1)
CONCH_INBOUND_PER_ACCOUNT = envint("CONCH_INBOUND_PER_ACCOUNT", 60, minimum=1)
CONCH_INBOUND_PER_INSTALL = envint("CONCH_INBOUND_PER_INSTALL", 120, minimum=1)
CONCH_INBOUND_WINDOW_SECONDS = envint("CONCH_INBOUND_WINDOW_SECONDS", 60, minimum=1)
# Where commands run: in bubblewrap's sandbox when it works (auto), always (required:
# a command is refused where it doesn't work) or never (off). See chats/tools/sandbox.py.
CONCH_SANDBOX = envchoice("CONCH_SANDBOX", "auto", ("auto", "off", "required"))
CONCH_SANDBOX_BWRAP = _env("CONCH_SANDBOX_BWRAP") or "bwrap"
# Tools from MCP servers (chats/mcp/client.py): how long one call may take, and how long
# a server with no call in flight is kept before it is ended (started again when needed).
CONCH_MCP_CALL_SECONDS = envfloat("CONCH_MCP_CALL_SECONDS", 120.0, minimum=0.1)
CONCH_MCP_IDLE_SECONDS = envfloat("CONCH_MCP_IDLE_SECONDS", 300.0, minimum=1.0)
CONCH_TURN_LEASE_SECONDS = envint("CONCH_TURN_LEASE_SECONDS", 60, minimum=2)
CONCH_WEBSOCKET_TIMEOUT = envint("CONCH_WEBSOCKET_TIMEOUT", 24 * 3600, minimum=60)
# fetch_page: reading a web page as text. Private, loopback and link-local addresses
# are refused unless this is set (the tests and conch_play's own loopback pages set it).
CONCH_FETCH_ALLOW_PRIVATE = envbool("CONCH_FETCH_ALLOW_PRIVATE", False)
CONCH_FETCH_TIMEOUT = envfloat("CONCH_FETCH_TIMEOUT", 15.0, minimum=0.1)
CONCH_FETCH_MAX_BYTES = envint("CONCH_FETCH_MAX_BYTES", 2_000_000, minimum=1_024)
# Model engines (chats/engines/openai_compat/): the defaults a persona's engine_config
# may override. Transient failures are tried again after CONCH_MODEL_BACKOFF seconds,
# doubling each time.
CONCH_MODEL_TIMEOUT = envfloat("CONCH_MODEL_TIMEOUT", 120.0, minimum=1.0)
CONCH_MODEL_RETRIES = envint("CONCH_MODEL_RETRIES", 3, minimum=0)
CONCH_MODEL_BACKOFF = envfloat("CONCH_MODEL_BACKOFF", 1.0, minimum=0.0)


def envports(name: str, default: tuple[int, ...]) -> tuple[int, ...]:
    """Port numbers, comma-separated."""
    value = _env(name)
    if value is None:
        return default
    ports = []
    for part in value.split(","):
        try:
            port = int(part.strip())
        except ValueError:
            port = 0
        if not 1 <= port <= 65535:
            raise ImproperlyConfigured(
                f"{name} must be port numbers from 1 to 65535, separated by commas (got {value!r})."
            )
        ports.append(port)
    return tuple(dict.fromkeys(ports))


# The default persona's model, set when `conch serve` starts (its --model overrides
# CONCH_MODEL_URL); the Connect a model page sets it from the browser instead.
CONCH_MODEL_URL = envurl("CONCH_MODEL_URL", "")
CONCH_MODEL = (_env("CONCH_MODEL") or "").strip()
# Where the Connect a model page looks for servers on 127.0.0.1: Ollama's, llama.cpp's,
# LM Studio's and vLLM's default ports (chats/engines/discovery.py).
CONCH_MODEL_PORTS = envports("CONCH_MODEL_PORTS", (11434, 8080, 1234, 8000))
# The gateway: the zone daily resets are counted in, and replies to chat apps.
CONCH_TIME_ZONE = TIME_ZONE
CONCH_TELEGRAM_API_BASE = envurl("CONCH_TELEGRAM_API_BASE", "https://api.telegram.org")
# Each chat app's API, pointed elsewhere only by tests (their loopback fakes).
CONCH_SLACK_API_BASE = envurl("CONCH_SLACK_API_BASE", "https://slack.com/api/")
CONCH_DISCORD_API_BASE = envurl("CONCH_DISCORD_API_BASE", "https://discord.com/api/v10")
CONCH_WHATSAPP_API_BASE = envurl("CONCH_WHATSAPP_API_BASE", "https://graph.facebook.com/v21.0")
CONCH_OUTBOX_MAX_ATTEMPTS = envint("CONCH_OUTBOX_MAX_ATTEMPTS", 8, minimum=1)
CONCH_OUTBOX_BACKOFF_SECONDS = envfloat("CONCH_OUTBOX_BACKOFF_SECONDS", 5.0, minimum=0.0)
