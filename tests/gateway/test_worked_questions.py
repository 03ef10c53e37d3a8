"""The seed's worked questions, one row each: the question, and the behaviour that answers it."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.utils import timezone

from chats.gateway.ladder import Tier
from chats.gateway.maintenance import maintenance_run
from chats.gateway.models import Binding, DmScope
from chats.gateway.routing import resolve_route
from chats.gateway.selectors import auth_profile_for, gateway_config
from chats.models import AuthProfile, Conversation, Entry, Lane, Turn
from chats.runtime.runner import drain
from chats.runtime.turns import task_start
from tests.gateway.conftest import message


def set_scope(scope):
    config = gateway_config()
    config.dm_scope = scope
    config.save()


def one_shared_transcript_leaks(env):
    """Ch. 0: why not one shared transcript? Because one person's words reach another."""
    set_scope(DmScope.SHARED)
    alice = env.receive(peer="alice", text="remember my PIN is 4471")
    bob = env.receive(peer="bob", text="what was that number?")
    assert alice.chat == bob.chat and bob.shared_dm  # the leak, and its flag
    set_scope(DmScope.PER_CHANNEL_PEER)
    carol = env.receive(peer="carol", text="a secret")
    dave = env.receive(peer="dave", text="anything?")
    assert carol.chat != dave.chat and not dave.shared_dm


def a_cron_run_is_a_fresh_session(env):
    """Ch. 1: a morning job: each run gets a fresh session, nothing inherited."""
    cron = dict(channel="cron", chat_type="cron", job_id="mail", peer="")
    monday = env.receive(**cron, message_id="mon", text="summarize my mail")
    drain()
    tuesday = env.receive(**cron, message_id="tue", text="summarize my mail")
    assert monday.chat != tuesday.chat
    tuesday_chat = Conversation.objects.get(public_id=tuesday.chat)
    assert tuesday_chat.entries.count() == 1  # only its own run's words


def dm_scope_leaves_a_group_alone(env):
    """Ch. 2: per-channel-peer and a busy Slack group: the group still shares one session."""
    for scope in DmScope.values:
        set_scope(scope)
        group = dict(channel="slack", chat_type="group", group_id="eng")
        keys = {env.receive(**group, peer=p, text="standup").session_key for p in ("a", "b", "c")}
        assert keys == {"agent:main:group:slack:eng"}


def the_index_is_apart_from_the_transcripts(env):
    """Ch. 3: sessions.json is the cheap index; each .jsonl is one session's transcript."""
    env.receive(peer="alice", text="the words themselves")
    drain()
    call_command("conch_export", str(env.tmp_path), stdout=io.StringIO())
    folder = env.tmp_path / "agents" / "main" / "sessions"
    index = json.loads((folder / "sessions.json").read_text())
    assert "the words themselves" not in json.dumps(index)
    [item] = index.values()
    transcript = (folder / item["sessionFile"]).read_text()
    assert "the words themselves" in transcript
    assert all(json.loads(line) for line in transcript.splitlines())


def an_active_oversized_session_is_compacted_not_pruned(env):
    """Ch. 4: past maxEntries but active: compacted into a recap, never pruned."""
    result = env.receive(peer="talker", text="hello")
    drain()
    chat = Conversation.objects.get(public_id=result.chat)
    Entry.objects.bulk_create(
        Entry(conversation=chat, seq=n, role="person", text=f"m{n}") for n in range(3, 603)
    )
    maintenance_run(now=timezone.now())
    assert Conversation.objects.filter(pk=chat.pk).exists()
    assert chat.entries.count() == 500
    assert chat.entries.order_by("seq").first().kind == "recap"


def personas_are_separate_not_two_prompts(env):
    """Ch. 5: each persona has its own workspace, auth profiles and session store."""
    Binding.objects.create(agent=env.personas["work"], channel="telegram", account_id="w")
    AuthProfile.objects.create(agent=env.personas["work"], name="key", secret="sk-work-0000")
    AuthProfile.objects.create(agent=env.personas["main"], name="key", secret="sk-main-1111")
    work = Conversation.objects.get(public_id=env.receive(account_id="w", text="x").chat)
    main = Conversation.objects.get(public_id=env.receive(account_id="m", text="x").chat)
    assert work.folder != main.folder
    assert work.session_key.startswith("agent:work:") and main.session_key.startswith("agent:main:")
    assert auth_profile_for(conversation=work, name="key").secret == "sk-work-0000"
    assert auth_profile_for(conversation=main, name="key").secret == "sk-main-1111"


def a_peer_rule_beats_a_team_rule(env):
    """Ch. 6: a peer binding and a team binding both match: the peer one wins, whatever the order."""
    Binding.objects.create(
        agent=env.personas["work"], channel="slack", peer="mom", peer_kind="direct"
    )
    Binding.objects.create(agent=env.personas["home"], channel="slack", team_id="family")
    route = resolve_route(message(channel="slack", peer="mom", team_id="family"))
    assert (route.agent.slug, route.rule.tier) == ("work", Tier.PEER)


def a_subagent_runs_on_its_own_lane(env):
    """Ch. 7: a subagent's crawl runs on the subagent lane; the chat carries on meanwhile."""
    chat = Conversation.objects.get(public_id=env.receive(peer="alice", text="hi").chat)
    drain()
    task = task_start(parent=chat, title="Crawl the docs")
    assert Turn.objects.get(conversation=task.chat).lane == Lane.SUBAGENT
    quick = env.receive(peer="alice", text="are you there?")
    assert quick.outcome == "started"  # not queued behind the crawl
    assert Turn.objects.filter(conversation=chat).latest("number").lane == Lane.FOREGROUND


def routing_answers_both_questions(env):
    """Ch. 8: every inbound gets a session (its key) and an agent, with the rule that won."""
    Binding.objects.create(
        agent=env.personas["home"], channel="whatsapp", peer="+1555", peer_kind="direct"
    )
    route = resolve_route(message(channel="whatsapp", peer="+1555"))
    assert route.session_key == "agent:home:dm:whatsapp:+1555"
    assert route.agent.slug == "home"
    assert route.rule.tier == Tier.PEER and "+1555" in route.rule.label


ROWS = [
    one_shared_transcript_leaks,
    a_cron_run_is_a_fresh_session,
    dm_scope_leaves_a_group_alone,
    the_index_is_apart_from_the_transcripts,
    an_active_oversized_session_is_compacted_not_pruned,
    personas_are_separate_not_two_prompts,
    a_peer_rule_beats_a_team_rule,
    a_subagent_runs_on_its_own_lane,
    routing_answers_both_questions,
]


class Env:
    def __init__(self, receive, personas, tmp_path):
        self.receive, self.personas, self.tmp_path = receive, personas, tmp_path


@pytest.mark.parametrize("row", ROWS, ids=[row.__name__ for row in ROWS])
def test_the_seeds_worked_question(row, receive, personas, tmp_path):
    row(Env(receive, personas, tmp_path))
