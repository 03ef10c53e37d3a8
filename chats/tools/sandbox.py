"""What a command can reach: its environment, and bubblewrap's sandbox where it works.

A command gets a short allow-list of the server's environment, never Conch's
settings or keys. With ``CONCH_SANDBOX`` at ``auto`` (where bubblewrap works)
or ``required`` it runs inside ``bwrap``: the system and the owner's home
read-only, the chat's folder read-write; other people's homes, ``CONCH_HOME``,
the usual credential stores in the owner's home, ``/run`` and the temporary
folders hidden behind empty ones of its own; no capabilities, and no network
unless the persona allows it. See the README, "What a command can reach".
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

SANDBOX_AUTO = "auto"
SANDBOX_OFF = "off"
SANDBOX_REQUIRED = "required"

# The environment every command gets, where the server has it.
PASSED_ENV = ("PATH", "HOME", "LANG", "TERM", "TZ", "USER", "SHELL", "TMPDIR")
PASSED_ENV_PREFIXES = ("LC_",)
# What a persona may never pass on, even by name: Conch's own settings and the keys it holds.
NEVER_ENV_PREFIXES = ("CONCH_", "DJANGO_")
NEVER_ENV_NAMES = frozenset({"DATABASE_URL", "REDIS_URL"})
NEVER_ENV_SUFFIXES = ("_API_KEY",)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# The persona's settings, in Agent.engine_config.
COMMAND_ENV = "command_env"
COMMAND_NETWORK = "command_network"

ERR_COMMAND_ENV_SHAPE = f"{COMMAND_ENV} must be a list of environment variable names."
ERR_COMMAND_ENV_NAME = f"{COMMAND_ENV}: {{name!r}} is not an environment variable name."
ERR_COMMAND_ENV_REFUSED = (
    f"{COMMAND_ENV}: {{name}} is never passed to commands: Conch's own settings, "
    "its database and Redis addresses and API keys stay with Conch."
)
ERR_COMMAND_NETWORK = f"{COMMAND_NETWORK} must be true or false."
ERR_SANDBOX_REQUIRED = (
    "CONCH_SANDBOX is 'required' and the sandbox does not work on this computer ({why}), "
    "so the command was not run."
)
ERR_SANDBOX_FOR_OTHER_PEOPLE = (
    "Commands in a chat with someone else's words run only in the sandbox, and the sandbox "
    "does not work on this computer ({why}), so the command was not run."
)
NOTE_NO_SANDBOX = (
    "Note: commands in this chat run without a sandbox on this computer ({why}). "
    "They can read and change whatever Conch's own user can, and reach the network."
)


def env_name_refused(name: str) -> bool:
    return (
        name.startswith(NEVER_ENV_PREFIXES)
        or name in NEVER_ENV_NAMES
        or name.endswith(NEVER_ENV_SUFFIXES)
    )


@dataclass(frozen=True)
class CommandSettings:
    """A persona's settings for its commands, checked."""

    env_names: tuple[str, ...] = ()
    network: bool = False


def command_settings_errors(config: Any) -> list[str]:
    """What is wrong with the command settings in a persona's ``engine_config``."""
    if not isinstance(config, Mapping):
        return []
    errors: list[str] = []
    names = config.get(COMMAND_ENV, [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        errors.append(ERR_COMMAND_ENV_SHAPE)
    else:
        for name in names:
            if not _ENV_NAME.match(name):
                errors.append(ERR_COMMAND_ENV_NAME.format(name=name))
            elif env_name_refused(name):
                errors.append(ERR_COMMAND_ENV_REFUSED.format(name=name))
    if not isinstance(config.get(COMMAND_NETWORK, False), bool):
        errors.append(ERR_COMMAND_NETWORK)
    return errors


def command_settings(config: Any) -> CommandSettings:
    """The persona's command settings; ValueError with every fault when they are wrong."""
    errors = command_settings_errors(config)
    if errors:
        raise ValueError(" ".join(errors))
    if not isinstance(config, Mapping):
        return CommandSettings()
    return CommandSettings(
        env_names=tuple(config.get(COMMAND_ENV, [])),
        network=bool(config.get(COMMAND_NETWORK, False)),
    )


def command_environment(
    chosen: CommandSettings, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment a command runs with: the allow-list and what the persona names."""
    environ = os.environ if environ is None else environ
    env = {
        name: value
        for name, value in environ.items()
        if (name in PASSED_ENV or name.startswith(PASSED_ENV_PREFIXES))
        and not env_name_refused(name)
    }
    for name in chosen.env_names:
        if name in environ and not env_name_refused(name):
            env[name] = environ[name]
    env.setdefault("PATH", os.defpath)
    return env


# ---------------------------------------------------------------------------
# bubblewrap


def bwrap_path() -> str | None:
    return shutil.which(settings.CONCH_SANDBOX_BWRAP)


# Where people's home folders are: hidden, except the owner's own.
HOMES = ("/home", "/root")
# Hidden because what is in them can reach other programs: sockets (Docker's, the
# database's, D-Bus), and the temporary folders every program shares.
SHARED_PLACES = ("/run", "/tmp", "/var/tmp")
# In the owner's home: where keys and passwords usually live. Hidden, best effort.
CREDENTIAL_STORES = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".config/gcloud",
    ".config/gh",
    ".password-store",
    ".local/share/keyrings",
    ".netrc",
    ".git-credentials",
    ".pgpass",
    ".npmrc",
    ".pypirc",
)

_HIDE, _SHOW, _WRITE = 0, 1, 2  # at the same path, the later one wins


def conch_itself() -> tuple[str, ...]:
    """Where Conch's own Python and code are: its interpreter, the virtualenv it runs in,
    and the folder its code is in. A stdio MCP server is often one of its packages, run
    by its interpreter, and the sandbox shows those wherever they are."""
    here = Path(__file__).resolve().parents[2]  # the folder holding chats/, conch/…
    return (sys.base_prefix, sys.prefix, str(here))


def _real(path: str | os.PathLike | None) -> str | None:
    """The real path of an existing place other than /, or None."""
    if not path:
        return None
    real = os.path.realpath(os.path.expanduser(str(path)))
    return real if real != "/" and os.path.exists(real) else None


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _mounts(folder: str, *, network: bool) -> list[tuple[str, int, list[str]]]:
    """(path, kind, bwrap arguments) for every place the sandbox hides, shows or lets write."""
    mounts: list[tuple[str, int, list[str]]] = []

    def hide(place: str | os.PathLike | None) -> None:
        real = _real(place)
        if real is None:
            return
        if os.path.isdir(real):
            mounts.append((real, _HIDE, ["--tmpfs", real]))
        else:  # a file: an empty one in its place
            mounts.append((real, _HIDE, ["--ro-bind", "/dev/null", real]))

    for place in (*HOMES, *SHARED_PLACES):
        hide(place)
    home = _real(Path.home())
    if home is not None and os.path.isdir(home):
        if any(_inside(home, place) for place in HOMES):
            mounts.append((home, _SHOW, ["--ro-bind", home, home]))
        for store in CREDENTIAL_STORES:
            hide(os.path.join(home, store))
    for place in conch_itself():
        # Read-only, where a shared place hides it (a checkout or virtualenv in /tmp):
        # elsewhere it is shown with the rest of the system, or the owner's home.
        real = _real(place)
        if real and any(_inside(real, shared) for shared in SHARED_PLACES):
            mounts.append((real, _SHOW, ["--ro-bind", real, real]))
    hide(settings.CONCH_HOME)
    if network:
        # The resolver's file often lives in /run, which is hidden: show that one file.
        resolv = _real("/etc/resolv.conf")
        if resolv and any(_inside(resolv, place) for place in SHARED_PLACES):
            mounts.append((resolv, _SHOW, ["--ro-bind", resolv, resolv]))
    mounts.append((folder, _WRITE, ["--bind", folder, folder]))
    return mounts


# For a chat with other people in it: the system a shell needs, and nothing of the owner's.
STRANGERS_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Of /etc, only what programs need to start and find each other (Debian's alternatives:
# awk, editor…), and, with the network, to resolve names and check certificates.
STRANGERS_ETC = ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime")
STRANGERS_ETC_NETWORK = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ssl")


def _strangers_view(folder: str, *, network: bool) -> list[str]:
    """Mounts for a stranger's command: the system directories, a minimal /etc, the folder.

    ``/`` isn't mounted at all: no home, no ``/srv``, ``/opt`` or ``/var``, nothing of
    ``CONCH_HOME``; what isn't named here isn't there.
    """
    argv: list[str] = []
    for place in STRANGERS_SYSTEM:
        if os.path.islink(place):  # merged /usr: /bin -> usr/bin
            argv += ["--symlink", os.readlink(place), place]
        elif os.path.isdir(place):
            argv += ["--ro-bind", place, place]
    for place in STRANGERS_ETC + (STRANGERS_ETC_NETWORK if network else ()):
        real = os.path.realpath(place)
        if os.path.exists(real):
            argv += ["--ro-bind", real, place]
    argv += ["--tmpfs", "/tmp", "--bind", folder, folder]
    return argv


def bwrap_argv(bwrap: str, folder: str, *, network: bool, strangers: bool = False) -> list[str]:
    """bwrap's arguments to run a command in ``folder`` (a real path).

    Mounts go shallowest first, so a deeper one wins: the chat's folder shows
    through a hidden home it lies in, and ``CONCH_HOME`` stays hidden inside
    a chat's folder (or a home) that holds it. For a chat with other people in it
    (``strangers``), only the system, a minimal ``/etc`` and the folder are there.
    """
    argv = [bwrap]
    if strangers:
        argv += ["--dev", "/dev", "--proc", "/proc", *_strangers_view(folder, network=network)]
    else:
        argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for _, _, args in sorted(
            _mounts(folder, network=network), key=lambda m: (len(Path(m[0]).parts), m[1])
        ):
            argv += args
    argv += ["--unshare-all"]
    if network:
        argv += ["--share-net"]
    argv += [
        # Root in the sandbox could otherwise remount / read-write, or take the tmpfs off /home.
        "--cap-drop",
        "ALL",
        # If Conch dies, so does the sandbox. No --new-session: Conch starts bwrap in a
        # session of its own with no terminal, and keeping the command in bwrap's
        # process group lets SIGTERM reach it when it is stopped.
        "--die-with-parent",
        "--chdir",
        folder,
    ]
    return argv


@dataclass(frozen=True)
class Probe:
    works: bool
    why: str = ""
    bwrap: str = ""


PROBE_ENV = {"PATH": os.defpath}


@functools.lru_cache(maxsize=8)
def _probe(bwrap: str | None) -> Probe:
    if bwrap is None:
        return Probe(False, f"{settings.CONCH_SANDBOX_BWRAP} is not installed")
    folder = os.path.realpath(settings.CONCH_HOME)
    argv = bwrap_argv(bwrap, folder, network=False) + ["/bin/sh", "-c", ":"]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, errors="replace", timeout=30, env=PROBE_ENV
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return Probe(False, f"{bwrap} could not run: {exc}")
    if done.returncode != 0:
        said = " ".join(done.stderr.split())[:300] or f"exit status {done.returncode}"
        return Probe(False, f"{bwrap} failed: {said}")
    return Probe(True, bwrap=bwrap)


def sandbox_probe() -> Probe:
    """Whether bubblewrap works here, tried once per process (and per bwrap path)."""
    return _probe(bwrap_path())


def sandbox_probe_forget() -> None:
    """Try again at the next command (tests; a bwrap installed while Conch runs)."""
    _probe.cache_clear()
