"""The routing playground's page (seed ch. 8): every answer is the real router's.

The page is read as a person reads it: the session key, the agent and the
ladder's winning rung in "Where it landed", the log, the sessions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from django.test import Client

from chats.gateway.ladder import ERR_CHANNEL, ERR_KIND_NEEDED, ERR_TIE
from chats.gateway.models import Binding, DmScope
from chats.gateway.playground import ERR_AGENT, PALETTE, SESSION_KEY
from chats.gateway.selectors import gateway_config
from chats.limits import LIMITS

pytestmark = pytest.mark.django_db

PAGE = "/gateway/playground/"


@dataclass
class Landed:
    """What "Where it landed" says about the last message fired."""

    key: str
    red: bool
    agent: str
    rule: str
    won: str
    outranked: list[str]


def _section(html: str, region: str) -> str:
    match = re.search(rf'<section id="{region}".*?</section>', html, re.S)
    assert match, f"no #{region} in the page"
    return match.group(0)


def landed(html: str) -> Landed:
    result = _section(html, "pg-result")
    key = re.search(r'<code class="pg-key( is-leak)?">(.*?)</code>', result)
    agent = re.search(r'<dd class="pg-agent">(.*?)</dd>', result, re.S)
    rule = re.search(r'<dd class="pg-won-rule">(.*?)</dd>', result)
    won = re.findall(r'class="rung is-won"[^>]*data-tier="([^"]+)"', result)
    assert key and agent and rule and len(won) == 1, result
    return Landed(
        key=key.group(2),
        red=bool(key.group(1)),
        agent=re.sub(r"<[^>]+>", " ", agent.group(1)).split()[0],
        rule=rule.group(1),
        won=won[0],
        outranked=re.findall(r'class="rung is-outranked"[^>]*data-tier="([^"]+)"', result),
    )


def log_keys(html: str) -> list[tuple[str, bool]]:
    """(key, red) of each logged message, newest first."""
    rows = re.findall(r'<tr id="pg-fired-\d+".*?</tr>', _section(html, "pg-log"), re.S)
    found = []
    for row in rows:
        key = re.search(r'<code class="pg-key( is-leak)?">(.*?)</code>', row)
        found.append((key.group(2), bool(key.group(1))))
    return found


class Playground:
    """The signed-in person's browser, pressing the page's buttons (under HTMX or not)."""

    def __init__(self, client: Client, *, htmx: bool = True) -> None:
        self.client = client
        self.headers = {"HX-Request": "true"} if htmx else {}

    def post(self, path: str, data: dict):
        return self.client.post(f"{PAGE}{path}", data, headers=self.headers)

    def scope(self, value: str):
        return self.post("scope/", {"dm_scope": value})

    def bind(self, agent: str, channel: str, **fields):
        """As the page's form: its peer-kind select sends ``direct`` unless another is picked."""
        fields.setdefault("peer_kind", "direct")
        return self.post("bindings/", {"agent": agent, "channel": channel, **fields})

    def fire(self, message_id: str) -> str:
        response = self.post("fire/", {"message": message_id})
        assert response.status_code == 200, response.content
        return response.content.decode()

    def page(self) -> str:
        response = self.client.get(PAGE)
        assert response.status_code == 200
        return response.content.decode()


@pytest.fixture
def play(owner, agent) -> Playground:
    client = Client()
    client.force_login(owner)
    return Playground(client)


# ---------------------------------------------------------------------------
# The palette: each message resolves as the seed says


SEED_KEYS = {
    # DMs under the default per-channel-peer: one session per person per app.
    "alice-whatsapp": "agent:main:dm:whatsapp:alice",
    "alice-whatsapp-work": "agent:main:dm:whatsapp:alice",
    "alice-telegram": "agent:main:dm:telegram:alice",
    "bob-whatsapp": "agent:main:dm:whatsapp:bob",
    "bob-telegram": "agent:main:dm:telegram:bob",
    "mom-slack": "agent:main:dm:slack:mom",
    # Groups by their group: everyone in the room shares it.
    "carol-standup": "agent:main:group:slack:eng-standup",
    "dave-standup": "agent:main:group:slack:eng-standup",
    "erin-discord": "agent:main:group:discord:general",
    "frank-discord": "agent:main:group:discord:general",
    # A thread: its own session.
    "carol-thread": "agent:main:thread:slack:eng-standup:1712-0042",
    # A cron run: fresh, named for its run.
    "mail-cron": "agent:main:cron:morning-mail:run-1",
    # As the apps send them, read by their own adapters (ids keep their case; a DM's
    # person is lower-cased).
    "slack-im-event": "agent:main:dm:slack:u2147483697",
    "slack-mention-event": "agent:main:group:slack:C123ABC456",
    "slack-thread-event": "agent:main:thread:slack:C123ABC456:1515449522.000016",
    "whatsapp-text-event": "agent:main:dm:whatsapp:972987654321",
    "discord-guild-event": "agent:main:group:discord:1247389570789330984",
    "discord-dm-event": "agent:main:dm:discord:1118295468731793408",
}


def test_the_seed_says_where_every_palette_message_lands():
    assert set(SEED_KEYS) == {message.id for message in PALETTE}


@pytest.mark.parametrize("message_id", SEED_KEYS)
def test_each_palette_message_lands_where_the_seed_says(play, message_id):
    play.scope(DmScope.PER_CHANNEL_PEER)

    shown = landed(play.fire(message_id))

    assert shown.key == SEED_KEYS[message_id]
    assert (shown.agent, shown.won, shown.rule) == ("Conch", "default", "default: → main")
    assert not shown.red


def test_every_cron_run_is_a_fresh_session(play):
    first = landed(play.fire("mail-cron")).key
    second = landed(play.fire("mail-cron")).key

    assert first != second
    assert {first, second} == {
        "agent:main:cron:morning-mail:run-1",
        "agent:main:cron:morning-mail:run-2",
    }


# ---------------------------------------------------------------------------
# The ladder: the most specific rule wins, and the page marks it


def test_a_peer_rule_beats_a_team_rule_and_is_highlighted(play):
    assert play.bind("work", "slack", team_id="family").status_code == 200
    assert play.bind("family", "slack", peer="mom").status_code == 200

    html = play.fire("mom-slack")
    shown = landed(html)

    assert (shown.agent, shown.won) == ("family", "peer")
    assert shown.rule == "peer: slack peer direct:mom → family"
    assert shown.outranked == ["team"]
    assert shown.key == "agent:family:dm:slack:mom"
    bindings = _section(html, "pg-bindings")
    winner = re.findall(
        r'<li id="pg-binding-\d+" class="pg-binding is-winner">.*?</li>', bindings, re.S
    )
    assert len(winner) == 1 and "peer: slack peer direct:mom → family" in winner[0]


LADDER_CASES = [
    # (bindings as (agent, channel, fields), message, agent that wins, tier)
    ([("mods", "discord", {"guild_id": "gamers", "roles": "moderator"}),
      ("guild", "discord", {"guild_id": "gamers"})],
     "erin-discord", "mods", "guild+roles"),
    ([("mods", "discord", {"guild_id": "gamers", "roles": "moderator"}),
      ("guild", "discord", {"guild_id": "gamers"})],
     "frank-discord", "guild", "guild"),
    ([("standup", "slack", {"peer": "eng-standup", "peer_kind": "group"}),
      ("acme", "slack", {"team_id": "acme"})],
     "carol-thread", "standup", "parentPeer"),
    ([("acme", "slack", {"team_id": "acme"}), ("anyslack", "slack", {"account_id": "*"})],
     "dave-standup", "acme", "team"),
    ([("workphone", "whatsapp", {"account_id": "work"}), ("anywa", "whatsapp", {})],
     "alice-whatsapp-work", "workphone", "accountId"),
    ([("workphone", "whatsapp", {"account_id": "work"}), ("anywa", "whatsapp", {"account_id": "*"})],
     "alice-whatsapp", "anywa", "channel"),
    # No account id is the channel's default account (OpenClaw's rule), not any account.
    ([("defaultphone", "whatsapp", {}), ("anywa", "whatsapp", {"account_id": "*"})],
     "alice-whatsapp", "defaultphone", "accountId"),
    ([("defaultphone", "whatsapp", {}), ("anywa", "whatsapp", {"account_id": "*"})],
     "alice-whatsapp-work", "anywa", "channel"),
    # A wildcard peer: anyone of its kind, below an exact peer, above the team.
    ([("anyone", "slack", {"peer": "*", "peer_kind": "direct"}),
      ("family", "slack", {"peer": "mom"}), ("fam", "slack", {"team_id": "family"})],
     "mom-slack", "family", "peer"),
    ([("anyroom", "slack", {"peer": "*", "peer_kind": "group"}), ("acme", "slack", {"team_id": "acme"})],
     "dave-standup", "anyroom", "wildcardPeer"),
    ([("anyone", "slack", {"peer": "*", "peer_kind": "direct"}), ("acme", "slack", {"team_id": "acme"})],
     "dave-standup", "acme", "team"),
    ([("anywa", "whatsapp", {"account_id": "*"})], "alice-telegram", "main", "default"),
]  # fmt: skip


@pytest.mark.parametrize(("bindings", "message_id", "agent_slug", "tier"), LADDER_CASES)
def test_each_tier_beats_the_ones_below_it(play, bindings, message_id, agent_slug, tier):
    for slug, channel, fields in bindings:
        assert play.bind(slug, channel, **fields).status_code == 200

    shown = landed(play.fire(message_id))

    assert (shown.won, shown.key.split(":")[1]) == (tier, agent_slug)


def test_a_thread_gets_its_parents_agent_but_a_session_of_its_own(play):
    play.bind("standup", "slack", peer="eng-standup", peer_kind="group")

    group = landed(play.fire("carol-standup"))
    thread = landed(play.fire("carol-thread"))

    assert group.agent == thread.agent == "standup"
    assert group.key == "agent:standup:group:slack:eng-standup"
    assert thread.key == "agent:standup:thread:slack:eng-standup:1712-0042"
    assert thread.rule == "parentPeer (inherited from peer: slack peer group:eng-standup → standup)"


def test_removing_a_binding_sends_its_messages_down_the_ladder(play):
    play.bind("family", "slack", peer="mom")
    play.fire("mom-slack")
    state = play.client.session[SESSION_KEY]
    binding_id = state["bindings"][0]["id"]

    html = play.post(f"bindings/{binding_id}/remove/", {}).content.decode()

    assert landed(html).won == "default"
    assert "No bindings" in _section(html, "pg-bindings")


def test_a_real_persona_is_named_and_a_new_name_is_a_sandbox_persona(play, personas):
    play.bind("work", "slack", peer="mom")
    real = _section(play.fire("mom-slack"), "pg-result")
    play.post("clear/", {"what": "everything"})
    play.bind("family", "slack", peer="mom")
    sandbox = _section(play.fire("mom-slack"), "pg-result")

    assert "Work" in real and "sandbox persona" not in real
    assert "sandbox persona" in sandbox


# ---------------------------------------------------------------------------
# Ties are refused, by name


def test_a_binding_that_would_tie_is_refused_naming_both(play):
    play.bind("family", "slack", peer="mom")

    response = play.bind("work", "slack", peer="mom")

    assert response.status_code == 400
    html = response.content.decode()
    expected = ERR_TIE.format(
        this="peer: slack peer direct:mom → work",
        other="peer: slack peer direct:mom → family",
        tier="peer",
    )
    assert expected in _unescape(html)
    assert len(play.client.session[SESSION_KEY]["bindings"]) == 1
    # The refused binding's words stay in the form, to change and try again.
    assert 'value="work"' in _section(html, "pg-bindings")


def test_a_tie_is_refused_without_javascript_too(owner, agent):
    client = Client()
    client.force_login(owner)
    plain = Playground(client, htmx=False)
    assert plain.bind("family", "slack", team_id="acme").status_code == 302

    response = plain.bind("work", "slack", team_id="acme")

    assert response.status_code == 400
    assert "<!doctype html>" in response.content.decode()
    assert "team: slack team acme → family" in _unescape(response.content.decode())
    assert "team: slack team acme → work" in _unescape(response.content.decode())


def test_a_malformed_binding_names_its_field(play):
    response = play.bind("work", "slack", roles="moderator")

    assert response.status_code == 400
    html = response.content.decode()
    assert re.search(r'id="pg-b-roles"[^>]*aria-invalid="true"', html)
    assert "Roles belong to a guild" in html


@pytest.mark.parametrize(
    ("agent", "channel", "fields", "field", "words"),
    [
        ("Work Team!", "slack", {}, "agent", ERR_AGENT),
        ("work", "sl ack", {}, "channel", ERR_CHANNEL),
        ("work", "", {}, "channel", ERR_CHANNEL),
        ("work", "slack", {"peer": "x" * 129}, "peer", "is at most 128 characters."),
        ("work", "slack", {"team_id": "a\x00b"}, "team-id", "Null characters are not allowed."),
    ],
)
def test_a_binding_field_the_form_refuses_is_named_and_nothing_is_kept(
    play, agent, channel, fields, field, words
):
    response = play.bind(agent, channel, **fields)

    assert response.status_code == 400
    html = response.content.decode()
    assert re.search(rf'id="pg-b-{field}"[^>]*aria-invalid="true"', html)
    assert words in _unescape(html)
    assert play.client.session[SESSION_KEY]["bindings"] == []


def test_a_bindings_roles_are_typed_as_a_list_and_kept_once_each(play):
    assert play.bind("Mods", " Discord ", guild_id="G", roles="mod, admin,mod,").status_code == 200

    [binding] = play.client.session[SESSION_KEY]["bindings"]
    assert (binding["agent"], binding["channel"], binding["roles"]) == (
        "mods",
        "discord",
        ["admin", "mod"],
    )


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"channel": "slack", "chat_type": "fax", "peer": "carol", "text": "hi"}, "chat-type"),
        ({"channel": "slack", "chat_type": "dm", "peer": "carol", "text": "  "}, "text"),
        ({"channel": "slack", "chat_type": "dm", "peer": "x" * 129, "text": "hi"}, "peer"),
        ({"channel": "slack", "chat_type": "dm", "text": "hi"}, "peer"),
        (
            {
                "channel": "slack",
                "chat_type": "dm",
                "peer": "c",
                "member_roles": "mod",
                "text": "hi",
            },
            "member-roles",
        ),
    ],
)
def test_a_message_of_your_own_is_refused_naming_its_field_and_nothing_is_fired(
    play, fields, field
):
    response = play.post("fire/", fields)

    assert response.status_code == 400
    assert re.search(rf'id="pg-m-{field}"[^>]*aria-invalid="true"', response.content.decode())
    assert play.client.session[SESSION_KEY]["log"] == []


def test_a_message_of_your_own_fires_with_its_roles_and_a_fresh_id(play):
    play.bind("mods", "discord", guild_id="G", roles="mod")
    fields = {
        "channel": "discord",
        "chat_type": "group",
        "peer": "erin",
        "group_id": "general",
        "guild_id": "G",
        "member_roles": "mod, dj",
        "text": "pin it",
        "message_id": "ignored",
    }

    first = landed(play.post("fire/", fields).content.decode())
    play.post("fire/", fields)

    assert first.agent == "mods"
    log = play.client.session[SESSION_KEY]["log"]
    assert [entry["inbound"]["member_roles"] for entry in log] == [["dj", "mod"], ["dj", "mod"]]
    ids = [entry["inbound"]["message_id"] for entry in log]
    assert len(set(ids)) == 2 and all(i.startswith("play-") for i in ids)


# ---------------------------------------------------------------------------
# dmScope: the dial re-keys DMs and leaves groups alone


def test_changing_the_dm_scope_rekeys_the_messages_already_fired(play):
    play.scope(DmScope.PER_CHANNEL_PEER)
    play.fire("alice-whatsapp")
    play.fire("alice-telegram")
    play.fire("carol-standup")

    per_peer = play.scope(DmScope.PER_PEER).content.decode()

    assert log_keys(per_peer) == [
        ("agent:main:group:slack:eng-standup", False),
        ("agent:main:dm:alice", False),
        ("agent:main:dm:alice", False),
    ]
    # Each moved row says where it was when it was fired.
    assert "was <code>agent:main:dm:whatsapp:alice</code>" in per_peer
    assert "was <code>agent:main:dm:telegram:alice</code>" in per_peer

    by_account = play.scope(DmScope.PER_ACCOUNT_CHANNEL_PEER).content.decode()
    assert [key for key, _ in log_keys(by_account)] == [
        "agent:main:group:slack:eng-standup",
        "agent:main:dm:telegram:default:alice",
        "agent:main:dm:whatsapp:default:alice",
    ]


def test_an_unknown_dm_scope_is_refused(play):
    response = play.scope("everyone")

    assert response.status_code == 400
    assert "Choose one of" in response.content.decode()


# ---------------------------------------------------------------------------
# Under shared, the leak is drawn red


def test_under_shared_two_peoples_dms_on_one_key_are_red(play):
    play.scope(DmScope.SHARED)
    alice = landed(play.fire("alice-whatsapp"))
    html = play.fire("bob-telegram")
    bob = landed(html)

    assert alice.key == bob.key == "agent:main:dm:shared"
    assert alice.red and bob.red
    assert log_keys(html) == [("agent:main:dm:shared", True), ("agent:main:dm:shared", True)]
    sessions = _section(html, "pg-sessions")
    assert 'class="pg-folder is-leak"' in sessions and "leak</span>" in sessions
    assert "Leak: Alice, Bob share" in sessions


def test_under_shared_a_group_is_not_red(play):
    play.scope(DmScope.SHARED)

    shown = landed(play.fire("carol-standup"))

    assert shown.key == "agent:main:group:slack:eng-standup" and not shown.red


def test_one_person_alone_in_the_shared_session_is_red_but_no_leak_yet(play):
    play.scope(DmScope.SHARED)

    html = play.fire("alice-whatsapp")

    assert landed(html).red
    assert "Leak:" not in _section(html, "pg-sessions")


def test_leaving_shared_makes_the_keys_plain_again(play):
    play.scope(DmScope.SHARED)
    play.fire("alice-whatsapp")
    play.fire("bob-whatsapp")

    html = play.scope(DmScope.PER_CHANNEL_PEER).content.decode()

    assert log_keys(html) == [
        ("agent:main:dm:whatsapp:bob", False),
        ("agent:main:dm:whatsapp:alice", False),
    ]


# ---------------------------------------------------------------------------
# A sandbox, bounded, escaped


def test_the_playground_never_touches_the_gateways_bindings_or_settings(play):
    play.bind("family", "slack", peer="mom")
    play.scope(DmScope.SHARED)
    play.fire("mom-slack")

    assert Binding.objects.count() == 0
    assert gateway_config().dm_scope == DmScope.PER_CHANNEL_PEER


def test_a_fresh_playground_starts_at_the_gateways_dm_scope(play):
    config = gateway_config()
    config.dm_scope = DmScope.PER_PEER
    config.save()

    html = play.page()

    assert re.search(r'value="per-peer"[^>]*aria-pressed="true"', html)


def test_the_log_keeps_the_latest_messages_only(play):
    for _ in range(LIMITS.playground_log_messages + 5):
        play.fire("bob-whatsapp")

    state = play.client.session[SESSION_KEY]

    assert len(state["log"]) == LIMITS.playground_log_messages
    assert state["log"][-1]["n"] == LIMITS.playground_log_messages + 5


def test_a_playground_the_session_cannot_read_starts_afresh(play):
    session = play.client.session
    session[SESSION_KEY] = {"dm_scope": "nonsense", "bindings": "x"}
    session.save()

    assert "Nothing fired yet" in play.page()


def test_a_message_of_your_own_is_checked_by_the_gateways_parser(play):
    response = play.post(
        "fire/", {"channel": "slack", "chat_type": "group", "peer": "carol", "text": "hi"}
    )

    assert response.status_code == 400
    assert re.search(r'id="pg-m-group-id"[^>]*aria-invalid="true"', response.content.decode())

    fired = play.post(
        "fire/",
        {
            "channel": "slack",
            "chat_type": "group",
            "peer": "carol",
            "group_id": "ops",
            "text": "hi",
        },
    )
    assert landed(fired.content.decode()).key == "agent:main:group:slack:ops"


def test_words_from_anywhere_are_escaped(play):
    hostile = '<img src=x onerror="alert(1)">'
    play.post("fire/", {"channel": "slack", "chat_type": "dm", "peer": hostile, "text": hostile})
    play.bind("work", "slack", peer=hostile)

    html = play.page()

    assert "<img" not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html


# ---------------------------------------------------------------------------
# The door: signed in, CSRF on every POST, works without JavaScript


@pytest.mark.parametrize(
    ("method", "path"),
    [("get", ""), ("post", "scope/"), ("post", "bindings/"), ("post", "fire/"), ("post", "clear/")],
)
def test_the_playground_needs_the_sign_in(db, method, path):
    response = getattr(Client(), method)(f"{PAGE}{path}", {"message": "alice-whatsapp"})

    assert response.status_code == 302
    assert response["Location"].startswith("/signin/?next=")


def test_a_post_without_the_csrf_token_is_refused(owner, agent):
    client = Client(enforce_csrf_checks=True, headers={"Origin": "http://testserver"})
    client.force_login(owner)

    response = client.post(
        f"{PAGE}fire/", {"message": "alice-whatsapp"}, headers={"HX-Request": "true"}
    )

    assert response.status_code == 403
    assert SESSION_KEY not in client.session


def test_a_post_with_the_token_from_hx_headers_is_accepted(owner, agent):
    client = Client(enforce_csrf_checks=True, headers={"Origin": "http://testserver"})
    client.force_login(owner)
    page = client.get(PAGE).content.decode()
    token = re.search(r"hx-headers='\{\"X-CSRFToken\": \"(\w+)\"\}'", page).group(1)

    response = client.post(
        f"{PAGE}fire/",
        {"message": "alice-whatsapp"},
        headers={"HX-Request": "true", "X-CSRFToken": token},
    )

    assert response.status_code == 200
    assert landed(response.content.decode()).key == "agent:main:dm:whatsapp:alice"


def test_every_form_carries_its_token_for_plain_posts(owner, agent):
    client = Client(enforce_csrf_checks=True, headers={"Origin": "http://testserver"})
    client.force_login(owner)
    page = client.get(PAGE).content.decode()

    forms = re.findall(r"<form [^>]*method=\"post\".*?</form>", page, re.S)

    assert len(forms) >= 5
    assert all('name="csrfmiddlewaretoken"' in form for form in forms)
    token = re.search(r'name="csrfmiddlewaretoken" value="(\w+)"', page).group(1)
    response = client.post(
        f"{PAGE}fire/", {"message": "bob-telegram", "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302 and response["Location"] == PAGE
    assert landed(client.get(PAGE).content.decode()).key == "agent:main:dm:telegram:bob"


def test_under_htmx_a_post_answers_with_the_regions_out_of_band(play):
    html = play.fire("alice-whatsapp")

    for region in ("pg-scope", "pg-bindings", "pg-palette", "pg-result", "pg-sessions", "pg-log"):
        assert re.search(rf'<section id="{region}"[^>]*hx-swap-oob="true"', html), region
    assert "<!doctype html>" not in html


def _unescape(html: str) -> str:
    import html as html_module

    return html_module.unescape(html)


def test_the_workspace_sidebar_links_to_the_playground(owner, agent):
    client = Client()
    client.force_login(owner)

    page = client.get("/").content.decode()

    assert f'<a href="{PAGE}">Routing playground</a>' in page


def test_a_tie_is_refused_saying_why_not_settled_by_order(play):
    """OpenClaw lets config order pick between two same-tier rules; Conch refuses, and says so."""
    play.bind("family", "slack", peer="*", peer_kind="direct")
    html = _unescape(play.bind("work", "slack", peer="*", peer_kind="direct").content.decode())
    assert "would tie" in html and "the order they were added in" in html
    # a different kind is a different set of messages: no tie
    assert play.bind("work", "slack", peer="*", peer_kind="group").status_code == 200


def test_a_peer_without_its_kind_is_refused_naming_the_kind(play):
    response = play.bind("work", "slack", peer="mom", peer_kind="")
    assert response.status_code == 400
    assert ERR_KIND_NEEDED in _unescape(response.content.decode())
    assert play.client.session[SESSION_KEY]["bindings"] == []
