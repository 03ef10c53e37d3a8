"""Make the screenshots in docs/screenshots/ (the README's, and docs/tour.md's): the chat list (with a held badge) and a chat page
(a Markdown reply with code), light and dark; a chat in Ask mode showing the diff
it asks to make and its three answers; a chat page with ADR 0134's cards (a look at
the other chats, a held message); and, on a phone, a request and the list's drawer.

    .venv/bin/python -m tests.browser.screenshots [--out docs/screenshots]

It builds a small, believable workspace in a throwaway CONCH_HOME (with a
throwaway HOME, so folders read ``~/src/shop``), plays some scripted
replies, leaves a few chats mid-work, serves it with Daphne, and photographs
it in headless Chromium. Nothing touches your own Conch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"


def build_workspace(home: Path) -> tuple[str, str, str, str]:
    """Chats in every state. Returns a sign-in token, the chat page to photograph,
    the chat whose page shows ADR 0134's cards, and the chat asking for an OK."""
    from django.core.management import call_command
    from django.utils import timezone

    from chats.models import Agent, Inbound, Mode, Origin, Status, Step, Turn, TurnState
    from chats.runtime.chats import conversation_create
    from chats.runtime.runner import drain
    from chats.runtime.turns import conversation_stop, message_send
    from chats.signin import owner_ensure, signin_link_create
    from together.messages import message_chat
    from together.models import ChatMessage, MessageState

    call_command("migrate", interactive=False, verbosity=0)
    owner = owner_ensure()
    shop = home / "src" / "shop"
    docs = home / "src" / "shop-docs"
    deploy = home / "ops" / "deploy"
    for folder in (shop / "checkout", shop / "tests", docs, deploy):
        folder.mkdir(parents=True, exist_ok=True)
    (shop / "checkout" / "totals.py").write_text(
        "def total(items):\n    return round(sum(i.price * i.qty for i in items))\n"
    )
    (docs / "CHANGES.md").write_text("# Changes\n")
    (deploy / "staging.env").write_text("VERSION=2.3.1\nREPLICAS=2\nHEALTH_TIMEOUT=30\n")
    agent = Agent.objects.create(
        slug="main", name="Conch", workspace=str(shop), is_default=True, engine="scripted"
    )

    def chat(title, folder, script=(), **kwargs):
        return conversation_create(
            owner=owner, title=title, folder=str(folder), agent=agent, script=list(script), **kwargs
        )

    nightly = chat("Nightly dependency check", deploy, origin=Origin.ROUTINE)
    message_send(conversation=nightly, text="Check for outdated packages.")
    conversation_stop(conversation=nightly, by="person")

    ann = chat(
        "Answer Ann about the refund",
        docs,
        [[{"say": "Replied to Ann: the refund went out this morning."}]],
        origin=Origin.CHAT_APP,
        origin_channel="telegram",
    )
    message_send(conversation=ann, text="Ann asks when her refund arrives.")
    drain()

    watch = chat(
        "Roll out 2.4 to staging",
        deploy,
        [
            [
                {"tool": "list_files", "args": {}},
                {
                    "tool": "edit_file",
                    "args": {"path": "staging.env", "old": "VERSION=2.3.1", "new": "VERSION=2.4.0"},
                },
                {"tool": "run_command", "args": {"command": "./deploy.sh staging"}},
            ]
        ],
        mode=Mode.ASK,
    )
    message_send(conversation=watch, text="Deploy 2.4 to staging and watch it.")
    drain()

    fix = chat(
        "Fix the checkout rounding bug",
        shop,
        [
            [
                {"tool": "read_file", "args": {"path": "checkout/totals.py"}},
                {
                    "tool": "edit_file",
                    "args": {
                        "path": "checkout/totals.py",
                        "old": "return round(sum(i.price * i.qty for i in items))",
                        "new": "return sum(i.price * i.qty for i in items).quantize(CENT)",
                    },
                },
                {
                    "say": "Totals were rounded to **whole units**, so €19.99 came out as "
                    "€20. They now keep the cents:\n\n"
                    "```python\n"
                    "def total(items):\n"
                    "    return sum(i.price * i.qty for i in items).quantize(CENT)\n"
                    "```\n\n"
                    '- `CENT` is `Decimal("0.01")`\n'
                    "- prices are `Decimal`, never `float`"
                },
            ],
        ],
    )
    message_send(conversation=fix, text="Totals are off by a few cents. Please fix it.")
    drain()
    # A second reply, caught mid-step: it wrote a test and is running it.
    turn = message_send(conversation=fix, text="Add a test for it, and run the tests.")
    test_file = shop / "tests" / "test_totals.py"
    test_file.write_text("def test_cents_are_kept():\n    ...\n")
    now = timezone.now()
    Step.objects.create(
        turn=turn,
        number=1,
        tool="write_file",
        family="editing files",
        effect="write",
        args={"path": "tests/test_totals.py"},
        files=[str(test_file)],
        started_at=now - timedelta(seconds=21),
        ended_at=now - timedelta(seconds=20),
    )
    Step.objects.create(
        turn=turn,
        number=2,
        tool="run_command",
        family="running a command",
        effect="write",
        args={"command": "pytest tests/test_totals.py"},
        started_at=now - timedelta(seconds=14),
    )
    Turn.objects.filter(pk=turn.pk).update(
        files_changed=[str(test_file)],
        step_family="running a command",
        step_started_at=now - timedelta(seconds=14),
    )

    notes = chat("Write the 2.4 release notes", docs)
    notes_turn = message_send(conversation=notes, text="Draft the notes for 2.4.")
    Turn.objects.filter(pk=notes_turn.pk).update(
        step_family="editing files", step_started_at=now - timedelta(seconds=40)
    )

    # ADR 0134's cards: a chat that holds messages from other chats looked at the
    # others, then the release notes asked it something, held for the person.
    review = chat(
        "Review the checkout fix",
        shop,
        [
            [
                {"tool": "list_chats", "args": {}},
                {"say": "Two other chats are busy; the rounding fix is changing tests here."},
            ]
        ],
        inbound=Inbound.HOLD,
    )
    review_turn = message_send(conversation=review, text="What are the others doing?")
    play_only(review_turn)
    message_chat(
        sender=notes,
        turn=notes_turn,
        chat_id=review.public_id,
        text="Is the cents fix going into 2.4? If so I'll list it under Fixes.",
        start_reply=True,
    )

    # The replies above were scripted; the pictures show Conch as a person with a model
    # connected sees it (the server below runs no runner, so nothing asks the model).
    Agent.objects.filter(pk=agent.pk).update(
        engine="openai",
        engine_config={"base_url": "http://127.0.0.1:11434/v1", "model": "qwen2.5-coder:7b"},
    )
    assert Turn.objects.filter(conversation=watch, state=TurnState.NEEDS_YOU).exists()
    notes.refresh_from_db()
    assert fix.turns.count() == 2 and notes.status == Status.WORKING
    assert ChatMessage.objects.get().state == MessageState.HELD
    return signin_link_create(user=owner), fix.public_id, review.public_id, watch.public_id


def play_only(turn) -> None:
    """Play one reply to its end, leaving every other open reply where it is."""
    from chats.models import Turn
    from chats.runtime.stepping import turn_advance

    Turn.objects.filter(pk=turn.pk, claimed_by="").update(claimed_by="screenshots")
    while turn_advance(turn_id=turn.pk, worker="screenshots", honour_delays=False).more:
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    scratch = Path(tempfile.mkdtemp(prefix="conch-shots-"))
    home = scratch / "home" / "ann"
    home.mkdir(parents=True)
    env = {
        **os.environ,
        "HOME": str(home),
        "CONCH_HOME": str(scratch / "conch"),
        "CONCH_SECRET_KEY": "screenshots-only",
        "DJANGO_SETTINGS_MODULE": "conch.settings",
        "DATABASE_URL": "",
        "REDIS_URL": "",
        "CONCH_TIME_ZONE": "UTC",
    }
    os.environ.update(env)
    import django

    django.setup()
    token, chat_id, cards_id, asking_id = build_workspace(home)

    server = subprocess.Popen(
        [sys.executable, "-m", "tests.browser.server", "--no-runner"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = None
        for line in server.stdout:
            if line.startswith("listening "):
                port = int(line.split()[1])
                break
        if port is None:
            raise RuntimeError("the server did not start")
        base = f"http://127.0.0.1:{port}"
        photograph(base, token, chat_id, cards_id, asking_id, out)
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(scratch, ignore_errors=True)


def photograph(
    base: str, token: str, chat_id: str, cards_id: str, asking_id: str, out: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.goto(f"{base}/signin/{token}/")
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme, reduced_motion="reduce")
            page.goto(f"{base}/")
            expect(page.locator("body")).to_have_attribute("data-socket", "open")
            page.screenshot(path=str(out / f"chat-list-{scheme}.png"))
            page.goto(f"{base}/c/{chat_id}/")
            expect(page.locator("body")).to_have_attribute("data-socket", "open")
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=str(out / f"chat-page-{scheme}.png"))
            print(f"wrote {out}/chat-list-{scheme}.png and {out}/chat-page-{scheme}.png")
        page.emulate_media(color_scheme="light", reduced_motion="reduce")
        page.goto(f"{base}/c/{asking_id}/")
        expect(page.locator("body")).to_have_attribute("data-socket", "open")
        asking = page.get_by_role("button", name="Approve", exact=True)
        asking.scroll_into_view_if_needed()
        page.screenshot(path=str(out / "ask-diff-light.png"))
        print(f"wrote {out}/ask-diff-light.png")
        page.goto(f"{base}/c/{cards_id}/")
        expect(page.locator("body")).to_have_attribute("data-socket", "open")
        expect(page.locator(".card-message .badge")).to_have_text("held for you")
        page.locator(".card-look").scroll_into_view_if_needed()
        page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
        page.screenshot(path=str(out / "together-cards-light.png"))
        print(f"wrote {out}/together-cards-light.png")
        signed_in = context.storage_state()  # the sign-in link is spent: keep its cookie
        context.close()

        # A phone: the chat with its request, and the chat list in its drawer.
        phone = browser.new_context(
            viewport={"width": 390, "height": 844},
            device_scale_factor=2,
            is_mobile=True,
            has_touch=True,
            storage_state=signed_in,
        )
        page = phone.new_page()
        page.emulate_media(color_scheme="light", reduced_motion="reduce")
        page.goto(f"{base}/c/{asking_id}/")
        expect(page.locator("body")).to_have_attribute("data-socket", "open")
        page.get_by_role("button", name="Approve", exact=True).scroll_into_view_if_needed()
        page.screenshot(path=str(out / "phone-ask-light.png"))
        page.get_by_role("button", name="Chats").click()
        expect(page.locator("#sidebar")).to_be_visible()
        page.screenshot(path=str(out / "phone-list-light.png"))
        print(f"wrote {out}/phone-ask-light.png and {out}/phone-list-light.png")
        browser.close()


if __name__ == "__main__":
    main()
