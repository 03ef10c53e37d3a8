"""A bulk prune tells every watcher and every page about every chat it deleted.

Maintenance numbers the ``conversation.deleted`` events of a batch in one
write and sends them in one hop (``events.publish_many``), so pruning
thousands of sessions is quick; these tests prove nobody hears less for it.
"""

from __future__ import annotations

import datetime as dt

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.utils import timezone

from chats import events
from chats.gateway.maintenance import maintenance_run
from tests.factories import ConversationFactory, UserFactory

NOW = timezone.now()

pytestmark = pytest.mark.django_db


def old_session(owner, agent, key):
    return ConversationFactory(
        owner=owner,
        agent=agent,
        session_key=f"agent:{agent.slug}:{key}",
        last_interaction_at=NOW - dt.timedelta(days=40),
    )


def test_a_bulk_prune_tells_the_watchers_of_every_chat_numbered_without_gaps(
    owner, agent, published, django_capture_on_commit_callbacks
):
    before = events.current_seq(owner.pk)
    chats = [old_session(owner, agent, f"dm:telegram:p{n}") for n in range(7)]

    with django_capture_on_commit_callbacks(execute=True):
        report = maintenance_run(now=NOW, batch=3)  # three batches: 3, 3 and 1

    deleted = [e for e in published if e.type == events.CONVERSATION_DELETED]
    assert report.pruned == 7
    assert sorted(e.conversation_id for e in deleted) == sorted(c.public_id for c in chats)
    seqs = [e.seq for e in deleted]
    assert seqs == list(range(before + 1, before + 8))  # in order, none skipped or repeated
    assert events.current_seq(owner.pk) == seqs[-1]


def test_each_owners_pruned_chats_go_to_that_owners_stream_only(
    owner, agent, published, django_capture_on_commit_callbacks
):
    other = UserFactory(username="someone-else")
    mine = [old_session(owner, agent, f"dm:telegram:mine{n}") for n in range(2)]
    theirs = [old_session(other, agent, f"dm:telegram:theirs{n}") for n in range(3)]

    with django_capture_on_commit_callbacks(execute=True):
        maintenance_run(now=NOW)

    deleted = [e for e in published if e.type == events.CONVERSATION_DELETED]
    by_owner = {
        who.pk: sorted(e.conversation_id for e in deleted if e.owner_id == who.pk)
        for who in (owner, other)
    }
    assert by_owner == {
        owner.pk: sorted(c.public_id for c in mine),
        other.pk: sorted(c.public_id for c in theirs),
    }
    assert [e.seq for e in deleted if e.owner_id == other.pk] == [1, 2, 3]


def test_the_pages_get_one_deleted_event_per_pruned_chat_in_order(
    owner, agent, settings, django_capture_on_commit_callbacks
):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(events.owner_group(owner.pk), channel)
    chats = [old_session(owner, agent, f"dm:telegram:p{n}") for n in range(4)]

    with django_capture_on_commit_callbacks(execute=True):
        maintenance_run(now=NOW)

    received = [async_to_sync(layer.receive)(channel) for _ in chats]
    assert [m["event"] for m in received] == [events.CONVERSATION_DELETED] * 4
    assert sorted(m["conversation_id"] for m in received) == sorted(c.public_id for c in chats)
    seqs = [m["seq"] for m in received]
    assert seqs == sorted(seqs) and seqs[-1] - seqs[0] == 3
