"""The README's examples do what it says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from chats.gateway.models import OutboxMessage
from chats.gateway.services import gateway_token_rotate
from chats.models import Conversation

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


@pytest.mark.django_db
def test_the_readmes_curl_example_starts_a_reply_that_nothing_fails_to_send(owner, agent):
    body = json.loads(re.search(r"-d '(\{[^']+\})'", README).group(1))
    assert "TOKEN=$(.venv/bin/conch conch_gateway_token --owner owner)" in README
    token = gateway_token_rotate(owner=owner)

    response = Client().post(
        "/gateway/inbound",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )

    assert (response.status_code, response.json()["outcome"]) == (202, "started"), response.content
    assert Conversation.objects.filter(owner=owner, origin_channel=body["channel"]).exists()
    assert not OutboxMessage.objects.exists()  # no chat app to send to, so nothing to fail


def test_every_setting_read_from_the_environment_is_in_the_readmes_table():
    settings_source = (Path(settings.BASE_DIR) / "conch" / "settings.py").read_text()
    names = set(re.findall(r'env\w*\("(CONCH_[A-Z_]+)"', settings_source))
    assert {"CONCH_MODEL_TIMEOUT", "CONCH_TELEGRAM_API_BASE"} <= names
    missing = sorted(name for name in names if f"| `{name}` |" not in README)
    assert missing == []


def test_the_readme_names_commands_as_installed():
    assert "manage.py conch_play" not in README
    assert "conch conch_play" in README
    assert "for inspecting chats" not in README
