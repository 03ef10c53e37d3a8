"""The trust timeline's record at the gateway's doors: someone else's words at
POST /gateway/inbound, the next generation of their session, a routine's result
delivered to a chat, and an archive's sessions imported.

Each is made to happen as it does for the person, and its record checked field by field.
"""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import call_command

from chats.gateway.models import DmScope, OwnerIdentity, ResetMode, ResetPolicy, RoutineDelivery
from chats.gateway.routines import routine_run_now
from chats.gateway.selectors import gateway_config
from chats.models import Conversation, Taint, TaintCause, TaintRise
from chats.runtime.runner import drain
from tests.factories import ChatFactory, RoutineFactory
from tests.gateway.test_inbound import body, post
from tests.rises import rises, shape

UTC = dt.UTC


def test_a_strangers_dm_at_the_inbound_door_makes_a_careful_chat_that_says_who(
    client, owner, agent, gateway_token
):
    answer = post(client, body(peer="alice", message_id="m-7", text="hi"), token=gateway_token)
    assert answer.status_code == 202
    chat = Conversation.objects.get(public_id=answer.json()["chat"])

    (rise,) = rises(chat)
    assert shape(rise) == {
        "before": Taint.NONE,
        "after": Taint.PERSON,
        "cause": TaintCause.STRANGER,
        "url": "",
        "path": "",
        "source": None,
        "source_taint": "",
        "source_rise": None,
        "turn": None,
        "step": None,
        "detail": {"channel": "telegram", "sender": "alice", "message": "m-7"},
    }


def test_a_group_at_the_inbound_door_is_someone_elses_words_even_from_the_owner(
    client, owner, agent, gateway_token
):
    OwnerIdentity.objects.create(owner=owner, channel="telegram", peer="me")
    answer = post(
        client,
        body(peer="me", chat_type="group", group_id="family", message_id="g-1"),
        token=gateway_token,
    ).json()
    (rise,) = rises(Conversation.objects.get(public_id=answer["chat"]))
    assert (rise.cause, rise.after, rise.detail) == (
        TaintCause.STRANGER,
        Taint.PERSON,
        {"channel": "telegram", "sender": "me", "message": "g-1"},
    )


def test_the_owners_own_dm_has_no_timeline(client, owner, agent, gateway_token):
    OwnerIdentity.objects.create(owner=owner, channel="telegram", peer="me")
    post(client, body(peer="me"), token=gateway_token)
    assert not TaintRise.objects.exists()


def test_a_stranger_joining_a_shared_dm_raises_the_owners_chat_and_says_who(
    client, owner, agent, gateway_token
):
    config = gateway_config()
    config.dm_scope = DmScope.SHARED
    config.save()
    OwnerIdentity.objects.create(owner=owner, channel="telegram", peer="me")
    mine = post(client, body(peer="me", message_id="1"), token=gateway_token).json()
    chat = Conversation.objects.get(public_id=mine["chat"])
    assert rises(chat) == []
    post(client, body(peer="bob", message_id="2"), token=gateway_token)

    (rise,) = rises(chat)
    assert shape(rise) == {
        "before": Taint.NONE,
        "after": Taint.PERSON,
        "cause": TaintCause.STRANGER,
        "url": "",
        "path": "",
        "source": None,
        "source_taint": "",
        "source_rise": None,
        "turn": None,
        "step": None,
        "detail": {"channel": "telegram", "sender": "bob", "message": "2"},
    }


def test_the_next_generation_of_a_strangers_session_names_the_one_before(
    receive, owner, agent, django_capture_on_commit_callbacks
):
    ResetPolicy.objects.create(mode=ResetMode.IDLE, idle_minutes=1)
    old = Conversation.objects.get(public_id=receive(peer="mallory", text="long job").chat)
    (old_rise,) = rises(old)
    later = dt.datetime.now(UTC) + dt.timedelta(minutes=5)
    assert receive(peer="mallory", text="still there?", now=later).outcome == "reset_pending"
    with django_capture_on_commit_callbacks(execute=True):
        drain()  # the reply ends; the reset that waited for it opens the next generation
    new = Conversation.objects.get(session_key=old.session_key, archived=False)

    (rise,) = rises(new)
    assert shape(rise) == {
        "before": Taint.NONE,
        "after": Taint.PERSON,
        "cause": TaintCause.PREVIOUS,
        "url": "",
        "path": "",
        "source": old.pk,
        "source_taint": Taint.PERSON,
        "source_rise": old_rise.pk,
        "turn": None,
        "step": None,
        "detail": {},
    }
    assert old_rise.cause == TaintCause.STRANGER and old_rise.detail["sender"] == "mallory"


@pytest.fixture
def site(outside_site):
    outside_site.page("/alerts", "<html><body><p>Two alerts overnight.</p></body></html>")
    return outside_site


@pytest.mark.django_db(transaction=True)
def test_a_routines_result_from_a_run_that_read_a_page_raises_the_chat_it_goes_to(
    owner, agent, site
):
    target = ChatFactory(owner=owner, title="Morning desk")
    routine = RoutineFactory(
        owner=owner,
        name="Alerts",
        deliver=RoutineDelivery.CHAT,
        target_chat=target,
        now=dt.datetime(2025, 5, 1, tzinfo=UTC),
    )
    run = routine_run_now(routine=routine, now=dt.datetime(2025, 5, 1, 9, tzinfo=UTC))
    url = site.url("/alerts")
    # This run's model reads the alerts page, then says what it found.
    Conversation.objects.filter(pk=run.conversation_id).update(
        script=[[{"tool": "fetch_page", "args": {"url": url}}, {"say": "Two alerts overnight."}]]
    )
    drain()

    (run_rise,) = rises(run.conversation)
    (rise,) = rises(target)
    assert shape(rise) == {
        "before": Taint.NONE,
        "after": Taint.UNTRUSTED,
        "cause": TaintCause.ROUTINE,
        "url": "",
        "path": "",
        "source": run.conversation_id,
        "source_taint": Taint.UNTRUSTED,
        "source_rise": run_rise.pk,
        "turn": None,
        "step": None,
        "detail": {"routine": routine.public_id, "name": "Alerts"},
    }
    assert (run_rise.cause, run_rise.url) == (TaintCause.PAGE, url)


@pytest.mark.django_db(transaction=True)
def test_a_routines_result_from_a_run_that_read_nothing_outside_raises_nothing(owner, agent):
    target = ChatFactory(owner=owner, title="Morning desk")
    routine = RoutineFactory(
        owner=owner,
        deliver=RoutineDelivery.CHAT,
        target_chat=target,
        now=dt.datetime(2025, 5, 1, tzinfo=UTC),
    )
    routine_run_now(routine=routine, now=dt.datetime(2025, 5, 1, 9, tzinfo=UTC))
    drain()
    assert target.entries.exists()  # the result came
    assert not TaintRise.objects.exists()


def archive(root, **fields):
    """An archive of one session, ``imp-1``, with one message."""
    folder = root / "archive" / "agents" / "main" / "sessions"
    folder.mkdir(parents=True)
    item = {"sessionId": "imp-1", "sessionStartedAt": 1_700_000_000_000} | fields
    (folder / "sessions.json").write_text(json.dumps({"conch:imp-1": item}))
    line = {"type": "message", "message": {"role": "user", "content": "words"}}
    (folder / "imp-1.jsonl").write_text(json.dumps(line) + "\n")
    return root / "archive"


@pytest.mark.parametrize(
    ("claimed", "after"),
    [("none", Taint.UNTRUSTED), ("untrusted", Taint.UNTRUSTED), ("person", Taint.PERSON)],
)
def test_an_imported_chat_is_written_down_as_careful_because_of_the_import(
    owner, agent, workspace, tmp_path, claimed, after
):
    path = archive(tmp_path, folder=str(workspace), taint=claimed)
    call_command("conch_import", str(path), "--yes", stdout=io.StringIO(), stdin=io.StringIO())
    chat = Conversation.objects.get(public_id="imp-1")

    (rise,) = rises(chat)
    assert shape(rise) == {
        "before": Taint.NONE,
        "after": after,
        "cause": TaintCause.IMPORT,
        "url": "",
        "path": "",
        "source": None,
        "source_taint": "",
        "source_rise": None,
        "turn": None,
        "step": None,
        "detail": {
            "archive": str(path / "agents" / "main" / "sessions" / "sessions.json"),
            "claimed": claimed,
            "claims": [],
        },
    }
