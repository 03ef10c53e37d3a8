"""The gateway's doors on the real PostgreSQL: words it can't store get a 400, not a 500.

PostgreSQL's text can't hold NUL (psycopg refuses before the query is sent),
where SQLite stores it. So a NUL that slipped past the doors' checks would be
a 500 on PostgreSQL only, and only a PostgreSQL database can show the check
is there. A child ``manage.py shell`` against a fresh PostgreSQL database
posts through Django's test client: the whole handler, middleware, view,
service and the real database write, without a server to start. What it
skips, Daphne and the ASGI body, doesn't depend on the database and is tested
in ``tests/gateway``. The same script runs on SQLite too: the same answers.
"""

from __future__ import annotations

import json

import pytest

from tests.scaleout.processes import manage_ok, process_env

pytestmark = pytest.mark.scaleout

SCRIPT = r"""
import json
from django.contrib.auth import get_user_model
from django.db import DataError, connection
from django.test import Client
from chats.gateway.models import ChannelAccount, InboundRecord
from chats.gateway.services import channel_account_secret_rotate, gateway_token_rotate
from chats.models import Agent, Conversation

owner = get_user_model().objects.create(username="owner", is_superuser=True)
Agent.objects.create(slug="main", name="Conch", workspace="/tmp", is_default=True)
token = gateway_token_rotate(owner=owner)
bot = ChannelAccount.objects.create(owner=owner, channel="telegram", account_id="bot", secret="t")
secret = channel_account_secret_rotate(account=bot)
# raise_request_exception: a 500 fails this script with its traceback.
client = Client(HTTP_HOST="127.0.0.1", raise_request_exception=True)

try:
    Conversation.objects.filter(title="a\x00b").exists()
    database_refuses_nul = False
except DataError:
    database_refuses_nul = True


def inbound(raw):
    response = client.post(
        "/gateway/inbound", raw, content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    return [response.status_code, response.json().get("field")]


def telegram(raw, account="bot"):
    response = client.post(
        f"/gateway/telegram/{account}", raw, content_type="application/json",
        HTTP_X_TELEGRAM_BOT_API_SECRET_TOKEN=secret,
    )
    return [response.status_code, response.json().get("field")]


def body(n, **fields):
    return json.dumps({
        "channel": "telegram", "chat_type": "dm", "peer": "alice",
        "message_id": str(n), "text": "hello", **fields,
    })


def update(n, text):
    return json.dumps({"update_id": n, "message": {
        "message_id": n, "from": {"id": 42}, "chat": {"id": 42, "type": "private"}, "text": text,
    }})


results = {
    "vendor": connection.vendor,
    "database_refuses_nul": database_refuses_nul,
    "inbound_text_nul": inbound(body(1, text="before\x00after")),
    "inbound_peer_nul": inbound(body(2, peer="al\x00ice")),
    "inbound_role_nul": inbound(body(3, guild_id="g", member_roles=["mod\x00"])),
    "inbound_text_surrogate": inbound(body(4, text="@").replace('"@"', '"\\ud800"')),
    "telegram_text_nul": telegram(update(5, "before\x00after")),
    "telegram_account_nul": telegram(update(6, "hi"), account="bot%00x"),
    "inbound_ok": inbound(body(7, text="hello")),
    "telegram_ok": telegram(update(8, "hi")),
    "records": InboundRecord.objects.exclude(outcome="refused").count(),
    "refused": InboundRecord.objects.filter(outcome="refused").count(),
    "nul_stored": Conversation.objects.filter(entries__text__contains="before").exists(),
}
print("RESULT " + json.dumps(results))
"""


def _doors(env: dict[str, str]) -> dict:
    """What the doors answer, in a child Conch on the (migrated) database ``env`` names."""
    done = manage_ok("shell", "-c", SCRIPT, env=env, timeout=120)
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def test_nul_at_the_doors_is_a_400_naming_the_field_on_postgresql_as_on_sqlite(
    scaleout, sqlite_home
):
    postgres = _doors(scaleout.env)
    sqlite = _doors(process_env(sqlite_home))
    assert (postgres["vendor"], sqlite["vendor"]) == ("postgresql", "sqlite")
    assert postgres["database_refuses_nul"], "PostgreSQL would have failed at the write"

    for found in (postgres, sqlite):
        assert found["inbound_text_nul"] == [400, "text"]
        assert found["inbound_peer_nul"] == [400, "peer"]
        assert found["inbound_role_nul"] == [400, "member_roles"]
        assert found["inbound_text_surrogate"] == [400, "text"]
        # Telegram is answered 200 for an update we refuse (else it resends it for hours);
        # the refusal names the field all the same and is kept in the admin as refused.
        assert found["telegram_text_nul"] == [200, "message.text"]
        assert found["telegram_account_nul"] == [401, None]  # as an unknown account reads
        assert found["inbound_ok"] == [202, None]
        assert found["telegram_ok"] == [202, None]
        assert found["records"] == 2  # only the two good messages were taken in
        assert found["refused"] == 1  # the NUL update, kept as refused
        assert not found["nul_stored"]
    assert {k: v for k, v in postgres.items() if k not in ("vendor", "database_refuses_nul")} == {
        k: v for k, v in sqlite.items() if k not in ("vendor", "database_refuses_nul")
    }
