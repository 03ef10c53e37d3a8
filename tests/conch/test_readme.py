"""The README is a page for the person choosing Conch, and the examples it and the docs
give do what they say. (Its two commands are checked against the lock and CI in
tests/conch/test_lock.py and tests/conch/test_cli.py; the docs' links, paths, commands
and variables in tests/conch/test_docs.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.test import Client

from chats.gateway.models import OutboxMessage
from chats.gateway.services import gateway_token_rotate
from chats.models import Conversation

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"
WEBHOOK = (DOCS / "guides" / "chat-apps" / "webhook.md").read_text()


def test_the_readme_is_at_most_150_lines_with_one_screenshot_that_exists():
    assert len(README.splitlines()) <= 150
    shots = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", README)
    assert len(shots) == 1
    assert (REPO / shots[0]).is_file()


@pytest.mark.django_db
def test_the_gateway_doors_curl_example_starts_a_reply_that_nothing_fails_to_send(owner, agent):
    body = json.loads(re.search(r"-d '(\{[^']+\})'", WEBHOOK).group(1))
    assert "TOKEN=$(.venv/bin/conch conch_gateway_token --owner owner)" in WEBHOOK
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


def test_the_readme_and_the_docs_name_commands_as_installed():
    pages = [README, *(page.read_text() for page in DOCS.rglob("*.md"))]
    assert not any("manage.py conch_play" in page for page in pages)
    assert any("conch conch_play" in page for page in pages)
    assert not any("for inspecting chats" in page for page in pages)
