"""A binding saved or deleted changes just that binding in the routing index.

In this process the change is applied as it commits; another process, whose index is
older than the stored version, takes in only the bindings changed since (stamped with
the version they were saved at) and the deletions recorded since. The index object
stays, warm: no reload, no message stalled behind one. Anything else that routing
reads (an agent, a link, a reset policy, the settings) loads a fresh index everywhere.
"""

from __future__ import annotations

import pytest

from chats.gateway import routing
from chats.gateway.models import Binding, BindingDeletion, GatewayConfig, ResetPolicy
from tests.gateway.conftest import message

pytestmark = pytest.mark.django_db


@pytest.fixture
def warm(personas):
    """This process's index, every channel indexed, with one binding: bob → work."""
    Binding.objects.create(
        agent=personas["work"], channel="telegram", peer="bob", peer_kind="direct"
    )
    index = routing.route_index()
    index.load_every_channel()
    assert index.resolve(message(peer="bob")).agent.slug == "work"
    return index


def committed(capture, change):
    with capture(execute=True):
        change()


def test_a_binding_added_here_is_routed_by_the_same_index_with_no_query(
    warm, personas, django_capture_on_commit_callbacks, django_assert_num_queries
):
    committed(
        django_capture_on_commit_callbacks,
        lambda: Binding.objects.create(
            agent=personas["home"], channel="telegram", peer="carol", peer_kind="direct"
        ),
    )
    assert routing.route_index() is warm and warm.is_warm("telegram")
    with django_assert_num_queries(0):
        assert warm.resolve(message(peer="carol")).agent.slug == "home"
        assert warm.resolve(message(peer="bob")).agent.slug == "work"


def test_a_binding_changed_here_is_routed_by_its_new_agent(
    warm, personas, django_capture_on_commit_callbacks, django_assert_num_queries
):
    binding = Binding.objects.get(peer="bob")
    binding.agent = personas["home"]
    committed(django_capture_on_commit_callbacks, binding.save)
    assert routing.route_index() is warm
    with django_assert_num_queries(0):
        assert warm.resolve(message(peer="bob")).agent.slug == "home"
    assert warm.count == 1  # changed, not added twice


def test_a_binding_deleted_here_routes_no_more(
    warm, django_capture_on_commit_callbacks, django_assert_num_queries
):
    committed(django_capture_on_commit_callbacks, Binding.objects.get(peer="bob").delete)
    assert routing.route_index() is warm
    with django_assert_num_queries(0):
        assert warm.resolve(message(peer="bob")).agent.slug == "main"
    assert warm.count == 0


def test_another_process_change_is_taken_in_place_from_the_stamps_and_deletions(warm, personas):
    """Another process added dave → home and deleted bob's binding: stamped and recorded
    at the versions it bumped (bulk writes here: no signal in this process)."""
    bob = Binding.objects.get(peer="bob")
    added, deleted = warm.version + 1, warm.version + 2
    Binding.objects.bulk_create(
        [
            Binding(
                agent=personas["home"],
                channel="telegram",
                peer="dave",
                peer_kind="direct",
                routing_version=added,
            )
        ]
    )
    Binding.objects.filter(pk=bob.pk).delete()  # post_delete: but what this process wrote…
    # …is set back to what the other process would have left: its version, its record.
    BindingDeletion.objects.all().delete()
    BindingDeletion.objects.create(binding_id=bob.pk, routing_version=deleted)
    GatewayConfig.objects.filter(pk=1).update(routing_version=deleted)
    routing._cached = warm  # this process's index, behind
    warm.version = added - 1

    assert routing.route_index_catch_up() is warm
    assert warm.version == deleted and warm.is_warm("telegram")
    assert warm.resolve(message(peer="dave")).agent.slug == "home"
    assert warm.resolve(message(peer="bob")).agent.slug == "main"


def test_a_cold_channels_remembered_lookups_are_forgotten_on_a_change(
    personas, django_capture_on_commit_callbacks
):
    index = routing._cached = routing.RouteIndex.load(warm_rows_per_message=0)  # stays cold
    assert not index.is_warm("slack")
    assert index.resolve(message(channel="slack", peer="erin")).agent.slug == "main"  # remembered
    committed(
        django_capture_on_commit_callbacks,
        lambda: Binding.objects.create(
            agent=personas["work"], channel="slack", peer="erin", peer_kind="direct"
        ),
    )
    assert routing.route_index() is index and not index.is_warm("slack")
    assert index.resolve(message(channel="slack", peer="erin")).agent.slug == "work"


def test_a_reset_policy_changed_anywhere_loads_a_fresh_index(
    warm, django_capture_on_commit_callbacks
):
    committed(
        django_capture_on_commit_callbacks,
        lambda: ResetPolicy.objects.create(chat_type="dm", mode="idle", idle_minutes=5),
    )
    stored = GatewayConfig.objects.get(pk=1)
    assert stored.routing_reset_version == stored.routing_version  # older indexes reload
    fresh = routing.route_index_catch_up()
    assert fresh is not warm
    assert fresh.reset_policies().for_session(chat_type="dm", channel="telegram").idle_minutes == 5


def test_deletions_past_the_kept_window_make_older_indexes_load_afresh(
    warm, personas, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(routing, "DELETIONS_KEPT", 1)
    behind = warm.version
    for peer in ("f1", "f2", "f3"):
        binding = Binding.objects.create(
            agent=personas["home"], channel="telegram", peer=peer, peer_kind="direct"
        )
        binding.delete()
    stored = GatewayConfig.objects.get(pk=1)
    assert BindingDeletion.objects.count() == 1  # the rest pruned
    assert stored.routing_reset_version > behind  # so an index this old is loaded afresh
    routing._cached = warm
    warm.version = behind
    assert routing.route_index_catch_up() is not warm
