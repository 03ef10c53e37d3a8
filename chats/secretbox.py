"""Secrets sealed at rest: auth-profile keys and bot tokens, encrypted with Fernet.

The key that opens them is not in the database: it is the file
``CONCH_HOME/secrets.key`` (mode 0600, made when the first secret is saved),
or ``CONCH_SECRETS_KEY`` when several processes share one database. A copy of
the database alone reveals no secret.

The key file holds one key a line; the first seals, every one opens. That is
how ``secrets_key_rotate`` changes the key without a moment when some secret
cannot be opened. A stored secret the keys cannot open reads as an
``UnreadableSecret``: empty, saying which key failed, and saved back unchanged,
so a wrong key file loses nothing and the admin still shows the row.
"""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.apps import apps
from django.conf import settings
from django.db import models, transaction

PREFIX = "fernet:"
ENV_KEY = "CONCH_SECRETS_KEY"
ERR_NO_KEY_FILE = (
    "A stored secret cannot be opened: there is no key file at {path} "
    f"(and {ENV_KEY} is not set). Put back the secrets.key this database was used with."
)
ERR_WRONG_KEY = (
    "A stored secret cannot be opened with the key in {source}: it was sealed with "
    "another key. Put back the key this database was used with."
)
ERR_BAD_KEY_FILE = "The secrets key file {path} cannot be used: {reason}."
ERR_MASKED = "(cannot be opened with the key in {source})"


class SecretsKeyError(Exception):
    """The key to stored secrets is missing, malformed, or not the one they were sealed with."""


class UnreadableSecret(str):
    """A stored secret the key cannot open: reads as "", says why, and saves back unchanged."""

    stored: str
    error: str

    def __new__(cls, stored: str, error: str) -> UnreadableSecret:
        value = super().__new__(cls, "")
        value.stored = stored
        value.error = error
        return value

    def __getnewargs__(self) -> tuple[str, str]:  # type: ignore[override]  # copies and pickles keep what was stored
        return (self.stored, self.error)


def key_file() -> Path:
    return Path(settings.CONCH_HOME) / "secrets.key"


def key_source() -> str:
    """Where the key comes from, as the error messages name it."""
    return ENV_KEY if settings.CONCH_SECRETS_KEYS else str(key_file())


# ---------------------------------------------------------------------------
# The key file


def _write_key_file(path: Path, keys: list[bytes], *, replace: bool) -> None:
    """Write ``keys`` to ``path`` whole or not at all, mode 0600 from the start.

    ``replace=False`` makes the file only if no other process has made it first.
    """
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(b"".join(key + b"\n" for key in keys))
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(temporary, path)
        else:
            try:
                os.link(temporary, path)
            except FileExistsError:
                pass  # another process made it first: theirs is the key
    finally:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _read_key_file(path: Path) -> list[bytes]:
    keys = [line.strip().encode() for line in path.read_text().splitlines() if line.strip()]
    if not keys:
        raise SecretsKeyError(ERR_BAD_KEY_FILE.format(path=path, reason="it is empty"))
    for key in keys:
        try:
            Fernet(key)
        except (ValueError, TypeError):
            reason = "a line is not a Fernet key (32 url-safe base64-encoded bytes)"
            raise SecretsKeyError(ERR_BAD_KEY_FILE.format(path=path, reason=reason)) from None
    return keys


_lock = threading.Lock()
# The key file as last read: (its identity, its keys). Read again when the file changes,
# so a server goes on opening secrets after `conch_rotate_secrets_key` ran beside it.
_cached: tuple[tuple[str, int, int, int], list[bytes]] | None = None


def _keys(*, create: bool) -> list[bytes]:
    """The keys, the sealing one first. ``create``: make the key file if there is none."""
    global _cached
    if settings.CONCH_SECRETS_KEYS:
        return [key.encode() for key in settings.CONCH_SECRETS_KEYS]
    path = key_file()
    with _lock:
        try:
            try:
                found = path.stat()
            except FileNotFoundError:
                if not create:
                    raise SecretsKeyError(ERR_NO_KEY_FILE.format(path=path)) from None
                _write_key_file(path, [Fernet.generate_key()], replace=False)
                found = path.stat()
            identity = (str(path), found.st_ino, found.st_mtime_ns, found.st_size)
            if _cached is None or _cached[0] != identity:
                _cached = (identity, _read_key_file(path))
        except OSError as exc:  # unreadable, a folder, a home that can't be written…
            reason = exc.strerror or str(exc)
            raise SecretsKeyError(ERR_BAD_KEY_FILE.format(path=path, reason=reason)) from None
        return _cached[1]


def keys_known() -> tuple[str, ...]:
    """The secrets keys' values, for scrubbing (``known_secrets``): none if there is no key yet."""
    try:
        return tuple(key.decode() for key in _keys(create=False))
    except SecretsKeyError:
        return ()


def _fernet(*, create: bool) -> MultiFernet:
    return MultiFernet([Fernet(key) for key in _keys(create=create)])


# ---------------------------------------------------------------------------
# Sealing and opening


def secret_seal(value: str) -> str:
    """``value`` as it is stored: ``fernet:`` and a token. "" stays "" (no secret)."""
    if isinstance(value, UnreadableSecret):
        return value.stored
    if not value:
        return value
    token = _fernet(create=True).encrypt(value.encode())
    return PREFIX + token.decode()


def secret_open(stored: str) -> str:
    """The secret in ``stored``, or an ``UnreadableSecret`` saying why it cannot be opened."""
    if not stored or not stored.startswith(PREFIX):
        return stored  # "" or saved before secrets were sealed (the migration seals those)
    try:
        fernet = _fernet(create=False)
    except SecretsKeyError as exc:
        return UnreadableSecret(stored, str(exc))
    try:
        return fernet.decrypt(stored.removeprefix(PREFIX).encode()).decode()
    except InvalidToken:
        return UnreadableSecret(stored, ERR_WRONG_KEY.format(source=key_source()))


def secret_readable(value: str) -> str:
    """``value`` itself, or ``SecretsKeyError`` naming the key if it could not be opened."""
    if isinstance(value, UnreadableSecret):
        raise SecretsKeyError(value.error)
    return value


def secret_masked(value: str) -> str:
    """What the admin shows of a secret: its last four characters at most."""
    if isinstance(value, UnreadableSecret):
        return ERR_MASKED.format(source=key_source())
    if not value:
        return ""
    return "•" * 8 + value[-4:] if len(value) > 8 else "•" * 8


class EncryptedTextField(models.TextField):
    """Text stored sealed with Conch's secrets key: saving seals it, loading opens it.

    Only "" can be looked up: the same secret seals differently each time.
    """

    def from_db_value(self, value, expression, connection):
        return value if value is None else secret_open(value)

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        return value if value is None else secret_seal(value)


# ---------------------------------------------------------------------------
# Rotation


def _sealed_fields() -> list[tuple[type[models.Model], list[str]]]:
    found = []
    for model in apps.get_models():
        names = [f.name for f in model._meta.concrete_fields if isinstance(f, EncryptedTextField)]
        if names:
            found.append((model, names))
    return found


def _stored_secrets(*, write: bool):
    """Every row holding a secret: (model, pk, {field: opened value}).

    Raises ``SecretsKeyError`` at the first secret that cannot be opened.
    """
    for model, names in _sealed_fields():
        rows = model._default_manager.exclude(**{name: "" for name in names})
        if write:
            rows = rows.select_for_update()
        for pk, *values in rows.values_list("pk", *names):
            opened = {name: secret_readable(v) for name, v in zip(names, values, strict=True)}
            yield model, pk, opened


def secrets_reseal() -> int:
    """Seal every stored secret again with the sealing key; how many rows were sealed.

    Raises ``SecretsKeyError``, changing nothing, if any secret cannot be opened.
    """
    count = 0
    with transaction.atomic():
        for model, pk, values in list(_stored_secrets(write=True)):
            model.objects.filter(pk=pk).update(**values)
            count += 1
    return count


def secrets_key_rotate() -> int:
    """Seal every stored secret with a new key, then forget the old ones; how many were sealed.

    The new key is written first beside the old ones, so every process goes on
    opening every secret; the old keys go only once nothing needs them. If it
    stops half-way, every secret still opens, and running it again finishes.
    With ``CONCH_SECRETS_KEY`` set there is no file to change: the secrets are
    sealed again with its first key, after which the others can be dropped.
    """
    if settings.CONCH_SECRETS_KEYS:
        return secrets_reseal()
    path = key_file()
    old = _keys(create=True)
    for _ in _stored_secrets(write=False):
        pass  # each one opens with the keys there are, or this stops before any key changes
    new = Fernet.generate_key()
    _write_key_file(path, [new, *old], replace=True)
    count = secrets_reseal()
    _write_key_file(path, [new], replace=True)
    return count
