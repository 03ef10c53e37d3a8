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

Each session's trust timeline (every rise of its taint and why, ``TaintRise``)
is written beside its transcript, in its index entry as ``trustTimeline``: one
object per rise with the time (``at``, epoch milliseconds), ``before``,
``after``, ``cause``, the ``url`` or ``path`` the chat used, the session it came
from (``sourceSessionId``) and that one's taint then (``sourceTaint``), the
reply's and step's numbers (``turn``, ``step``) and the rest of the cause
(``detail``).

An archive brings no trust of its own. Its mode, taint and folder are its
say-so, and it may have been written by anyone: an imported chat starts in
Ask mode, tainted at least ``untrusted`` (more if the archive says so), in a
folder that exists and that the person confirmed or gave, and its lines in
Conch's voice come back with Conch's frame written otherwise. Its timeline is
kept as what it is, the archive's claims (:func:`timeline_claims`): checked,
scrubbed and bounded, written down in the import's own rise, and never able
to lower anything. So the import is two steps: :func:`sessions_plan` reads and
checks everything, writing nothing, and :func:`sessions_import` writes what
was shown.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.db import transaction
from django.db.models import Prefetch
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from chats.gateway.inbound import InboundError, text_check
from chats.gateway.models import SessionOrigin
from chats.limits import LIMITS
from chats.models import (
    TAINT_ORDER,
    Agent,
    Conversation,
    Entry,
    EntryKind,
    EntryRole,
    Mode,
    Origin,
    Taint,
    TaintCause,
    TaintRise,
)
from chats.quoting import not_as_conch, scrub_secrets
from chats.taint import Cause, taint_raise
from chats.tools.beneath import open_beneath, open_folder

FORMAT_VERSION = 1
INSERT_BATCH = 1_000
OPENCLAW_ROLE: dict[str, str] = {
    EntryRole.PERSON: "user",
    EntryRole.ASSISTANT: "assistant",
    EntryRole.TOOL: "toolResult",
    EntryRole.CONCH: "system",
}
CONCH_ROLE: dict[object, str] = {value: key for key, value in OPENCLAW_ROLE.items()}
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


ERR_NO_FOLDER = (
    "{where}: {whose} {folder} does not exist. Make it, or give the imported chats "
    "one folder with --folder."
)
ERR_NO_GIVEN_FOLDER = "--folder {folder} does not exist, or is not a folder."


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


def _rise_item(rise: TaintRise) -> dict[str, Any]:
    """One rise of a chat's taint as the archive carries it."""
    return {
        "at": _ms(rise.at),
        "before": rise.before,
        "after": rise.after,
        "cause": rise.cause,
        "url": rise.url,
        "path": rise.path,
        "sourceSessionId": rise.source.public_id if rise.source else None,
        "sourceTaint": rise.source_taint,
        "turn": rise.turn.number if rise.turn else None,
        "step": rise.step.number if rise.step else None,
        "detail": rise.detail,
    }


def sessions_export(*, root: Path, agents: list[Agent] | None = None) -> ExportReport:
    report = ExportReport()
    for agent in agents if agents is not None else Agent.objects.order_by("slug"):
        folder = root / "agents" / agent.slug / "sessions"
        folder.mkdir(parents=True, exist_ok=True)
        index: dict[str, Any] = {}
        rises = TaintRise.objects.select_related("source", "turn", "step").order_by("at", "pk")
        chats = (
            Conversation.objects.filter(agent=agent)
            .select_related("gateway", "gateway__previous")
            .prefetch_related(Prefetch("taint_rises", queryset=rises))
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
                "trustTimeline": [_rise_item(rise) for rise in chat.taint_rises.all()],
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


@dataclass(frozen=True)
class Transcript:
    """A session's transcript file, beneath the archive's folder: opened as the file tools
    open files, following no link, so no ``sessionFile`` reads anything outside the archive."""

    root: Path  # the archive's folder, its real path
    rel: str  # the file beneath it, resolved

    @property
    def name(self) -> str:
        return Path(self.rel).name

    def __str__(self) -> str:
        return str(self.root / self.rel)

    def exists(self) -> bool:
        return (self.root / self.rel).is_file()

    def open(self) -> IO[str]:
        root_fd = open_folder(str(self.root))
        try:
            fd = open_beneath(root_fd, self.rel, os.O_RDONLY)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EXDEV):
                raise InteropError(ERR_TRANSCRIPT_LINK.format(path=self)) from None
            raise
        finally:
            os.close(root_fd)
        return os.fdopen(fd, encoding="utf-8")


ERR_TRANSCRIPT_OUTSIDE = (
    "{where}: its sessionFile {given!r} is outside the archive ({root}); "
    "a transcript is read only from beneath the archive's folder."
)
ERR_TRANSCRIPT_LINK = "{path} leads through a link that changed or loops; it was not read."


def _lines(path: Transcript) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open() as source:
        for number, raw in enumerate(source, start=1):
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise InteropError(f"{path}:{number}: not JSON ({exc.msg}).") from None
            if not isinstance(line, dict):
                raise InteropError(f"{path}:{number}: each line must be a JSON object.")
            _storable(line, f"{path}:{number}")
            yield number, line


def _storable(value: Any, where: str) -> None:
    """Refuse an archive's text that no database can store, naming where it is: JSON's
    ``\\ud800`` escapes decode to a lone surrogate, which SQLite can't take, and
    PostgreSQL's text can't hold NUL. Caught here, the import stops before it writes."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                text_check(item, where)
            except InboundError as exc:
                raise InteropError(f"{where}: its text {exc.message}") from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _entry_from(line: dict[str, Any], where: str, next_seq: int) -> Entry | None:
    kind_of_line = line.get("type")
    if kind_of_line == "session":
        return None
    conch: dict[str, Any] = line["conch"] if isinstance(line.get("conch"), dict) else {}
    if kind_of_line == "compaction":
        role: str = EntryRole.CONCH
        text, kind = line.get("summary"), EntryKind.RECAP
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
    if role == EntryRole.CONCH:
        text = not_as_conch(text)  # the archive's say-so, never Conch's own frame
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


def _new_workspace(slug: str) -> Path:
    return Path(settings.CONCH_HOME) / "workspaces" / slug


def _agent_for(slug: str) -> tuple[Agent, bool]:
    agent = Agent.objects.filter(slug=slug).first()
    if agent is not None:
        return agent, False
    workspace = str(_new_workspace(slug))
    return Agent.objects.create(slug=slug, name=slug.title(), workspace=workspace), True


def _workspace_for(slug: str) -> Path:
    """The persona's own workspace: its stored one, or where a new one's will be."""
    workspace = Agent.objects.filter(slug=slug).values_list("workspace", flat=True).first()
    return Path(workspace) if workspace is not None else _new_workspace(slug)


@dataclass(frozen=True)
class PlannedSession:
    """One session the archive holds and the import would make: checked, not yet written."""

    agent: str
    index_path: Path
    key: str
    item: dict[str, Any]
    folder: Path

    @property
    def session_id(self) -> str:
        return self.item["sessionId"]

    @property
    def title(self) -> str:
        title = self.item.get("title") or self.item.get("sessionKey") or self.session_id
        return str(title)[: LIMITS.title_chars]


@dataclass
class ImportPlan:
    """What an archive would bring in, read once: the confirmation shows it, the import writes it.

    ``items`` keeps every index entry in order, skipped ones too, so that
    generations can be linked once the sessions exist.
    """

    root: Path
    sessions: list[PlannedSession] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    items: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def by_folder(self) -> dict[Path, list[PlannedSession]]:
        grouped: dict[Path, list[PlannedSession]] = {}
        for planned in self.sessions:
            grouped.setdefault(planned.folder, []).append(planned)
        return grouped


def _skip_reason(session_id: str, session_key: str | None, archived: bool) -> str | None:
    if Conversation.objects.filter(public_id=session_id).exists():
        return f"{session_id}: a chat with this id exists already"
    if (
        session_key
        and not archived
        and Conversation.objects.filter(session_key=session_key, archived=False).exists()
    ):
        return f"{session_id}: a live session with the key {session_key} exists"
    return None


def _folder_for(where: str, item: dict[str, Any], agent: str, given: Path | None) -> Path:
    """Where the imported chat will work: the one given, else the archive's, else the persona's.

    It must exist: an archive is someone's say-so, and a chat set to work in a
    folder that isn't there would fail at its first step, or work in whatever
    appears there later.
    """
    if given is not None:
        return given
    claimed = item.get("folder")
    if claimed in (None, ""):
        folder = _workspace_for(agent)
        whose = f"the persona {agent}'s workspace"
    elif not isinstance(claimed, str):
        raise InteropError(f"{where}: folder must be text.")
    else:
        folder = Path(claimed)
        whose = "its folder"
        if not folder.is_absolute():
            raise InteropError(f"{where}: folder must be an absolute path (got {claimed!r}).")
    if not folder.is_dir():
        raise InteropError(ERR_NO_FOLDER.format(where=where, whose=whose, folder=folder))
    return folder.resolve()


def _check_item(where: str, index_path: Path, item: dict[str, Any]) -> None:
    session_id = item.get("sessionId")
    if not isinstance(session_id, str) or not session_id or len(session_id) > 32:
        raise InteropError(f"{where}: sessionId must be text of at most 32 characters.")
    session_key = item.get("sessionKey")
    if session_key is not None and not isinstance(session_key, str):
        raise InteropError(f"{where}: sessionKey must be text or null.")
    transcript = _transcript_of(index_path, item, where)
    if not transcript.exists():
        raise InteropError(f"{where}: its transcript {transcript.name} is missing.")
    _when(item.get("sessionStartedAt"), f"{where} sessionStartedAt")
    for name, choices, default in (
        ("origin", Origin.values, Origin.OWN),
        ("taint", Taint.values, Taint.NONE),
        ("mode", Mode.values, Mode.AUTO),
    ):
        if item.get(name, default) not in choices:
            raise InteropError(f"{where}: {name} must be one of {', '.join(choices)}.")
    timeline_claims(where, item.get(TIMELINE))


def sessions_plan(*, root: Path, folder: Path | None = None) -> ImportPlan:
    """Read and check an archive, writing nothing. ``folder`` replaces every session's own.

    Raises :class:`InteropError` naming the file (and session) at fault,
    including a folder that does not exist.
    """
    if folder is not None:
        if not folder.is_dir():
            raise InteropError(ERR_NO_GIVEN_FOLDER.format(folder=folder))
        folder = folder.resolve()
    plan = ImportPlan(root=root)
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
            raise InteropError(f"{index_path}: not JSON ({exc}).") from None
        if not isinstance(index, dict):
            raise InteropError(f"{index_path}: the index must be an object keyed by session.")
        _storable(index, str(index_path))
        items = sorted(
            ((k, v) for k, v in index.items() if isinstance(v, dict)),
            key=lambda kv: (kv[1].get("sessionStartedAt") or 0, kv[0]),
        )
        plan.items[agent_dir.name] = [item for _key, item in items]
        for key, item in items:
            where = f"{index_path} [{key}]"
            _check_item(where, index_path, item)
            skip = _skip_reason(
                item["sessionId"], item.get("sessionKey"), bool(item.get("archived"))
            )
            if skip:
                plan.skipped.append(skip)
                continue
            _transcript_check(_transcript_of(index_path, item))
            plan.sessions.append(
                PlannedSession(
                    agent=agent_dir.name,
                    index_path=index_path,
                    key=key,
                    item=item,
                    folder=_folder_for(where, item, agent_dir.name, folder),
                )
            )
    return plan


def _transcript_of(index_path: Path, item: dict[str, Any], where: str = "") -> Transcript:
    """The session's transcript, beneath the archive (``ARCHIVE/agents/NAME/sessions/…``).

    ``sessionFile`` is relative to the session index's folder. An absolute one was written
    on the machine the archive came from: it is looked for by its name beside the index.
    Anything that resolves outside the archive's folder, ``..`` or a link, is refused.
    """
    given = str(item.get("sessionFile") or f"{item['sessionId']}.jsonl")
    sessions = index_path.parent
    candidate = sessions / (Path(given).name if os.path.isabs(given) else given)
    root = Path(os.path.realpath(index_path.parents[3]))
    real = Path(os.path.realpath(candidate))
    if root not in real.parents:
        raise InteropError(
            ERR_TRANSCRIPT_OUTSIDE.format(where=where or index_path, given=given, root=root)
        )
    return Transcript(root, str(real.relative_to(root)))


def _entries(path: Transcript) -> Iterator[Entry]:
    """A transcript's entries, unsaved and of no chat yet, each numbered after the last."""
    next_seq = 1
    for number, line in _lines(path):
        entry = _entry_from(line, f"{path}:{number}", next_seq)
        if entry is not None:
            next_seq = entry.seq + 1
            yield entry


def _transcript_check(path: Transcript) -> None:
    """Read a transcript through as the import will, keeping nothing: a bad line stops
    the plan, naming its file and line, before the import writes any session."""
    for _entry in _entries(path):
        pass


def _imported_taint(claimed: str | None, claims: Claims) -> str:
    """At least ``untrusted``: the transcript was read from a file, and a file can say anything.

    An archive can't be told from one someone edited, and its assistant and
    tool lines are read back by the model as the chat's own history. So it is
    what reading something from outside makes a chat, or more if it says so:
    in its ``taint``, or in any rise its timeline claims. A claim only ever adds care.
    """
    levels = [Taint(claimed or Taint.NONE), Taint.UNTRUSTED]
    levels += [Taint(rise["after"]) for rise in claims.rises]
    return max(levels, key=TAINT_ORDER.__getitem__)


# ---------------------------------------------------------------------------
# An archive's trust timeline: claims, never the record


TIMELINE = "trustTimeline"
ERR_TIMELINE_SHAPE = f"{{where}}: {TIMELINE} must be a list of rises."
ERR_RISE_SHAPE = "{where}: each rise must be an object."
ERR_RISE_CHOICE = "{where}: {name} must be one of {choices}."
ERR_RISE_TEXT = "{where}: must be text or null."
ERR_RISE_NUMBER = "{where}: must be a whole number from 1, or null."
ERR_RISE_DETAIL = "{where}: must be an object or null."


@dataclass(frozen=True)
class Claims:
    """What an archive says a session's timeline held: its rises as it states them
    (checked, scrubbed, cut), and how many more it listed past the bound."""

    rises: list[dict[str, Any]] = field(default_factory=list)
    left_out: int = 0


def timeline_claims(where: str, value: Any) -> Claims:
    """An archive's ``trustTimeline`` as claims. Raises :class:`InteropError` naming the
    rise and field at fault: levels and causes must be Conch's own, times times, numbers
    numbers. Words (a URL, a path, a session's id, a detail's values) are scrubbed of
    anything shaped like a secret and cut; only the first ``import_claims_rows`` rises are
    read at all, the rest counted. Nothing here is ever linked to a chat of this Conch."""
    if value is None:
        return Claims()
    if not isinstance(value, list):
        raise InteropError(ERR_TIMELINE_SHAPE.format(where=where))
    kept = [
        _claim(f"{where} {TIMELINE}[{n}]", rise)
        for n, rise in enumerate(value[: LIMITS.import_claims_rows])
    ]
    return Claims(kept, left_out=max(0, len(value) - LIMITS.import_claims_rows))


def _claim(where: str, rise: Any) -> dict[str, Any]:
    if not isinstance(rise, dict):
        raise InteropError(ERR_RISE_SHAPE.format(where=where))
    for name, choices in (
        ("before", Taint.values),
        ("after", Taint.values),
        ("cause", TaintCause.values),
        ("sourceTaint", ["", *Taint.values]),
    ):
        if rise.get(name, "" if name == "sourceTaint" else None) not in choices:
            raise InteropError(
                ERR_RISE_CHOICE.format(where=where, name=name, choices=", ".join(choices))
            )
    at = rise.get("at")
    return {
        "at": None if at is None else _when(at, f"{where} at").isoformat(),
        "before": rise["before"],
        "after": rise["after"],
        "cause": rise["cause"],
        "url": _claimed_words(rise.get("url"), f"{where} url", LIMITS.url_chars),
        "path": _claimed_words(rise.get("path"), f"{where} path", LIMITS.url_chars),
        "source_session": _claimed_words(
            rise.get("sourceSessionId"), f"{where} sourceSessionId", LIMITS.id_chars
        ),
        "source_taint": rise.get("sourceTaint", ""),
        "turn": _claimed_number(rise.get("turn"), f"{where} turn"),
        "step": _claimed_number(rise.get("step"), f"{where} step"),
        "detail": _claimed_detail(rise.get("detail"), f"{where} detail"),
    }


def _claimed_words(value: Any, where: str, limit: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InteropError(ERR_RISE_TEXT.format(where=where))
    return scrub_secrets(value)[:limit]


def _claimed_number(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InteropError(ERR_RISE_NUMBER.format(where=where))
    return value


def _claimed_detail(value: Any, where: str) -> dict[str, Any]:
    """A rise's detail as claimed: its first keys, each value a scalar or its JSON, scrubbed and cut."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InteropError(ERR_RISE_DETAIL.format(where=where))
    kept: dict[str, Any] = {}
    for key, item in list(value.items())[: LIMITS.import_claim_detail_keys]:
        if item is None or isinstance(item, bool | int | float):
            kept[key[: LIMITS.name_chars]] = item
            continue
        words = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
        kept[key[: LIMITS.name_chars]] = scrub_secrets(words)[: LIMITS.name_chars]
    return kept


def sessions_import(*, plan: ImportPlan, owner) -> ImportReport:
    """Write what :func:`sessions_plan` read. Every chat starts in Ask mode, tainted at least untrusted."""
    report = ImportReport(skipped=list(plan.skipped))
    made: dict[str, Conversation] = {}
    agents: dict[str, Agent] = {}
    for slug in plan.items:
        agents[slug], _ = _agent_for(slug)
        report.agents += 1
    for planned in plan.sessions:
        chat = _import_one(agents[planned.agent], owner, planned, report)
        if chat is not None:
            made[chat.public_id] = chat
    for slug, items in plan.items.items():  # generations link once all of them exist
        for item in items:
            previous = item.get("previousSessionId")
            if previous and item.get("sessionId") in made:
                target = Conversation.objects.filter(public_id=previous, agent=agents[slug]).first()
                SessionOrigin.objects.filter(pk=made[item["sessionId"]].pk).update(previous=target)
    return report


def _import_one(
    agent: Agent, owner, planned: PlannedSession, report: ImportReport
) -> Conversation | None:
    item, session_id = planned.item, planned.session_id
    where = f"{planned.index_path} [{planned.key}]"
    session_key = item.get("sessionKey")
    archived = bool(item.get("archived"))
    skip = _skip_reason(session_id, session_key, archived)  # again: the plan may be old
    if skip:
        report.skipped.append(skip)
        return None
    transcript = _transcript_of(planned.index_path, item)
    started = _when(item.get("sessionStartedAt"), f"{where} sessionStartedAt")
    with transaction.atomic():
        chat = Conversation.objects.create(
            public_id=session_id,
            owner=owner,
            agent=agent,
            title=planned.title,
            origin=item.get("origin") or Origin.OWN,
            origin_channel=str(item.get("originChannel") or "")[:32],
            folder=str(planned.folder),
            archived=archived,
            pinned=bool(item.get("pinned")),
            mode=Mode.ASK,
            session_key=session_key or None,
            session_started_at=started,
            last_interaction_at=_when(
                item.get("lastInteractionAt", item.get("sessionStartedAt")),
                f"{where} lastInteractionAt",
            ),
            created_at=_when(item.get("createdAt", item.get("sessionStartedAt")), where),
        )
        # The archive's word is no grant: see _imported_taint, and Ask until the person
        # chooses otherwise for this chat. Through the one door, so the timeline says why.
        # Its timeline, as the archive states it, is kept in that rise as claims.
        claimed = item.get("taint")
        claims = timeline_claims(where, item.get(TIMELINE))
        taint_raise(
            conversation=chat,
            taint=_imported_taint(claimed, claims),
            cause=Cause.imported(
                archive=str(planned.index_path),
                claimed=claimed if claimed in Taint.values else "",
                claims=claims.rises,
                claims_left_out=claims.left_out,
            ),
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
        for entry in _entries(transcript):
            entry.conversation = chat
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
