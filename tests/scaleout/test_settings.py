"""Conch's settings for PostgreSQL and Redis: they work, and a bad value is named."""

from __future__ import annotations

import pytest

from tests.scaleout.processes import manage, manage_ok, process_env


@pytest.mark.scaleout
def test_conch_checks_and_migrates_on_postgresql(scaleout_empty):
    checked = manage_ok("check", "--database", "default", env=scaleout_empty.env)
    assert "ERRORS" not in checked.stderr, checked.stderr  # warnings may come and go

    manage_ok("migrate", "--noinput", "-v0", env=scaleout_empty.env)

    with scaleout_empty.connect() as conn:
        engine = conn.execute("SELECT version()").fetchone()[0]
        applied = conn.execute(
            "SELECT count(*) FROM django_migrations WHERE app = 'chats'"
        ).fetchone()[0]
    assert engine.startswith("PostgreSQL")
    assert applied >= 1
    shown = manage_ok("showmigrations", "--plan", env=scaleout_empty.env)
    assert "[ ]" not in shown.stdout, shown.stdout


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("DATABASE_URL", "nonsense", "DATABASE_URL is not a database URL"),
        ("DATABASE_URL", "postgress://postgres@127.0.0.1/x", "DATABASE_URL is not a database URL"),
        ("DATABASE_URL", "mysql://conch@127.0.0.1/conch", "DATABASE_URL must be a PostgreSQL URL"),
        ("CONCH_LOG_LEVEL", "LOUD", "CONCH_LOG_LEVEL must be one of debug, info, warning"),
        ("REDIS_URL", "http://127.0.0.1:6379/0", "REDIS_URL must start with redis://"),
        ("CONCH_SUBAGENT_LANE", "abc", "CONCH_SUBAGENT_LANE must be a whole number"),
        ("CONCH_SUBAGENT_LANE", "0", "CONCH_SUBAGENT_LANE must be at least 1"),
        ("CONCH_DEBUG", "maybe", "CONCH_DEBUG must be true or false"),
        ("CONCH_SANDBOX", "sometimes", "CONCH_SANDBOX must be one of auto, off, required"),
        (
            "CONCH_TELEGRAM_API_BASE",
            "file:///etc/passwd",
            "CONCH_TELEGRAM_API_BASE must be an http:// or https:// address",
        ),
        ("CONCH_TIME_ZONE", "Mars/Olympus_Mons", "CONCH_TIME_ZONE must be a time zone name"),
        ("CONCH_OUTBOX_MAX_ATTEMPTS", "0", "CONCH_OUTBOX_MAX_ATTEMPTS must be at least 1"),
    ],
)
def test_a_bad_setting_stops_start_up_with_its_name(tmp_path, variable, value, message):
    done = manage("check", env=process_env(tmp_path, **{variable: value}), timeout=30)
    assert done.returncode != 0
    assert message in done.stderr
