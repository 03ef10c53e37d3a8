"""Finding OpenAI-compatible model servers, and the models they serve.

``servers_find`` looks on this computer's loopback address at the ports such
servers listen on out of the box (``USUAL_PORTS``: Ollama 11434, llama.cpp
8080, LM Studio 1234, vLLM 8000; ``CONCH_MODEL_PORTS`` replaces the list) and
asks each ``/v1/models``, all at once, each with a short timeout. A port where
nothing listens, or where something that isn't such a server answers (Conch
itself on 8000, say), is left out.

``models_list`` asks one server, at any address the person gives, and says in
words what went wrong. It is the person's own request from their own page, so
the rules that keep a *model* from reaching private addresses
(``chats.tools.web``) don't apply here: loopback is the point.

Both use the official ``openai`` SDK, as the engine does. It is imported when a
server is asked, not with this module: the chat pages import this module, and the
SDK's import is most of the time any ``conch`` command takes to start.
"""

from __future__ import annotations

import os
import pwd
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from django.conf import settings

from chats.engines.base import EngineError
from chats.engines.http import http_client

if TYPE_CHECKING:
    import openai

LOOPBACK = "127.0.0.1"
# The names of this computer's loopback: where `conch serve` may listen, and where a model
# server's owner is looked up before it is saved.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
PROBE_TIMEOUT = 1.5  # seconds a usual port may take to answer before it counts as nothing there
LIST_TIMEOUT = 10.0  # seconds a server the person named may take to list its models
NO_KEY = "no-key"  # the SDK insists on a key; servers that need none ignore it

# The servers' own defaults, and the name each port is known by.
USUAL_PORTS: dict[int, str] = {11434: "Ollama", 8080: "llama.cpp", 1234: "LM Studio", 8000: "vLLM"}

ERR_UNREACHABLE = "Nothing answered at {url} ({why}). Is the server running there?"
ERR_TIMEOUT = "The server at {url} didn't answer within {seconds:g} seconds."
ERR_KEY = "The server at {url} refused the key ({status}). Check the key."
ERR_NOT_A_SERVER = (
    "The address {url} doesn't answer like an OpenAI-compatible server ({status} for "
    "{url}/models). Such servers' addresses usually end in /v1."
)
ERR_NO_MODELS = "The server at {url} lists no models. Load or pull one there first."


@dataclass(frozen=True)
class FoundServer:
    """A server found on a usual port: what it is probably, where, its models, and whose it is."""

    name: str
    base_url: str
    models: tuple[str, ...]
    # Whose it is: said beside it, not part of which server it is (equality).
    account: str = field(default="", compare=False)  # as the system's socket table says
    yours: bool = field(default=True, compare=False)  # run by Conch's own account, or root


# ---------------------------------------------------------------------------
# Whose server is it? Another account on this computer can listen on a usual port first:
# choosing its server would hand that account the chats' words and their tools' results.

# /proc/net/tcp's local addresses that loopback reaches: 127.0.0.1, 0.0.0.0, ::1, ::,
# and 127.0.0.1 mapped into IPv6.
_REACHED_ON_LOOPBACK = {
    "0100007F",
    "00000000",
    "00000000000000000000000001000000",
    "00000000000000000000000000000000",
    "0000000000000000FFFF00000100007F",
}
_LISTEN = "0A"
SOCKET_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")

WARN_OTHER_ACCOUNT = (
    "The server at {url} is run by another account on this computer, {account}, not by "
    "you or root. Whatever listens there first gets every chat's words and what its tools "
    "read, and its answers choose which tools run as you. Save it only if you trust {account}."
)


def listener_uid(port: int, tables: tuple[str, ...] = SOCKET_TABLES) -> int | None:
    """The user id owning the socket listening on ``port`` where loopback reaches, or None."""
    for table in tables:
        try:
            with open(table, encoding="ascii") as rows:
                next(rows, None)  # the header
                for row in rows:
                    fields = row.split()
                    if len(fields) < 8 or fields[3] != _LISTEN:
                        continue
                    address, _, hex_port = fields[1].rpartition(":")
                    if int(hex_port, 16) == port and address.upper() in _REACHED_ON_LOOPBACK:
                        return int(fields[7])
        except (OSError, ValueError):
            continue
    return None


def account_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"user {uid}"


def runs_as_you(uid: int | None) -> bool:
    """Run by the account Conch runs as, or by root; unknown counts as yours (nothing to say)."""
    return uid is None or uid in (0, os.geteuid())


def other_account_warning(base_url: str) -> str:
    """Words for a loopback server another account runs, or "" if it is yours (or not local)."""
    try:
        parts = urlsplit(base_url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return ""
    if (parts.hostname or "").lower() not in LOOPBACK_HOSTS:
        return ""
    uid = listener_uid(port)
    if runs_as_you(uid):
        return ""
    assert uid is not None
    return WARN_OTHER_ACCOUNT.format(url=base_url, account=account_name(uid))


def usual_ports() -> dict[int, str]:
    """The ports to look on: ``CONCH_MODEL_PORTS`` when set, else the servers' defaults."""
    return {port: USUAL_PORTS.get(port, "A server") for port in settings.CONCH_MODEL_PORTS}


def _client(base_url: str, key: str, timeout: float) -> openai.OpenAI:
    import openai

    return openai.OpenAI(
        base_url=base_url,
        api_key=key or NO_KEY,
        timeout=timeout,
        max_retries=0,
        # The SDK's own annotations name its vendored httpx; the client is httpx's.
        http_client=http_client(timeout=timeout),  # type: ignore[arg-type]
    )


def models_list(base_url: str, key: str = "", *, timeout: float = LIST_TIMEOUT) -> tuple[str, ...]:
    """The models the server at ``base_url`` serves, as its ``/models`` lists them.

    Raises :class:`EngineError` saying, in words, why there are none to pick.
    """
    import openai

    url = base_url.rstrip("/")
    try:
        with _client(url, key, timeout) as client:
            page = client.models.list()
        names = tuple(dict.fromkeys(m.id for m in page.data if isinstance(m.id, str) and m.id))
    except openai.APITimeoutError:
        raise EngineError(ERR_TIMEOUT.format(url=url, seconds=timeout)) from None
    except openai.APIConnectionError as exc:
        why = exc.__cause__ or exc
        raise EngineError(ERR_UNREACHABLE.format(url=url, why=_cause_words(why))) from None
    except openai.AuthenticationError as exc:
        raise EngineError(ERR_KEY.format(url=url, status=exc.status_code)) from None
    except openai.PermissionDeniedError as exc:
        raise EngineError(ERR_KEY.format(url=url, status=exc.status_code)) from None
    except openai.APIStatusError as exc:
        raise EngineError(ERR_NOT_A_SERVER.format(url=url, status=exc.status_code)) from None
    except (openai.APIResponseValidationError, AttributeError, TypeError, ValueError):
        # A 200 that isn't a list of models: a web page, another program's JSON.
        raise EngineError(ERR_NOT_A_SERVER.format(url=url, status="200, not a list")) from None
    if not names:
        raise EngineError(ERR_NO_MODELS.format(url=url))
    return names


def _cause_words(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if "refused" in text.lower():
        return "connection refused"
    return text[:160]


def _probe(port: int, name: str, host: str, timeout: float) -> FoundServer | None:
    base_url = f"http://{host}:{port}/v1"
    try:
        models = models_list(base_url, timeout=timeout)
    except EngineError:
        return None
    uid = listener_uid(port)
    account = account_name(uid) if uid is not None else ""
    return FoundServer(name, base_url, models, account=account, yours=runs_as_you(uid))


def servers_find(
    ports: dict[int, str] | None = None, *, host: str = LOOPBACK, timeout: float = PROBE_TIMEOUT
) -> list[FoundServer]:
    """The OpenAI-compatible servers listening on ``ports`` of this computer, in that order."""
    wanted = usual_ports() if ports is None else ports
    if not wanted:
        return []
    with ThreadPoolExecutor(max_workers=len(wanted)) as pool:
        probes = [pool.submit(_probe, port, name, host, timeout) for port, name in wanted.items()]
        return [found for probe in probes if (found := probe.result()) is not None]
