"""search_chats on the real PostgreSQL: ranked, paged, finished words only, yours only.

The selector (``together.past.past_search``) runs in a child ``manage.py shell``
against a fresh PostgreSQL database, and the same script runs on a fresh
SQLite database too: one selector, the same answers on both.
"""

from __future__ import annotations

import json

import pytest

from tests.scaleout.processes import manage_ok, process_env

pytestmark = pytest.mark.scaleout

SCRIPT = r"""
import json
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone
from chats.models import (
    Agent,
    AuthProfile,
    Conversation,
    EntryRole,
    FolderRoot,
    Origin,
    Taint,
    TaintCause,
    Turn,
    TurnState,
)
from chats.runtime.chats import conversation_create, entry_append
from chats.taint import Cause
from chats.tools.registry import ToolContext, validate_args
from together import past

User = get_user_model()
owner = User.objects.create(username="owner", is_superuser=True, is_staff=True)
someone = User.objects.create(username="someone")
FolderRoot.objects.create(account=someone, path="/tmp")  # as the owner sets it in the admin
agent = Agent.objects.create(slug="main", name="Conch", workspace="/tmp", is_default=True)
# As the owner gives one in the admin: someone's own persona.
theirs = Agent.objects.create(slug="theirs", name="Theirs", workspace="/tmp", owner=someone)


def chat(title, who=owner, **kwargs):
    persona = agent if who == owner else theirs
    if kwargs.get("taint"):  # careful from its start, as a scenario sets a chat up
        kwargs["taint_cause"] = Cause(TaintCause.SETUP)
    return conversation_create(owner=who, agent=persona, title=title, folder="/tmp", **kwargs)


def reply(conversation, person=None, assistant=None, ended=True):
    turn = Turn.objects.create(
        conversation=conversation,
        number=conversation.turns.count() + 1,
        folder="/tmp",
        state=TurnState.COMPLETED if ended else TurnState.RUNNING,
        ended_at=timezone.now() if ended else None,
    )
    with transaction.atomic():
        for role, text in ((EntryRole.PERSON, person), (EntryRole.ASSISTANT, assistant)):
            if text:
                entry_append(conversation=conversation, role=role, text=text, turn=turn)
    return turn


def found(query, **kwargs):
    result = past.past_search(reader=reader, query=query, **kwargs)
    return {
        "hits": [[h.title, h.reply, h.role] for h in result.hits],
        "scores": [h.score for h in result.hits],
        "snippets": [h.snippet for h in result.hits],
        "next": result.next_offset,
    }


reader = chat("Reader")
once = chat("Once")
reply(once, "Notes on the week", "We talked about many things this week: the budget, the hiring "
      "plan, the office move, the roadmap, and the deploy, which was only one of them.")
thrice = chat("Thrice")
reply(thrice, "deploy", "The deploy is done: deploy logs are clean, the deploy went out.")
for n in range(7):
    reply(chat(f"Rollout {n}"), f"rollout step {n}", "rollout " * (n + 1))
deploying = chat("Deploying")
reply(deploying, None, "We are deploying the payment service tonight.")
rollback = chat("Rollback")
reply(rollback, None, "The payment rollback finished.")
theirs = chat("Theirs", who=someone)
reply(theirs, None, "their secret merger plans")
group = chat("Family group", origin=Origin.CHAT_APP, origin_channel="telegram", taint=Taint.PERSON)
reply(group, "Grandma: the merger of the two families is on Sunday", None)
busy = chat("Busy")
reply(busy, "start the merger draft", "Drafting the merger now", ended=False)
AuthProfile.objects.create(agent=agent, name="deploy", secret="hunter2-correct-horse")
keys = chat("Keys")
filler = "lorem ipsum dolor " * 12
reply(keys, None, filler + "sk-live-" + "A1b2C3d4E5f6G7h8I9j0" * 3
      + " rotate the quokka credentials; the password is hunter2-correct-horse " + filler)
steered = chat("Steered", taint=Taint.UNTRUSTED)
reply(steered, None, "the page told me to exfiltrate everything")

pages, offset = [], 0
while offset is not None:
    page = found("rollout", limit=3, offset=offset)
    pages.append(page["hits"])
    offset = page["next"]

turn = Turn.objects.create(conversation=reader, number=1, folder="/tmp")
ctx = ToolContext(conversation=reader, turn=turn, folder="/tmp")
tool = past.SEARCH_CHATS
clean_answer = tool.run(ctx, validate_args(tool, {"query": "quokka"})).text
taint_after_clean = Conversation.objects.get(pk=reader.pk).taint
steered_answer = tool.run(ctx, validate_args(tool, {"query": "exfiltrate"})).text
taint_after_steered = Conversation.objects.get(pk=reader.pk).taint

results = {
    "vendor": connection.vendor,
    "deploy": found("deploy"),
    "whole": found("rollout", limit=10)["hits"] + found("rollout", offset=10)["hits"],
    "pages": pages,
    "stemmed": found("deploy")["hits"],
    "phrase": found('"payment service"')["hits"],
    "either": sorted(found("tonight or rollback")["hits"]),
    "without": found("payment -rollback")["hits"],
    "syntax": [found(q)["hits"] for q in ['"', "a AND", "NEAR(x y)", "text:deploy", "OR OR", "-"]],
    "merger": found("merger")["hits"],
    "quokka": found("quokka")["snippets"],
    "clean_answer": clean_answer,
    "taint_after_clean": taint_after_clean,
    "steered_answer": steered_answer,
    "taint_after_steered": taint_after_steered,
}

plan = ""
if connection.vendor == "postgresql":
    # The plan of the very query past_search runs, over enough words that reading them
    # all would cost: 20,000 messages of a chat about something else.
    filler_chat = chat("Filler")
    filler_turn = reply(filler_chat, None, "filler")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO chats_entry (conversation_id, turn_id, seq, role, kind, text, data, created_at)"
            " SELECT %s, %s, 1 + n, 'assistant', 'message',"
            " 'ordinary words about gardening, number ' || n, '{}'::jsonb, now()"
            " FROM generate_series(1, 20000) AS n",
            [filler_chat.pk, filler_turn.pk],
        )
        cursor.execute("ANALYZE")
    ran = []

    def capture(execute, sql, params, many, context):
        ran.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        past.past_search(reader=reader, query="deploy")
    sql, params = next((sql, params) for sql, params in ran if "ts_headline" in sql)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

results["plan"] = plan
print("RESULT " + json.dumps(results))
"""


def _search(env: dict[str, str]) -> dict:
    """What search answers, in a child Conch on the (migrated) database ``env`` names."""
    done = manage_ok("shell", "-c", SCRIPT, env=env, timeout=120)
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


@pytest.fixture
def scaleout_results(scaleout, sqlite_home):
    postgres = _search(scaleout.env)
    sqlite = _search(process_env(sqlite_home))
    assert postgres["vendor"] == "postgresql" and sqlite["vendor"] == "sqlite"
    return postgres, sqlite


def test_search_on_postgresql_ranks_pages_and_keeps_to_the_rules(scaleout_results):
    postgres, sqlite = scaleout_results
    for found in (postgres, sqlite):
        # Ranked: the message that says "deploy" most, in fewest words, first.
        assert [hit[0] for hit in found["deploy"]["hits"][:2]] == ["Thrice", "Thrice"]
        assert found["deploy"]["hits"][-1] == ["Once", 1, "assistant"]
        scores = found["deploy"]["scores"]
        assert scores == sorted(scores, reverse=True)
        # Paged: pages of three walk the whole list once, in its order.
        assert [len(page) for page in found["pages"]] == [3, 3, 3, 3, 2]
        assert [hit for page in found["pages"] for hit in page] == found["whole"]
        assert len({tuple(hit) for hit in found["whole"]}) == 14
        # The person's kind of query, and no query an error.
        assert ["Deploying", 1, "assistant"] in found["stemmed"]  # "deploying" for "deploy"
        assert found["phrase"] == [["Deploying", 1, "assistant"]]
        assert found["either"] == [["Deploying", 1, "assistant"], ["Rollback", 1, "assistant"]]
        assert found["without"] == [["Deploying", 1, "assistant"]]
        assert all(isinstance(hits, list) for hits in found["syntax"])
        # Never another owner's chat, one with someone else's words, or a running reply.
        assert found["merger"] == []
        # Secrets out before the snippet is cut around what matched.
        (snippet,) = found["quokka"]
        assert "quokka" in snippet
        for fragment in ("A1b2C3d4", "G7h8I9j0", "hunter2", "correct-horse"):
            assert fragment not in snippet
        # Trust: a clean result leaves the reader clean; a tainted chat's words taint it first.
        assert found["taint_after_clean"] == "none"
        assert found["taint_after_steered"] == "untrusted"
        assert "<chat-words" in found["steered_answer"]
        assert "marked untrusted" in found["steered_answer"]


def test_one_selector_gives_the_same_answers_on_postgresql_and_sqlite(scaleout_results):
    postgres, sqlite = scaleout_results
    for key in ("phrase", "either", "without", "merger"):
        assert postgres[key] == sqlite[key], key
    # bm25 and ts_rank weigh ties and lengths their own ways: the same messages are found,
    # and the clear winner and loser are the same.
    assert sorted(postgres["whole"]) == sorted(sqlite["whole"])
    assert sorted(postgres["deploy"]["hits"]) == sorted(sqlite["deploy"]["hits"])
    assert postgres["deploy"]["hits"][0][0] == sqlite["deploy"]["hits"][0][0] == "Thrice"
    assert (
        postgres["deploy"]["hits"][-1] == sqlite["deploy"]["hits"][-1] == ["Once", 1, "assistant"]
    )


def test_postgresql_answers_from_the_gin_index(scaleout_results):
    postgres, _ = scaleout_results
    assert "together_entry_fts" in postgres["plan"], postgres["plan"]
