"""Routines and their runs: words run on a schedule, each due time claimed once.

``routine_run_once`` (routine, due time) is the claim: with several runners,
the one whose insert succeeds runs that time.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

import chats.gateway.models


class Migration(migrations.Migration):
    dependencies = [
        ("chats", "0006_gateway_app"),
        ("gateway", "0003_binding_peer_kind_and_accounts"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Routine",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "public_id",
                    models.CharField(
                        default=chats.gateway.models.new_routine_id,
                        editable=False,
                        max_length=32,
                        unique=True,
                    ),
                ),
                ("name", models.CharField(max_length=120)),
                (
                    "schedule",
                    models.CharField(
                        error_messages={
                            "blank": "A routine needs a schedule: five fields (minute, hour, day of month, month, day of week), such as 0 8 * * 1-5."
                        },
                        help_text="Cron: minute hour day-of-month month day-of-week, e.g. 0 8 * * 1-5.",
                        max_length=120,
                    ),
                ),
                (
                    "time_zone",
                    models.CharField(
                        default="UTC",
                        error_messages={
                            "blank": "A routine needs a time zone, such as Europe/Berlin or UTC."
                        },
                        help_text="e.g. Europe/Berlin.",
                        max_length=64,
                    ),
                ),
                (
                    "folder",
                    models.CharField(
                        blank=True,
                        help_text="Where it works; empty for the persona's own folder.",
                        max_length=1024,
                    ),
                ),
                (
                    "mode",
                    models.CharField(
                        choices=[("ask", "Ask"), ("auto", "Auto"), ("plan", "Plan")],
                        default="auto",
                        max_length=8,
                    ),
                ),
                ("text", models.TextField(help_text="The words each run starts with.")),
                (
                    "deliver",
                    models.CharField(
                        choices=[
                            ("run", "only its own run, in the chat list"),
                            ("chat", "a chat of yours"),
                            ("peer", "a chat-app peer, through the outbox"),
                        ],
                        default="run",
                        max_length=8,
                    ),
                ),
                (
                    "channel",
                    models.CharField(
                        blank=True, help_text="For results to a chat app.", max_length=32
                    ),
                ),
                ("account_id", models.CharField(blank=True, max_length=128)),
                (
                    "peer",
                    models.CharField(blank=True, help_text="The chat on that app.", max_length=128),
                ),
                (
                    "missed",
                    models.CharField(
                        choices=[
                            ("once", "run once, however many times were missed"),
                            ("skip", "skip them, and wait for the next time"),
                        ],
                        default="once",
                        max_length=8,
                    ),
                ),
                ("paused", models.BooleanField(default=False)),
                ("next_due_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "agent",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="routines",
                        to="chats.agent",
                    ),
                ),
                (
                    "owner",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="routines",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "target_chat",
                    models.ForeignKey(
                        blank=True,
                        help_text="For results to a chat of yours.",
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="chats.conversation",
                    ),
                ),
            ],
            options={
                "ordering": ["name", "pk"],
            },
        ),
        migrations.CreateModel(
            name="RoutineRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("due_at", models.DateTimeField()),
                (
                    "trigger",
                    models.CharField(
                        choices=[
                            ("schedule", "on schedule"),
                            ("caught_up", "once, for times missed while Conch was down"),
                            ("run_now", "Run now"),
                        ],
                        max_length=16,
                    ),
                ),
                ("missed", models.PositiveIntegerField(default=0)),
                (
                    "missed_more",
                    models.BooleanField(
                        default=False, help_text="More were missed than were counted."
                    ),
                ),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("running", "running"),
                            ("completed", "completed"),
                            ("needs_you", "needs you"),
                            ("stopped", "stopped"),
                            ("failed", "failed"),
                            ("interrupted", "interrupted"),
                            ("skipped", "skipped: missed while Conch was down"),
                        ],
                        default="running",
                        max_length=16,
                    ),
                ),
                ("started_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("ended_at", models.DateTimeField(blank=True, null=True)),
                (
                    "result",
                    models.TextField(blank=True, help_text="The run's last words, as delivered."),
                ),
                ("reason", models.TextField(blank=True, help_text="Why it failed or was skipped.")),
                (
                    "conversation",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="chats.conversation",
                    ),
                ),
                (
                    "routine",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="runs",
                        to="gateway.routine",
                    ),
                ),
            ],
            options={
                "ordering": ["-due_at", "-pk"],
            },
        ),
        migrations.AddIndex(
            model_name="routine",
            index=models.Index(fields=["next_due_at"], name="routine_due"),
        ),
        migrations.AddConstraint(
            model_name="routinerun",
            constraint=models.UniqueConstraint(
                fields=("routine", "due_at"), name="routine_run_once"
            ),
        ),
    ]
