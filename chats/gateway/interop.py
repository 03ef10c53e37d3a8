"""Export and import in OpenClaw's layout (seed ch. 3), for interoperability and backups.

``agents/<agentId>/sessions/sessions.json`` is the index: one object per
session with its key, ``sessionId``, ``sessionStartedAt``,
``lastInteractionAt`` and ``updatedAt`` (epoch milliseconds, as OpenClaw
writes them) and where it came from; no transcript. Each session's transcript
is ``<sessionId>.jsonl``: a ``session`` header line, then one JSON object per
entry (``message``, or ``compaction`` for a recap), each carrying a ``conch``
block so a round trip gives back the same entries.

The index is keyed by session key. Archived generations share their key with
the live one, so they are listed as ``<key>#<sessionId>``; the person's own
chats (no key) as ``conch:<sessionId>``. Every entry names its own
``sessionKey``. The database stays the store: these files are a format.

Both directions stream: a transcript is written and read line by line, and
entries are inserted in batches.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from chats.gateway.models import SessionOrigin
from chats.models import Agent, Conversation, Entry, EntryKind, EntryRole, Mode, Origin, Taint

FORMAT_VERSION = 1
INSERT_BATCH = 1_000
OPENCLAW_ROLE = {
    EntryRole.PERSON: "user",
    EntryRole.ASSISTANT: "assistant",
    EntryRole.TOOL: "toolResult",
    EntryRole.CONCH: "system",
}
CONCH_ROLE = {value: key for key, value in OPENCLAW_ROLE.items()}
ORIGIN_FIELDS = {
    "chatType": "chat_type",
    "channel": "channel",
    "accountId": "account_id",
    "peer": "peer",
    "groupId": "group_id",
    "threadId": "thread_id",
    "parentPeer": "parent_peer",
    "guildId": "guild_id",
    "teamId": "team_id",
    "jobId": "job_id",
    "replyTo": "reply_to",
    "rule": "rule",
    "dmScope": "dm_scope",
    "startedBecause": "started_because",
    "endedBecause": "ended_because",
}


class InteropError(ValueError):
    """A file that can't be imported; the message names the file and line."""


def _ms(value: dt.datetime) -> int:
    return int(value.timestamp() * 1000)


def _when(value: Any, where: str) -> dt.datetime:
    if isinstance(value, bool):
        raise InteropError(f"{where}: not a time.")
    if isinstance(value, int | float):
        return dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC)
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is not None:
            return parsed if parsed.tzinfo else timezone.make_aware(parsed, dt.UTC)
    raise InteropError(f"{where}: not a time (epoch milliseconds or ISO 8601).")


def _index_key(chat: Conversation) -> str:
    if not chat.session_key:
        return f"conch:{chat.public_id}"
    return chat.session_key if not chat.archived else f"{chat.session_key}#{chat.public_id}"


# ---------------------------------------------------------------------------
# Export


@dataclass
class ExportReport:
    agents: int = 0
    sessions: int = 0
    entries: int = 0


def _entry_line(entry: Entry) -> dict[str, Any]:
    conch = {"seq": entry.seq, "role": entry.role, "kind": entry.kind, "data": entry.data}
    stamp = entry.created_at.isoformat()
    if entry.kind == EntryKind.RECAP:
        return {
            "type": "compaction",
            "id": f"e{entry.seq}",
            "timestamp": stamp,
            "summary": entry.text,
            "conch": conch,
        }
    return {
        "type": "message",
        "id": f"e{entry.seq}",
        "timestamp": stamp,
        "message": {
            "role": OPENCLAW_ROLE.get(entry.role, "system"),
            "content": [{"type": "text", "text": entry.text}],
        },
        "conch": conch,
    }


def sessions_export(*, root: Path, agents: list[Agent] | None = None) -> ExportReport:
    report = ExportReport()
    for agent in agents if agents is not None else Agent.objects.order_by("slug"):
        folder = root / "agents" / agent.slug / "sessions"
        folder.mkdir(parents=True, exist_ok=True)
        index: dict[str, Any] = {}
        chats = (
            Conversation.objects.filter(agent=agent)
            .select_related("gateway", "gateway__previous")
            .order_by("session_started_at", "pk")
        )
        for chat in chats.iterator(chunk_size=500):
            transcript = f"{chat.public_id}.jsonl"
            count = 0
            with open(folder / transcript, "w", encoding="utf-8") as out:
                header = {
                    "type": "session",
                    "version": FORMAT_VERSION,
                    "id": chat.public_id,
                    "timestamp": chat.session_started_at.isoformat(),
                    "cwd": chat.folder,
                }
                out.write(json.dumps(header, ensure_ascii=False) + "\n")
                for entry in (
                    Entry.objects.filter(conversation=chat)
                    .order_by("seq")
                    .iterator(chunk_size=1000)
                ):
                    out.write(json.dumps(_entry_line(entry), ensure_ascii=False) + "\n")
                    count += 1
            item: dict[str, Any] = {
                "sessionId": chat.public_id,
                "sessionKey": chat.session_key,
                "sessionFile": transcript,
                "sessionStartedAt": _ms(chat.session_started_at),
                "lastInteractionAt": _ms(chat.last_interaction_at),
                "updatedAt": _ms(chat.updated_at),
                "createdAt": _ms(chat.created_at),
                "title": chat.title,
                "archived": chat.archived,
                "pinned": chat.pinned,
                "origin": chat.origin,
                "originChannel": chat.origin_channel,
                "taint": chat.taint,
                "mode": chat.mode,
                "folder": chat.folder,
                "entries": count,
            }
            origin = getattr(chat, "gateway", None)
            if origin is not None:
                for name, attr in ORIGIN_FIELDS.items():
                    item[name] = getattr(origin, attr)
                item["previousSessionId"] = origin.previous.public_id if origin.previous else None
            index[_index_key(chat)] = item
            report.sessions += 1
            report.entries += count
        with open(folder / "sessions.json", "w", encoding="utf-8") as out:
            json.dump(index, out, indent=2, ensure_ascii=False)
        report.agents += 1
    return report


# ---------------------------------------------------------------------------
# Import


@dataclass
class ImportReport:
    agents: int = 0
    sessions: int = 0
    entries: int = 0
    skipped: list[str] = field(default_factory=list)


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8") as source:
        for number, raw in enumerate(source, start=1):
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
            except ValueError as exc:
                raise InteropError(f"{path}:{number}: not JSON ({exc.msg}).") from None
            if not isinstance(line, dict):
                raise InteropError(f"{path}:{number}: each line must be a JSON object.")
            yield number, line


def _entry_from(line: dict[str, Any], where: str, next_seq: int) -> Entry | None:
    kind_of_line = line.get("type")
    if kind_of_line == "session":
        return None
    conch = line.get("conch") if isinstance(line.get("conch"), dict) else {}
    if kind_of_line == "compaction":
        text, role, kind = line.get("summary"), EntryRole.CONCH, EntryKind.RECAP
    elif kind_of_line == "message":
        message = line.get("message")
        if not isinstance(message, dict):
            raise InteropError(f"{where}: a message line needs a message object.")
        content = message.get("content")
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            text = "".join(
                part.get("text", "")
                for part in content
                if isinstance(part, dict) and part.get("type") == "text"
            )
        else:
            raise InteropError(f"{where}: a message's content must be text or parts.")
        role = CONCH_ROLE.get(message.get("role"), EntryRole.CONCH)
        kind = EntryKind.MESSAGE
    else:
        return None  # other OpenClaw line types (model changes…) have no entry here
    if not isinstance(text, str):
        raise InteropError(f"{where}: the entry's text must be text.")
    role = conch.get("role", role)
    kind = conch.get("kind", kind)
    if role not in EntryRole.values or kind not in EntryKind.values:
        raise InteropError(f"{where}: unknown role or kind.")
    seq = conch.get("seq", next_seq)
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise InteropError(f"{where}: seq must be a positive whole number.")
    data = conch.get("data", {})
    stamp = line.get("timestamp")
    return Entry(
        seq=seq,
        role=role,
        kind=kind,
        text=text,
        data=data if isinstance(data, dict) else {},
        created_at=_when(stamp, where) if stamp is not None else timezone.now(),
    )


def _agent_for(slug: str) -> tuple[Agent, bool]:
    agent = Agent.objects.filter(slug=slug).first()
    if agent is not None:
        return agent, False
    workspace = Path(settings.CONCH_HOME) / "workspaces" / slug
    return Agent.objects.create(slug=slug, name=slug.title(), workspace=str(workspace)), True


def sessions_import(*, root: Path, owner) -> ImportReport:
    report = ImportReport()
    agents_dir = root / "agents"
    if not agents_dir.is_dir():
        raise InteropError(f"{root}: there is no agents/ folder here.")
    for agent_dir in sorted(p for p in agents_dir.iterdir() if p.is_dir()):
        index_path = agent_dir / "sessions" / "sessions.json"
        if not index_path.exists():
            continue
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise InteropError(f"{index_path}: not JSON ({exc.msg}).") from None
        if not isinstance(index, dict):
            raise InteropError(f"{index_path}: the index must be an object keyed by session.")
        agent, _ = _agent_for(agent_dir.name)
        report.agents += 1
        made: dict[str, Conversation] = {}
        items = sorted(
            ((k, v) for k, v in index.items() if isinstance(v, dict)),
            key=lambda kv: (kv[1].get("sessionStartedAt") or 0, kv[0]),
        )
        for key, item in items:
            chat = _import_one(agent, owner, index_path, key, item, report)
            if chat is not None:
                made[chat.public_id] = chat
        for _key, item in items:  # generations link once all of them exist
            previous = item.get("previousSessionId")
            if previous and item.get("sessionId") in made:
                target = Conversation.objects.filter(public_id=previous, agent=agent).first()
                SessionOrigin.objects.filter(pk=made[item["sessionId"]].pk).update(previous=target)
    return report


def _import_one(
    agent: Agent, owner, index_path: Path, key: str, item: dict[str, Any], report: ImportReport
) -> Conversation | None:
    where = f"{index_path} [{key}]"
    session_id = item.get("sessionId")
    if not isinstance(session_id, str) or not session_id or len(session_id) > 32:
        raise InteropError(f"{where}: sessionId must be text of at most 32 characters.")
    if Conversation.objects.filter(public_id=session_id).exists():
        report.skipped.append(f"{session_id}: a chat with this id exists already")
        return None
    session_key = item.get("sessionKey")
    if session_key is not None and not isinstance(session_key, str):
        raise InteropError(f"{where}: sessionKey must be text or null.")
    archived = bool(item.get("archived"))
    if (
        session_key
        and not archived
        and Conversation.objects.filter(session_key=session_key, archived=False).exists()
    ):
        report.skipped.append(f"{session_id}: a live session with the key {session_key} exists")
        return None
    transcript = index_path.parent / str(item.get("sessionFile") or f"{session_id}.jsonl")
    if not transcript.exists():
        raise InteropError(f"{where}: its transcript {transcript.name} is missing.")
    started = _when(item.get("sessionStartedAt"), f"{where} sessionStartedAt")
    for name, choices, default in (
        ("origin", Origin.values, Origin.OWN),
        ("taint", Taint.values, Taint.NONE),
        ("mode", Mode.values, Mode.AUTO),
    ):
        if item.get(name, default) not in choices:
            raise InteropError(f"{where}: {name} must be one of {', '.join(choices)}.")
    with transaction.atomic():
        chat = Conversation.objects.create(
            public_id=session_id,
            owner=owner,
            agent=agent,
            title=str(item.get("title") or session_key or session_id)[:120],
            origin=item.get("origin") or "own",
            origin_channel=str(item.get("originChannel") or "")[:32],
            folder=str(item.get("folder") or agent.workspace),
            archived=archived,
            pinned=bool(item.get("pinned")),
            taint=item.get("taint") or "none",
            mode=item.get("mode") or "auto",
            session_key=session_key or None,
            session_started_at=started,
            last_interaction_at=_when(
                item.get("lastInteractionAt", item.get("sessionStartedAt")),
                f"{where} lastInteractionAt",
            ),
            created_at=_when(item.get("createdAt", item.get("sessionStartedAt")), where),
        )
        if item.get("chatType"):
            SessionOrigin.objects.create(
                conversation=chat,
                **{
                    attr: str(item.get(name) or "")
                    for name, attr in ORIGIN_FIELDS.items()
                    if name != "replyTo"
                },
                reply_to=item.get("replyTo") or {},
            )
        batch: list[Entry] = []
        next_seq = 1
        for number, line in _lines(transcript):
            entry = _entry_from(line, f"{transcript}:{number}", next_seq)
            if entry is None:
                continue
            entry.conversation = chat
            next_seq = entry.seq + 1
            batch.append(entry)
            if len(batch) >= INSERT_BATCH:
                Entry.objects.bulk_create(batch)
                report.entries += len(batch)
                batch = []
        if batch:
            Entry.objects.bulk_create(batch)
            report.entries += len(batch)
        if item.get("updatedAt") is not None:  # auto_now: set it after the writes
            Conversation.objects.filter(pk=chat.pk).update(
                updated_at=_when(item["updatedAt"], f"{where} updatedAt")
            )
    report.sessions += 1
    return chat
