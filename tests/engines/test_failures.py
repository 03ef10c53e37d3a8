"""Each way a model call fails ends the reply as failed, in words a person can read.

The transcript is never lost, and transient failures are tried again with
backoff (recorded by the ``slept`` fixture; nothing really sleeps).
"""

from __future__ import annotations

import pytest

from chats import events, regions
from chats.engines import openai_compat as oc
from chats.models import EntryRole, Status, Step, TurnState
from chats.runtime.runner import drain
from chats.runtime.turns import message_send
from tests.engines.conftest import MAIN_KEY, use_model
from tests.engines.fake_openai import Cut, Drop, Text, calls, closed_port_url
from tests.engines.fake_openai import Status as HttpStatus
from tests.factories import ChatFactory


def run(chat, text="Fix the typo"):
    turn = message_send(conversation=chat, text=text)
    drain()
    turn.refresh_from_db()
    chat.refresh_from_db()
    return turn


def assert_failed_and_kept(chat, turn, text="Fix the typo"):
    assert turn.state == TurnState.FAILED
    assert chat.status == Status.IDLE
    person = chat.entries.get(role=EntryRole.PERSON)
    assert person.text == text  # the transcript is kept whole
    assert MAIN_KEY not in turn.end_reason


def test_an_unreachable_endpoint_is_tried_again_with_backoff_then_said_plainly(model_agent, slept):
    url = closed_port_url()
    use_model(model_agent, url, retries=2)
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)

    assert_failed_and_kept(chat, turn)
    assert turn.end_reason.startswith(f"Conch couldn't reach the model at {url}")
    assert "refused" in turn.end_reason.lower()
    assert "after 3 tries" in turn.end_reason
    assert slept == [1.0, 2.0]  # exponential backoff, bounded by the retries setting


def test_a_bad_key_fails_at_once_naming_the_auth_profile(model_agent, fake, slept):
    fake.play(HttpStatus(401, f"Incorrect API key provided: {MAIN_KEY}"))
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)

    assert_failed_and_kept(chat, turn)
    assert turn.end_reason == oc.ERR_BAD_KEY.format(
        url=fake.base_url, status=401, profile="main-key", agent="coder"
    )
    assert len(fake.completions) == 1 and slept == []  # a bad key is not tried again


def test_a_key_the_endpoint_wants_but_the_persona_lacks_is_said(model_agent, fake):
    use_model(model_agent, fake.base_url, auth_profile="")
    fake.play(HttpStatus(401, "Missing bearer token"))
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)

    assert_failed_and_kept(chat, turn)
    assert "wants an API key (401)" in turn.end_reason
    assert "sends none" in turn.end_reason


def test_a_rate_limit_is_waited_out_honouring_retry_after(model_agent, fake, slept):
    fake.play(
        HttpStatus(429, "Rate limit reached", headers={"Retry-After": "3"}),
        HttpStatus(429, "Rate limit reached"),
        Text("Done."),
    )
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)

    assert turn.state == TurnState.COMPLETED
    assert chat.entries.filter(role=EntryRole.ASSISTANT).get().text == "Done."
    assert len(fake.completions) == 3
    assert slept == [3.0, 2.0]  # the server's Retry-After, then the doubled backoff
    # Every try sent the same request.
    assert fake.completions[0].body == fake.completions[2].body


@pytest.mark.django_db(transaction=True)
def test_the_page_is_told_how_long_the_model_asked_us_to_wait(model_agent, fake, slept, published):
    fake.play(
        HttpStatus(429, "Rate limit reached", headers={"Retry-After": "4"}),
        HttpStatus(503, "Overloaded"),
        Text("Done."),
    )
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    run(chat)

    waits = [e.data.get("wait") for e in published if e.type == events.REPLY_TEXT]
    assert [w for w in waits if w] == [
        "The model asked us to wait 4 s. Conch tries again then.",
        "The model didn't answer properly. Conch tries again in 2 s.",
    ]
    assert waits[-1] is None  # the words that came next took the wait's place
    shown = regions.render_event(
        owner_id=chat.owner_id,
        event=events.REPLY_TEXT,
        seq=9,
        conversation_id=chat.public_id,
        showing=chat.public_id,
        data={"turn": 1, "text": "", "wait": waits[0]},
    )
    assert '<p class="model-wait" role="status">The model asked us to wait 4 s.' in shown


def test_a_rate_limit_that_lasts_ends_the_reply_after_a_bounded_number_of_tries(
    model_agent, fake, slept
):
    fake.play(*[HttpStatus(429, "Rate limit reached")] * 3)
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)

    assert_failed_and_kept(chat, turn)
    assert turn.end_reason == oc.ERR_RATE_LIMITED.format(url=fake.base_url, tries="3 tries")
    assert len(fake.completions) == 3 and len(slept) == 2
    assert fake.unplayed == 0


def test_an_exhausted_quota_is_not_waited_for(model_agent, fake, slept):
    fake.play(HttpStatus(429, "You exceeded your current quota", error_code="insufficient_quota"))
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)

    assert_failed_and_kept(chat, turn)
    assert "out of quota" in turn.end_reason
    assert slept == []


@pytest.mark.parametrize(
    "hiccup",
    [
        Drop(),
        Cut("Half an ans"),
        HttpStatus(500, "internal error"),
        HttpStatus(503, "overloaded"),
    ],
    ids=["dropped", "cut-mid-answer", "500", "503"],
)
def test_a_transient_failure_is_tried_again_and_the_reply_carries_on(
    model_agent, fake, slept, hiccup
):
    fake.play(hiccup, Text("All done."))
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)

    assert turn.state == TurnState.COMPLETED
    assert list(chat.entries.filter(role=EntryRole.ASSISTANT).values_list("text", flat=True)) == [
        "All done."
    ]
    assert len(fake.completions) == 2 and slept == [1.0]


def test_a_tool_call_with_arguments_that_are_not_json_fails_the_reply(model_agent, fake, workspace):
    (workspace / "a.txt").write_text("a\n")
    fake.play(calls(("edit_file", '{"path": "a.txt", "old": "a", "new": ')))
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)

    assert_failed_and_kept(chat, turn)
    assert turn.end_reason.startswith(
        "The model called edit_file with arguments that aren't a JSON object"
    )
    assert not Step.objects.filter(turn=turn).exists()
    assert (workspace / "a.txt").read_text() == "a\n"


def test_a_tool_call_whose_arguments_are_not_an_object_fails_the_reply(model_agent, fake):
    fake.play(calls(("list_files", '["not", "an", "object"]')))
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)

    assert_failed_and_kept(chat, turn)
    assert "aren't a JSON object" in turn.end_reason


def test_a_call_to_a_tool_the_chat_is_not_offered_fails_the_reply(model_agent, fake, workspace):
    fake.play(calls(("delete_everything", {"path": "/"})))
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)

    assert_failed_and_kept(chat, turn)
    assert turn.end_reason == oc.ERR_UNKNOWN_TOOL.format(tool="'delete_everything'")
    assert not Step.objects.filter(turn=turn).exists()


def test_a_write_tool_in_plan_mode_is_a_tool_the_chat_is_not_offered(model_agent, fake, workspace):
    fake.play(calls(("write_file", {"path": "new.txt", "content": "x"})))
    chat = ChatFactory(agent=model_agent, mode="plan", title="Fix the README")
    turn = run(chat)

    assert_failed_and_kept(chat, turn)
    assert "isn't offered: 'write_file'" in turn.end_reason
    assert not (workspace / "new.txt").exists()


def test_words_before_a_malformed_call_are_kept_and_then_the_reply_fails(model_agent, fake):
    fake.play(calls(("list_files", "{oops"), text="Let me look around."))
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)

    assert turn.state == TurnState.FAILED
    said = chat.entries.filter(role=EntryRole.ASSISTANT).values_list("text", flat=True)
    assert list(said) == ["Let me look around."]


def test_a_transcript_that_cannot_fit_fails_before_anything_is_sent(model_agent, fake):
    use_model(model_agent, fake.base_url, context_tokens=4_000)
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    long_words = "word " * 8_000
    turn = run(chat, text=long_words.strip())

    assert turn.state == TurnState.FAILED
    assert turn.end_reason.startswith("This reply no longer fits the model's context")
    assert "“fake-model” has 4000" in turn.end_reason
    assert fake.completions == []
    assert chat.entries.get(role=EntryRole.PERSON).text == long_words.strip()


def test_a_context_overflow_the_server_reports_is_said_plainly(model_agent, fake, slept):
    fake.play(
        HttpStatus(
            400,
            "This model's maximum context length is 8192 tokens. However, you requested 9000.",
            error_code="context_length_exceeded",
        )
    )
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)

    assert_failed_and_kept(chat, turn)
    assert turn.end_reason.startswith(
        f"The model at {fake.base_url} says this reply no longer fits its context"
    )
    assert "maximum context length is 8192" in turn.end_reason
    assert slept == []


def test_an_unknown_model_names_what_to_check(model_agent, fake):
    fake.play(HttpStatus(404, "model 'fake-model' not found, try pulling it first"))
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)

    assert_failed_and_kept(chat, turn)
    assert "answered 404" in turn.end_reason
    assert "model name “fake-model”" in turn.end_reason


def test_a_persona_with_no_endpoint_set_says_which_settings_are_missing(model_agent):
    model_agent.engine_config = {"model": "x"}
    model_agent.save()
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)

    assert turn.state == TurnState.FAILED
    assert turn.end_reason == oc.ERR_NOT_SET_UP.format(agent="coder", missing="base_url")


def test_an_auth_profile_of_another_persona_is_never_used(model_agent, fake):
    # "other-key" belongs to the other persona: naming it here finds nothing.
    use_model(model_agent, fake.base_url, profile="main-key", auth_profile="other-key")
    chat = ChatFactory(agent=model_agent, title="Fix the README")
    turn = run(chat)

    assert turn.state == TurnState.FAILED
    assert turn.end_reason == oc.ERR_NO_PROFILE.format(agent="coder", profile="other-key")
    assert fake.completions == []
