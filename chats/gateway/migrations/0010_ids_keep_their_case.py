"""Ids keep the case their platform gives them.

Before, on Slack, Discord, Matrix and Telegram every peer, group and thread id was
case-folded into session keys and bindings, so two Matrix rooms that differ only by
case (``!MixedRoomAbCdEf:example.org``, ``!mixedroomabcdef:example.org``) shared a
session; elsewhere a DM peer kept its case, so one iMessage person in two cases was
two sessions. Now a group's, room's and thread's id keeps its case on every channel,
and a person's DM id (and a linked person's name) is lower-cased on every channel.

This migration moves what is stored, without merging or losing a session:

- each gateway session's key is made again from what its origin holds, the ids as the
  message gave them (a group's and a thread's); a DM key's peer is lower-cased. Two
  live sessions that now have one key (one person, written two ways) are never
  merged: the later one (by its start) stays live and the earlier is archived as its
  earlier generation, kept and readable, as a reset would;
- a binding for a person (peer kind ``direct``) is lower-cased; one for a group, room
  or thread that was folded gets its case back from a session of that room, else (on
  Slack, whose ids are upper-case) it is upper-cased; a Matrix room binding with no
  session to learn from keeps its folded id, and the admin must write it again as the
  room id is (docs/guides/chat-apps/index.md says so). The routing version moves, so every process
  reloads its bindings.

The key's spelling (escaping) is copied here, not imported: a migration must not
change when the code does.
"""

from __future__ import annotations

from urllib.parse import unquote

from django.db import migrations
from django.db.models import F

_FOLDED = ("slack", "discord", "matrix", "telegram")  # the channels folded before
_RESERVED = frozenset({"shared", "linked"})
MERGED = "the same person's DMs in another case: one session from now on"


def _key_part(value: str) -> str:
    if "%" in value or ":" in value:
        value = value.replace("%", "%25").replace(":", "%3A")
    if value in _RESERVED:
        value = f"%{ord(value[0]):02X}{value[1:]}"
    return value


def _dm_key(main: str) -> str:
    """A DM's main key with its peer (and a linked name) lower-cased; Conch's own words
    (``dm``, ``shared``, ``linked``, the channel and account, lower-case already) kept."""
    parts = main.split(":")
    return ":".join(
        part if (i == 0 or part in _RESERVED) else _key_part(unquote(part).lower())
        for i, part in enumerate(parts)
    )


def _new_key(key: str, origin) -> str:
    head, _, main = key.partition(":")  # "agent"
    slug, _, main = main.partition(":")
    kind = main.split(":", 1)[0]
    if kind == "dm":
        main = _dm_key(main)
    elif kind == "group" and origin is not None and origin.group_id:
        main = f"group:{_key_part(origin.channel)}:{_key_part(origin.group_id.strip())}"
    elif kind == "thread" and origin is not None and origin.thread_id:
        parent = _key_part((origin.parent_peer or origin.group_id).strip())
        main = f"thread:{_key_part(origin.channel)}:{parent}:{_key_part(origin.thread_id.strip())}"
    return f"{head}:{slug}:{main}"


def keys_forward(apps, schema_editor):
    Conversation = apps.get_model("chats", "Conversation")
    SessionOrigin = apps.get_model("gateway", "SessionOrigin")
    origins = {o.conversation_id: o for o in SessionOrigin.objects.all()}
    chats = list(
        Conversation.objects.filter(session_key__isnull=False)
        .exclude(session_key="")
        .order_by("session_started_at", "pk")
    )
    new = {chat.pk: _new_key(chat.session_key, origins.get(chat.pk)) for chat in chats}
    # Live sessions that now share a key: the latest stays live, the earlier step back.
    live: dict[str, list] = {}
    for chat in chats:
        if not chat.archived:
            live.setdefault(new[chat.pk], []).append(chat)
    for same in live.values():
        *earlier, latest = same  # ordered by start
        for chat in earlier:
            Conversation.objects.filter(pk=chat.pk).update(archived=True)
            SessionOrigin.objects.filter(conversation_id=chat.pk).update(ended_because=MERGED)
        if earlier:
            SessionOrigin.objects.filter(conversation_id=latest.pk, previous__isnull=True).update(
                previous_id=earlier[-1].pk, started_because=MERGED
            )
    for chat in chats:
        if new[chat.pk] != chat.session_key:
            Conversation.objects.filter(pk=chat.pk).update(session_key=new[chat.pk])


def _as_given(channel: str, folded: str, seen: dict) -> str:
    """A folded group or thread id with its case back: from a session of it, else Slack's
    upper case; else as it is."""
    if not folded or folded == "*" or folded != folded.lower():
        return folded
    given = seen.get((channel, folded))
    if given:
        return given
    return folded.upper() if channel == "slack" else folded


def bindings_forward(apps, schema_editor):
    Binding = apps.get_model("gateway", "Binding")
    GatewayConfig = apps.get_model("gateway", "GatewayConfig")
    SessionOrigin = apps.get_model("gateway", "SessionOrigin")
    seen: dict[tuple[str, str], str] = {}
    for channel, *ids in SessionOrigin.objects.values_list(
        "channel", "group_id", "thread_id", "parent_peer"
    ):
        for value in ids:
            if value and value != value.lower():
                seen.setdefault((channel, value.lower()), value)
    changed = []
    for binding in Binding.objects.all():
        if binding.peer_kind == "direct":
            peer = binding.peer.strip().lower() if binding.peer != "*" else "*"
        elif binding.channel in _FOLDED:
            peer = _as_given(binding.channel, binding.peer, seen)
        else:
            peer = binding.peer
        parent = (
            _as_given(binding.channel, binding.parent_peer, seen)
            if binding.channel in _FOLDED
            else binding.parent_peer
        )
        if (peer, parent) == (binding.peer, binding.parent_peer):
            continue
        clash = Binding.objects.filter(
            channel=binding.channel,
            peer=peer,
            parent_peer=parent,
            guild_id=binding.guild_id,
            team_id=binding.team_id,
            account_id=binding.account_id,
        ).exclude(pk=binding.pk)
        if clash.exists():  # two rules for one person, written two ways: the first stays
            continue
        Binding.objects.filter(pk=binding.pk).update(peer=peer, parent_peer=parent)
        changed.append(binding.pk)
    if changed:
        GatewayConfig.objects.update(routing_version=F("routing_version") + 1)
        version = GatewayConfig.objects.values_list("routing_version", flat=True).first()
        if version is not None:
            Binding.objects.filter(pk__in=changed).update(routing_version=version)


class Migration(migrations.Migration):
    dependencies = [
        ("gateway", "0009_chat_migrations_and_group_names"),
        ("chats", "0012_persona_owner"),
    ]

    operations = [
        migrations.RunPython(keys_forward, migrations.RunPython.noop),
        migrations.RunPython(bindings_forward, migrations.RunPython.noop),
    ]
