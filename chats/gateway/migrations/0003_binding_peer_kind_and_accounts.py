"""Bindings get a peer kind, and account ids take OpenClaw's meaning.

- ``peer_kind`` is added. A saved peer binding gets the kind its peer has been
  seen as in the sessions' origins (a DM's sender: ``direct``; a group:
  ``group``; a thread: ``channel``; a cron job: ``cron``) when that is one
  kind; otherwise it stays empty, which matches any kind, as every peer binding
  did before.
- An empty account id used to mean any account; it now means the channel's
  default account, as in OpenClaw. Saved rows keep what they did: empty
  becomes ``*``. Other account ids are normalized (trimmed, lower-cased, odd
  characters to ``-``), and peers on case-insensitive channels are folded, as
  routing now compares them.

The spelling rules are copied here, as they are today, so that this migration
keeps doing what it did whatever ``chats.gateway.ids`` becomes.
"""

from __future__ import annotations

import re

from django.db import migrations, models

_VALID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$", re.ASCII | re.IGNORECASE)
_ODD = re.compile(r"[^a-z0-9_-]+", re.ASCII)
_FOLDED = frozenset({"slack", "discord", "matrix", "telegram"})
_KIND_OF_CHAT = {"dm": ("direct", "peer"), "group": ("group", "group_id"),
                 "thread": ("channel", "thread_id"), "cron": ("cron", "job_id")}  # fmt: skip


def _account(value: str) -> str:
    trimmed = value.strip()
    if not trimmed:
        return "*"  # empty meant any account
    if trimmed == "*":
        return trimmed
    if _VALID.match(trimmed):
        return trimmed.lower()
    return _ODD.sub("-", trimmed.lower()).lstrip("-").rstrip("-")[:64] or "default"


def _fold(channel: str, value: str) -> str:
    return value.casefold() if channel in _FOLDED else value


def forwards(apps, schema_editor):
    Binding = apps.get_model("gateway", "Binding")
    SessionOrigin = apps.get_model("gateway", "SessionOrigin")
    for binding in Binding.objects.all().iterator():
        channel = binding.channel
        binding.account_id = _account(binding.account_id)
        binding.peer = _fold(channel, binding.peer.strip())
        binding.parent_peer = _fold(channel, binding.parent_peer.strip())
        if binding.peer:
            kinds = set()
            for chat_type, (kind, field) in _KIND_OF_CHAT.items():
                lookup = f"{field}__iexact" if channel in _FOLDED else field
                seen = SessionOrigin.objects.filter(
                    channel=channel, chat_type=chat_type, **{lookup: binding.peer}
                )
                if seen.exists():
                    kinds.add(kind)
            if len(kinds) == 1:
                binding.peer_kind = kinds.pop()
        binding.save(update_fields=["account_id", "peer", "parent_peer", "peer_kind"])


class Migration(migrations.Migration):
    dependencies = [("gateway", "0002_telegram_bot_name_edits_and_refusals")]

    operations = [
        migrations.AddField(
            model_name="binding",
            name="peer_kind",
            field=models.CharField(
                blank=True,
                choices=[
                    ("direct", "direct: a person's DM"),
                    ("group", "group"),
                    ("channel", "channel (or a thread in one)"),
                    ("cron", "cron: a scheduled job"),
                ],
                help_text="Needed with a peer. Empty on a peer saved before kinds: any kind, as then.",
                max_length=8,
            ),
        ),
        migrations.AlterField(
            model_name="binding",
            name="account_id",
            field=models.CharField(
                blank=True,
                help_text='Empty: the channel\'s default account. "*" for any account.',
                max_length=128,
            ),
        ),
        migrations.AlterField(
            model_name="binding",
            name="peer",
            field=models.CharField(
                blank=True, help_text='"*" for any peer of its kind.', max_length=128
            ),
        ),
        migrations.AddIndex(
            model_name="binding",
            index=models.Index(fields=["channel"], name="binding_by_channel"),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
