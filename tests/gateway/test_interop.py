"""Export and import in OpenClaw's layout: sessions.json is the index, one .jsonl per session."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from chats.gateway.maintenance import maintenance_run
from chats.gateway.models import SessionOrigin
from chats.gateway.selectors import gateway_config
from chats.models import Agent, Binding, Conversation, Entry, EntryRole
from chats.runtime import services
from chats.runtime.runner import drain


def _ms(value):
    return int(value.timestamp() * 1000)


def snapshot():
    rows = {}
    for chat in Conversation.objects.select_related("agent").order_by("public_id"):
        origin = SessionOrigin.objects.filter(pk=chat.pk).select_related("previous").first()
        rows[chat.public_id] = {
            "agent": chat.agent.slug,
            "key": chat.session_key,
            "title": chat.title,
            "archived": chat.archived,
            "origin": (chat.origin, chat.origin_channel, chat.taint, chat.mode, chat.folder),
            "times": tuple(
                _ms(t) for t in (chat.session_started_at, chat.last_interaction_at, chat.updated_at)
            ),
            "from": None
            if origin is None
            else (
                origin.chat_type,
                origin.channel,
                origin.account_id,
                origin.peer,
                origin.group_id,
                origin.job_id,
                origin.reply_to,
                origin.rule,
                origin.started_because,
                origin.ended_because,
                origin.previous.public_id if origin.previous else None,
            ),
            "entries": [
                (e.seq, e.role, e.kind, e.text, e.data)
                for e in Entry.objects.filter(conversation=chat).order_by("seq")
            ],
        }
    return rows


@pytest.fixture
def a_lived_in_gateway(owner, personas, receive, workspace):
    """DMs, a group, a cron run, a reset generation, a compacted session and an own chat."""
    Binding.objects.create(agent=personas["work"], channel="slack", account_id="*")
    receive(peer="alice", text="first")
    receive(channel="slack", chat_type="group", group_id="eng", peer="bob", text="standup")
    receive(channel="cron", chat_type="cron", job_id="mail", peer="", message_id="run-1", text="go")
    drain()
    receive(peer="alice", text="/new start over")
    for n in range(12):
        receive(peer="carol", text=f"message {n}")
        drain()
    config = gateway_config()
    config.max_entries = 6
    config.save()
    maintenance_run()
    services.conversation_create(owner=owner, title="My own chat", folder=str(workspace))
    assert Entry.objects.filter(kind="recap").exists()
    assert Conversation.objects.filter(archived=True).exists()


def test_an_export_then_a_fresh_import_gives_back_the_same_sessions_and_entries(
    owner, a_lived_in_gateway, tmp_path
):
    before = snapshot()
    call_command("conch_export", str(tmp_path), stdout=io.StringIO())
    Conversation.objects.all().delete()
    Agent.objects.filter(slug="work").delete()  # import makes a missing persona
    assert not Conversation.objects.exists()

    out = io.StringIO()
    call_command("conch_import", str(tmp_path), "--owner", "owner", stdout=out)
    assert f"imported {len(before)} sessions" in out.getvalue()
    assert snapshot() == before
    assert all(c.owner == owner for c in Conversation.objects.all())


def test_the_index_holds_lifecycle_metadata_and_no_transcript(a_lived_in_gateway, tmp_path):
    call_command("conch_export", str(tmp_path), stdout=io.StringIO())
    folder = tmp_path / "agents" / "main" / "sessions"
    index = json.loads((folder / "sessions.json").read_text())
    live = index["agent:main:dm:telegram:alice"]
    for field in ("sessionId", "sessionKey", "sessionStartedAt", "lastInteractionAt", "updatedAt"):
        assert field in live
    assert isinstance(live["updatedAt"], int)  # epoch milliseconds, as OpenClaw writes them
    raw = (folder / "sessions.json").read_text()
    assert "start over" not in raw and "first" not in raw  # words live in the transcripts
    archived = [k for k in index if k.startswith("agent:main:dm:telegram:alice#")]
    assert len(archived) == 1  # the earlier generation, listed under its own name
    assert live["previousSessionId"] == index[archived[0]]["sessionId"]


def test_each_session_has_one_jsonl_transcript_of_one_object_per_line(a_lived_in_gateway, tmp_path):
    call_command("conch_export", str(tmp_path), stdout=io.StringIO())
    for index_path in tmp_path.glob("agents/*/sessions/sessions.json"):
        index = json.loads(index_path.read_text())
        files = sorted(p.name for p in index_path.parent.glob("*.jsonl"))
        assert files == sorted(f"{v['sessionId']}.jsonl" for v in index.values())
        for item in index.values():
            lines = (index_path.parent / item["sessionFile"]).read_text().splitlines()
            parsed = [json.loads(line) for line in lines]
            assert parsed[0]["type"] == "session" and parsed[0]["id"] == item["sessionId"]
            assert len(parsed) - 1 == item["entries"]
            assert all(isinstance(p, dict) for p in parsed)


def test_importing_twice_skips_what_is_there_and_says_so(owner, a_lived_in_gateway, tmp_path):
    call_command("conch_export", str(tmp_path), stdout=io.StringIO())
    count = Conversation.objects.count()
    err = io.StringIO()
    call_command("conch_import", str(tmp_path), stdout=io.StringIO(), stderr=err)
    assert Conversation.objects.count() == count
    assert "exists already" in err.getvalue()


def test_openclaws_own_transcripts_import(owner, agent, tmp_path):
    folder = tmp_path / "agents" / "main" / "sessions"
    folder.mkdir(parents=True)
    (folder / "sessions.json").write_text(
        json.dumps(
            {
                "agent:main:dm:whatsapp:+1555": {
                    "sessionId": "oc-1",
                    "sessionKey": "agent:main:dm:whatsapp:+1555",
                    "updatedAt": 1_700_000_000_000,
                    "sessionStartedAt": 1_699_000_000_000,
                }
            }
        )
    )
    (folder / "oc-1.jsonl").write_text(
        "\n".join(
            json.dumps(line)
            for line in [
                {"type": "session", "id": "oc-1"},
                {
                    "type": "message",
                    "message": {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                },
                {"type": "message", "message": {"role": "assistant", "content": "hello!"}},
                {"type": "model_change", "model": "x"},
            ]
        )
    )
    call_command("conch_import", str(tmp_path), stdout=io.StringIO())
    chat = Conversation.objects.get(public_id="oc-1")
    assert chat.session_key == "agent:main:dm:whatsapp:+1555"
    assert list(chat.entries.values_list("seq", "role", "text")) == [
        (1, EntryRole.PERSON, "hi"),
        (2, EntryRole.ASSISTANT, "hello!"),
    ]


def test_a_malformed_transcript_stops_the_import_naming_its_file_and_line(owner, agent, tmp_path):
    folder = tmp_path / "agents" / "main" / "sessions"
    folder.mkdir(parents=True)
    (folder / "sessions.json").write_text(
        json.dumps({"k": {"sessionId": "bad-1", "sessionStartedAt": 1}})
    )
    (folder / "bad-1.jsonl").write_text('{"type": "session"}\n{not json\n')
    with pytest.raises(CommandError, match=r"bad-1\.jsonl:2"):
        call_command("conch_import", str(tmp_path), stdout=io.StringIO())
    assert not Conversation.objects.filter(public_id="bad-1").exists()
