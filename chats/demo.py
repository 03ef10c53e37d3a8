"""The demo chats of ``conch serve --demo`` (and ``conch conch_demo``): seeded, then started
on the person's first visit, so their replies are still moving when the person looks.

The chats work in a ``demo`` folder inside the default persona's workspace.
Their scripts wait one to three seconds before each action. Seeding makes
the chats and notes ``CONCH_HOME/demo-pending``; the first page the owner
opens takes that note (only one request can) and sends each new demo chat
its first message, which the server's runner then plays.

Seeding again does not duplicate them: each demo chat has a fixed id
(``c_demo_<slug>``), and a chat whose id already exists is left alone, even
if the person archived it. The demo files are written only when none of the
demo chats exists yet, so a second run never undoes the chats' edits.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError

from chats.engines.scripted import validate_script
from chats.models import Conversation, Mode
from chats.runtime.chats import conversation_create, default_agent
from chats.runtime.turns import message_send

PENDING_FILE = "demo-pending"

DEMO_FOLDER = "demo"

DEMO_FILES = {
    "greet.py": (
        "def greet(name):\n"
        '    return "Hello, " + name\n'
        "\n"
        "\n"
        'if __name__ == "__main__":\n'
        '    print(greet("world"))\n'
    ),
    "README.md": "# Demo\n\nA small folder that Conch's demo chats work in.\n",
}


@dataclass(frozen=True)
class DemoChat:
    slug: str
    title: str
    message: str
    script: list
    mode: str = Mode.AUTO

    @property
    def public_id(self) -> str:
        return f"c_demo_{self.slug}"


def demo_chats() -> list[DemoChat]:
    # python3 from PATH, not this process's interpreter: a venv in a folder the
    # command sandbox hides (/tmp, another home) would not be there for the command.
    python = "python3"
    return [
        DemoChat(
            slug="tidy",
            title="Tidy up greet.py",
            message="greet.py glues strings together with +. Can you tidy it and check it runs?",
            script=[
                [
                    {"tool": "read_file", "args": {"path": "greet.py"}, "delay": 1},
                    {"say": "I'll use an f-string and add an exclamation mark.", "delay": 2},
                    {
                        "tool": "edit_file",
                        "args": {
                            "path": "greet.py",
                            "old": 'return "Hello, " + name',
                            "new": 'return f"Hello, {name}!"',
                        },
                        "delay": 3,
                    },
                    {"tool": "run_command", "args": {"command": f"{python} greet.py"}, "delay": 2},
                    {"say": "Done: greet.py now prints “Hello, world!”.", "delay": 1},
                ]
            ],
        ),
        DemoChat(
            slug="notes",
            title="Write release notes",
            message="Please write short release notes for the demo folder.",
            script=[
                [
                    {"tool": "list_files", "args": {}, "delay": 1},
                    {"tool": "read_file", "args": {"path": "README.md"}, "delay": 2},
                    {"say": "I'll keep the notes to what changed in this folder.", "delay": 2},
                    {
                        "tool": "write_file",
                        "args": {
                            "path": "CHANGES.md",
                            "content": "# Changes\n\n- greet() says hello with an f-string.\n",
                        },
                        "delay": 3,
                    },
                    {"say": "Release notes are in CHANGES.md.", "delay": 1},
                ]
            ],
        ),
        DemoChat(
            slug="ask",
            title="Reword the README (asks first)",
            message="Could you make the README friendlier? Ask before changing anything.",
            mode=Mode.ASK,
            script=[
                [
                    {"tool": "read_file", "args": {"path": "README.md"}, "delay": 2},
                    {"say": "Here is what I'd change; I'll ask for your OK first.", "delay": 1},
                    {
                        "tool": "edit_file",
                        "args": {
                            "path": "README.md",
                            "old": "A small folder",
                            "new": "A small, friendly folder",
                        },
                        "delay": 2,
                    },
                    {"say": "The README is friendlier now.", "delay": 1},
                ]
            ],
        ),
    ]


def demo_seed(*, owner) -> tuple[Path, list[Conversation], list[str]]:
    """Create the demo chats that don't exist yet; their replies start on the first visit.

    Returns the demo folder, the chats created now, and the ids already there.
    """
    agent = default_agent()
    folder = Path(agent.workspace) / DEMO_FOLDER
    chats = demo_chats()
    ids = [chat.public_id for chat in chats]
    existing = set(
        Conversation.objects.filter(public_id__in=ids).values_list("public_id", flat=True)
    )
    if not existing:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in DEMO_FILES.items():
            (folder / name).write_text(text, encoding="utf-8")
    created = []
    for demo in chats:
        if demo.public_id in existing:
            continue
        validate_script(demo.script, where=f"the demo chat {demo.slug!r}")
        try:
            chat = conversation_create(
                owner=owner,
                title=demo.title,
                folder=str(folder),
                agent=agent,
                mode=demo.mode,
                script=demo.script,
                public_id=demo.public_id,
            )
        except IntegrityError:  # another conch_demo made it a moment ago
            existing.add(demo.public_id)
            continue
        created.append(chat)
    if created:
        _pending().write_text("\n".join(chat.public_id for chat in created) + "\n")
    return folder, created, sorted(existing)


def _pending() -> Path:
    return Path(settings.CONCH_HOME) / PENDING_FILE


def demo_start_pending() -> list[Conversation]:
    """On the owner's first visit after seeding: send each new demo chat its first message.

    A file's presence is all a visit checks (no query); the visit that takes the
    note starts the replies, and any other finds it gone."""
    note = _pending()
    if not note.exists():
        return []
    try:
        taken = note.with_name(f"{PENDING_FILE}.{secrets.token_hex(8)}")
        note.rename(taken)  # atomic: of two visits at once, one takes it
    except FileNotFoundError:
        return []
    ids = taken.read_text().split()
    taken.unlink()
    messages = {demo.public_id: demo.message for demo in demo_chats()}
    started = []
    for chat in Conversation.objects.filter(public_id__in=ids, turns__isnull=True):
        message_send(conversation=chat, text=messages[chat.public_id])
        started.append(chat)
    return started
