"""Auth-profile keys and bot tokens are sealed at rest: the database alone reveals none.

Each test has its own CONCH_HOME, so its own key file. The subprocess tests in
tests/conch/test_files_at_rest.py copy a real database file without its key.
"""

from __future__ import annotations

import copy
import os
import pickle
import stat

import pytest
from cryptography.fernet import Fernet, InvalidToken
from django.core.management import CommandError, call_command
from django.db import connection
from django.urls import reverse

from chats import secretbox
from chats.engines.base import EngineError
from chats.engines.openai_compat import ModelConfig, api_key_for
from chats.gateway.models import ChannelAccount, OutboxMessage
from chats.gateway.outbox import DeliveryError
from chats.gateway.telegram import TelegramSender
from chats.models import AuthProfile
from chats.quoting import clean, profile_secrets
from chats.secretbox import PREFIX, UnreadableSecret

API_KEY = "hunter2-correct-horse-battery"  # no key shape: only known_secrets can find it
BOT_TOKEN = "123456:very-secret-bot-token-abcdefghijklmnop"


@pytest.fixture
def home(settings, tmp_path):
    """A CONCH_HOME of the test's own, so a key file of its own; the key file, unset."""
    folder = tmp_path / "home"
    folder.mkdir(mode=0o700)
    settings.CONCH_HOME = folder
    settings.CONCH_SECRETS_KEYS = ()
    return folder


@pytest.fixture
def profile(home, agent):
    return AuthProfile.objects.create(agent=agent, name="main-key", secret=API_KEY)


@pytest.fixture
def account(home, owner):
    return ChannelAccount.objects.create(
        owner=owner, channel="telegram", account_id="mybot", secret=BOT_TOKEN
    )


def stored(model, pk) -> str:
    """The secret column as the database holds it, past the field."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT secret FROM {model._meta.db_table} WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def opens_with(key: bytes, raw: str) -> str:
    return Fernet(key).decrypt(raw.removeprefix(PREFIX).encode()).decode()


def key_lines(home) -> list[bytes]:
    return (home / "secrets.key").read_bytes().split()


# ---------------------------------------------------------------------------
# Sealed


def test_a_saved_auth_profile_key_or_bot_token_is_never_in_its_database_column(
    home, profile, account
):
    for model, pk, secret in [
        (AuthProfile, profile.pk, API_KEY),
        (ChannelAccount, account.pk, BOT_TOKEN),
    ]:
        raw = stored(model, pk)
        assert raw.startswith(PREFIX)
        assert secret not in raw
        [key] = key_lines(home)
        assert opens_with(key, raw) == secret  # sealed with the key file's key, nothing else
        assert model.objects.get(pk=pk).secret == secret


def test_the_key_file_is_made_once_with_the_first_secret_and_is_the_owners_alone(home, agent):
    assert not (home / "secrets.key").exists()
    old = os.umask(0)
    try:
        AuthProfile.objects.create(agent=agent, name="one", secret=API_KEY)
    finally:
        os.umask(old)
    AuthProfile.objects.create(agent=agent, name="two", secret="another-one-entirely")

    assert stat.S_IMODE((home / "secrets.key").stat().st_mode) == 0o600
    assert len(key_lines(home)) == 1


def test_an_empty_secret_stays_empty_and_makes_no_key(home, agent):
    profile = AuthProfile.objects.create(agent=agent, name="none", secret="")

    assert stored(AuthProfile, profile.pk) == ""
    assert not (home / "secrets.key").exists()
    assert list(AuthProfile.objects.exclude(secret="")) == []


def test_profile_secrets_still_finds_a_sealed_key_to_scrub(profile):
    assert API_KEY in profile_secrets()
    assert clean(f"the deploy key is {API_KEY}, keep it safe") == (
        "the deploy key is [redacted], keep it safe"
    )


def test_the_engine_opens_the_sealed_key_for_its_bearer_token(profile, agent):
    assert api_key_for(agent, ModelConfig(base_url="x", model="m", auth_profile="main-key")) == (
        API_KEY
    )


def test_the_telegram_sender_opens_the_sealed_bot_token_for_its_url(account, monkeypatch):
    called: list = []
    monkeypatch.setattr(TelegramSender, "_call", lambda self, token, *a: called.append(token))
    message = OutboxMessage(
        channel="telegram", account_id="mybot", target={"chat_id": 1}, text="hi"
    )
    monkeypatch.setattr("chats.gateway.telegram.outbox_part_sent", lambda **kw: None)

    TelegramSender().send(message, ChannelAccount.objects.get(pk=account.pk))

    assert called == [BOT_TOKEN]


# ---------------------------------------------------------------------------
# The wrong key: a clear error naming it, nothing lost, no 500


@pytest.fixture
def wrong_key(home, profile, account):
    """The key file replaced by another key: the stored secrets were sealed with the first."""
    right = (home / "secrets.key").read_bytes()
    (home / "secrets.key").write_bytes(Fernet.generate_key() + b"\n")
    return right


def test_a_secret_sealed_with_another_key_reads_as_unreadable_naming_the_key_file(
    home, wrong_key, profile, account, agent
):
    key_file = str(home / "secrets.key")
    for found in (
        AuthProfile.objects.get(pk=profile.pk),
        ChannelAccount.objects.get(pk=account.pk),
    ):
        assert isinstance(found.secret, UnreadableSecret)
        assert found.secret == ""
        assert key_file in found.secret.error
        assert found.masked == f"(cannot be opened with the key in {key_file})"

    with pytest.raises(EngineError) as refused:
        api_key_for(agent, ModelConfig(base_url="x", model="m", auth_profile="main-key"))
    assert key_file in str(refused.value)

    message = OutboxMessage(channel="telegram", account_id="mybot", target={"chat_id": 1})
    with pytest.raises(DeliveryError) as undelivered:
        TelegramSender().send(message, ChannelAccount.objects.get(pk=account.pk))
    assert key_file in str(undelivered.value)
    assert not undelivered.value.permanent  # putting the key back lets it go out


def test_a_missing_key_file_is_named_in_the_error(home, profile):
    (home / "secrets.key").unlink()

    found = AuthProfile.objects.get(pk=profile.pk)

    assert found.secret.error == secretbox.ERR_NO_KEY_FILE.format(path=home / "secrets.key")


def test_the_admin_shows_an_unreadable_secret_and_saving_the_form_keeps_it(
    client, owner, agent, home, wrong_key, profile, account
):
    client.force_login(owner)
    key_file = str(home / "secrets.key")
    for url in (
        reverse("admin:chats_authprofile_changelist"),
        reverse("admin:chats_authprofile_change", args=[profile.pk]),
        reverse("admin:gateway_channelaccount_changelist"),
        reverse("admin:gateway_channelaccount_change", args=[account.pk]),
        reverse("admin:chats_agent_change", args=[agent.pk]),
    ):
        page = client.get(url)
        assert page.status_code == 200, url
        assert key_file in page.content.decode(), url
    before = stored(AuthProfile, profile.pk)

    saved = client.post(
        reverse("admin:chats_authprofile_change", args=[profile.pk]),
        {"agent": agent.pk, "name": "main-key", "provider": "renamed", "secret": ""},
    )

    assert saved.status_code == 302
    assert stored(AuthProfile, profile.pk) == before
    assert AuthProfile.objects.get(pk=profile.pk).provider == "renamed"
    (home / "secrets.key").write_bytes(wrong_key)  # the right key back: the secret is there
    assert AuthProfile.objects.get(pk=profile.pk).secret == API_KEY


def test_the_admin_still_masks_a_sealed_secret(client, owner, profile):
    client.force_login(owner)
    body = client.get(reverse("admin:chats_authprofile_changelist")).content.decode()

    assert API_KEY not in body
    assert stored(AuthProfile, profile.pk) not in body
    assert "•" * 8 + API_KEY[-4:] in body


# ---------------------------------------------------------------------------
# Rotation


def test_rotation_seals_every_secret_with_a_new_key_and_the_old_key_opens_none(
    home, profile, account, capsys
):
    [old] = key_lines(home)
    before = {
        AuthProfile: stored(AuthProfile, profile.pk),
        ChannelAccount: stored(ChannelAccount, account.pk),
    }

    call_command("conch_rotate_secrets_key")

    [new] = key_lines(home)
    assert new != old
    assert stat.S_IMODE((home / "secrets.key").stat().st_mode) == 0o600
    for model, pk, secret in [
        (AuthProfile, profile.pk, API_KEY),
        (ChannelAccount, account.pk, BOT_TOKEN),
    ]:
        raw = stored(model, pk)
        assert raw != before[model]
        with pytest.raises(InvalidToken):
            opens_with(old, raw)
        assert opens_with(new, raw) == secret
        assert model.objects.get(pk=pk).secret == secret
    assert API_KEY in profile_secrets()
    assert f"Sealed 2 secret(s) with a new key in {home / 'secrets.key'}" in capsys.readouterr().out


def test_rotation_changes_no_key_while_a_secret_cannot_be_opened(home, wrong_key, profile):
    before = (home / "secrets.key").read_bytes()

    with pytest.raises(CommandError) as refused:
        call_command("conch_rotate_secrets_key")

    assert str(home / "secrets.key") in str(refused.value)
    assert (home / "secrets.key").read_bytes() == before


def test_a_process_that_read_the_old_key_file_opens_secrets_sealed_after_a_rotation(home, profile):
    assert AuthProfile.objects.get(pk=profile.pk).secret == API_KEY  # the old keys are read

    secretbox.secrets_key_rotate()

    assert AuthProfile.objects.get(pk=profile.pk).secret == API_KEY


# ---------------------------------------------------------------------------
# CONCH_SECRETS_KEY, for several processes


def test_conch_secrets_key_seals_instead_of_the_file_and_rotates_to_its_first_key(
    home, settings, agent
):
    first, second = Fernet.generate_key(), Fernet.generate_key()
    settings.CONCH_SECRETS_KEYS = (first.decode(),)
    profile = AuthProfile.objects.create(agent=agent, name="main-key", secret=API_KEY)

    assert not (home / "secrets.key").exists()
    assert opens_with(first, stored(AuthProfile, profile.pk)) == API_KEY

    settings.CONCH_SECRETS_KEYS = (second.decode(), first.decode())
    assert AuthProfile.objects.get(pk=profile.pk).secret == API_KEY  # the old key still opens
    call_command("conch_rotate_secrets_key")

    raw = stored(AuthProfile, profile.pk)
    assert opens_with(second, raw) == API_KEY
    with pytest.raises(InvalidToken):
        opens_with(first, raw)
    settings.CONCH_SECRETS_KEYS = (second.decode(),)
    assert AuthProfile.objects.get(pk=profile.pk).secret == API_KEY


def test_an_unreadable_secret_copied_or_pickled_still_saves_back_what_was_stored(
    home, wrong_key, profile
):
    found = AuthProfile.objects.get(pk=profile.pk)
    before = stored(AuthProfile, profile.pk)
    for twin in (copy.deepcopy(found), pickle.loads(pickle.dumps(found))):  # noqa: S301 - ours
        twin.save()
        assert stored(AuthProfile, profile.pk) == before


def test_a_new_secret_the_key_file_cannot_seal_is_a_form_error_naming_it_not_a_500(
    client, owner, agent, home
):
    (home / "secrets.key").write_text("not a key\n")
    client.force_login(owner)

    page = client.post(
        reverse("admin:chats_authprofile_add"),
        {"agent": agent.pk, "name": "new-key", "provider": "openai", "secret": API_KEY},
    )

    assert page.status_code == 200
    assert f"The secrets key file {home / 'secrets.key'} cannot be used" in page.content.decode()
    assert not AuthProfile.objects.filter(name="new-key").exists()
