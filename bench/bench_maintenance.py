"""Gateway maintenance over 100,000 sessions and 2,000,000 entries on SQLite.

Judged by: the wall time of one maintenance run (target ≤ 60 s) and its peak
memory, which must stay flat as the store grows: the same run over a store a
tenth the size (10,000 sessions, 200,000 entries) is measured too, and the
ratio of the two peaks is printed (flat ≈ 1x; holding the store would be ~10x).

The store is a believable one: 30% of the sessions were last touched 40 days
ago (pruned, but for a few pinned and a few working ones, which are kept), 1%
are long (600 entries each, compacted to the cap of 500), the rest are short.
Each person's message and the answer to it are one reply (a ``Turn``) with
one step; each message came in with its receipt (``InboundRecord``) and each
answer went out through the outbox; one session in fifty started a task. So
a pruned session takes its replies, steps and tasks with it, and the old
receipts and sent replies are pruned too, as in a store that has been used
(Without them the run was 1.3x quicker than a real one).
It is built with bulk inserts into a throwaway CONCH_HOME, with the search
index's triggers set aside and the index filled once at the end (as a
migrate would), and each run is a fresh process, so its peak RSS
(``ru_maxrss``) is the run's own.

    .venv/bin/python bench/bench_maintenance.py [--only-large]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _setup import throwaway_home

HERE = Path(__file__).resolve().parent
TARGET_S = 60.0
LARGE = (100_000, 2_000_000)
SMALL = (10_000, 200_000)
OLD_SHARE = 0.30
LONG_SHARE = 0.01
LONG_ENTRIES = 600
ENTRY_BATCH = 50_000
TASK_EVERY = 50  # one session in this many started a task


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def build(sessions: int, entries: int) -> dict:
    """Fill this process's fresh database. Returns what it made."""
    from django.db import connection, transaction
    from django.utils import timezone

    from chats.models import Conversation, Origin, Status
    from chats.runtime.chats import default_agent
    from chats.signin import owner_ensure
    from together import fulltext

    owner = owner_ensure()
    agent = default_agent()
    now = timezone.now()
    old = now - timezone.timedelta(days=40)
    recent = now - timezone.timedelta(days=1)
    n_old = int(sessions * OLD_SHARE)
    n_long = int(sessions * LONG_SHARE)
    kept_old = max(1, n_old // 100)  # of the old ones: this many pinned, this many working

    def session(i: int) -> Conversation:
        is_old = i < n_old
        return Conversation(
            owner=owner,
            agent=agent,
            title=f"Telegram: p{i}",
            folder=agent.workspace,
            public_id=f"c_m{i}",
            origin=Origin.CHAT_APP,
            origin_channel="telegram",
            session_key=f"agent:main:dm:telegram:p{i}",
            pinned=is_old and i < kept_old,
            status=Status.WORKING if is_old and kept_old <= i < 2 * kept_old else Status.IDLE,
            session_started_at=old if is_old else recent,
            last_interaction_at=old if is_old else recent,
        )

    start = time.perf_counter()
    for first in range(0, sessions, 5_000):
        Conversation.objects.bulk_create(
            [session(i) for i in range(first, min(sessions, first + 5_000))], batch_size=5_000
        )
    ids = list(Conversation.objects.order_by("pk").values_list("pk", flat=True))
    # The long sessions are recent ones (compacted, not pruned); the rest share what is left.
    long_ids = set(ids[n_old : n_old + n_long])
    rest = entries - n_long * LONG_ENTRIES
    short_ids = [pk for pk in ids if pk not in long_ids]
    per, extra = divmod(rest, len(short_ids))

    stamps = {
        True: connection.ops.adapt_datetimefield_value(old),
        False: connection.ops.adapt_datetimefield_value(recent),
    }
    sql = {
        "entry": "INSERT INTO chats_entry (conversation_id, turn_id, seq, role, kind, text, data, "
        "created_at) VALUES (?, ?, ?, ?, 'message', ?, '{}', ?)",
        "turn": "INSERT INTO chats_turn (id, conversation_id, number, state, started_by, lane, "
        "chain_id, folder, place, started_at, ended_at, step_family, files_changed, unwatched, "
        "engine_state, end_reason, claimed_by, updated_at, browser_open, notes_said) VALUES "
        "(?, ?, ?, 'completed', 'gateway', 'foreground', '', ?, 'local', ?, ?, '', '[]', 0, "
        "'{}', '', '', ?, 0, '{}')",
        "step": "INSERT INTO chats_step (turn_id, number, tool, family, effect, args, result, "
        "error, files, started_at, ended_at, process_mark, changes) VALUES "
        "(?, 1, 'run_command', 'running a command', 'read', '{\"command\": \"make deploy-status\"}', "
        "'deploy: green', '', '[]', ?, ?, '', '[]')",
        "receipt": "INSERT INTO gateway_inboundrecord (channel, account_id, message_id, "
        "session_key, agent_slug, rule, outcome, shared_dm, received_at, conversation_id, reason) "
        "VALUES ('telegram', 'bot', ?, ?, 'main', 'dm', 'routed', 0, ?, ?, '')",
        "outbox": "INSERT INTO gateway_outboxmessage (channel, account_id, target, text, state, "
        "attempts, parts_sent, next_attempt_at, last_error, created_at, sent_at, "
        "conversation_id, turn_id) VALUES ('telegram', 'bot', '{}', ?, 'sent', 1, 1, ?, '', ?, ?, "
        "?, ?)",
        "task": "INSERT INTO chats_task (public_id, parent_id, title, prompt, state, result, "
        "reason, created_at, started_at, ended_at) VALUES (?, ?, 'Check the deploy', '', "
        "'done', 'It is green.', '', ?, ?, ?)",
    }
    words = ("Can you check the deploy?", "Done: the deploy is green.")

    def rows():
        """Each session's messages, two to a reply, with what a reply leaves behind."""
        turn_id = 0
        for index, pk in enumerate(ids):
            count = LONG_ENTRIES if pk in long_ids else per + (1 if index < extra else 0)
            stamp = stamps[index < n_old]
            key = f"agent:main:dm:telegram:p{index}"
            if index % TASK_EVERY == 0:
                yield "task", (f"t_m{index}", pk, stamp, stamp, stamp)
            for seq in range(1, count + 1):
                if seq % 2:  # the person's message opens a reply
                    turn_id += 1
                    yield (
                        "turn",
                        (turn_id, pk, (seq + 1) // 2, agent.workspace, stamp, stamp, stamp),
                    )
                    yield "step", (turn_id, stamp, stamp)
                    yield "receipt", (f"{pk}-{seq}", key, stamp, pk)
                    role = "person"
                else:
                    yield "outbox", (words[0], stamp, stamp, stamp, pk, turn_id)
                    role = "assistant"
                yield "entry", (pk, turn_id, seq, role, f"{words[seq % 2]} ({seq})", stamp)

    made = dict.fromkeys(sql, 0)
    with connection.cursor() as cursor:
        for statement in fulltext.SQLITE_REMOVE[:-1]:  # the triggers, not the table
            cursor.execute(statement)
        raw = cursor.connection
        batches: dict[str, list[tuple]] = {table: [] for table in sql}
        with transaction.atomic():
            for table, row in rows():
                batch = batches[table]
                batch.append(row)
                if len(batch) == ENTRY_BATCH:
                    raw.executemany(sql[table], batch)
                    made[table] += len(batch)
                    batch.clear()
            for table, batch in batches.items():  # the foreign keys are checked at commit
                raw.executemany(sql[table], batch)
                made[table] += len(batch)
    fulltext.ensure_sqlite_triggers(connection)  # the triggers back, the index filled once
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return {
        "sessions": len(ids),
        "entries": made["entry"],
        "made": made,
        "old": n_old,
        "long": n_long,
        "seconds": time.perf_counter() - start,
    }


def _time_the_plugins() -> dict[str, list[float]]:
    """Time what other apps plug into a run (before-delete hooks, event watchers), so the
    report can say where the time goes. Each is wrapped, not changed."""
    from chats import events, hooks

    spent: dict[str, list[float]] = {}

    def timed(kind: str, fn):
        name = f"{kind} {fn.__module__}.{getattr(fn, '__qualname__', fn)}"
        spent[name] = [0.0, 0]

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name][0] += time.perf_counter() - start
                spent[name][1] += 1

        return wrapper

    hooks.before_delete_hooks[:] = [
        timed("before-delete hook", h) for h in hooks.before_delete_hooks
    ]
    with events._subscribers_lock:
        events._subscribers[:] = [timed("event watcher", s) for s in events._subscribers]
    return spent


def run() -> dict:
    """One maintenance run in this (fresh) process: its wall time and memory."""
    from django.db import connection

    from chats.gateway.maintenance import maintenance_run
    from chats.models import Conversation, Entry

    spent = _time_the_plugins()
    Conversation.objects.exists()  # connect, and import what a run imports, before measuring
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        journal = cursor.fetchone()[0]
    before = _rss_mb()
    start = time.perf_counter()
    report = maintenance_run()
    wall = time.perf_counter() - start
    peak = _rss_mb()
    return {
        "wall": wall,
        "rss_before": before,
        "rss_peak": peak,
        "journal": journal,
        "report": report.lines()[:4],
        "plugins": spent,
        "sessions_after": Conversation.objects.count(),
        "entries_after": Entry.objects.count(),
    }


def _child(home: Path, *args: str) -> dict:
    env = {**os.environ, "CONCH_HOME": str(home), "DATABASE_URL": "", "REDIS_URL": ""}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(sessions: int, entries: int) -> dict:
    home = throwaway_home("conch-bench-maint-")
    try:
        built = _child(home, "--child-build", str(sessions), str(entries))
        ran = _child(home, "--child-run")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return {"built": built, "ran": ran}


def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conch.settings")
    sys.path.insert(0, str(HERE.parent))
    import django

    django.setup()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only-large", action="store_true")
    parser.add_argument("--child-build", nargs=2, type=int, metavar=("SESSIONS", "ENTRIES"))
    parser.add_argument("--child-run", action="store_true")
    args = parser.parse_args()

    if args.child_build:
        _django()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        print(json.dumps(build(*args.child_build)))
        return
    if args.child_run:
        _django()
        print(json.dumps(run()))
        return

    sizes = [LARGE] if args.only_large else [SMALL, LARGE]
    results = {}
    for sessions, entries in sizes:
        result = measure(sessions, entries)
        results[(sessions, entries)] = result
        built, ran = result["built"], result["ran"]
        made = built["made"]
        print(
            f"store: {built['sessions']:,} sessions, {built['entries']:,} entries "
            f"({built['old']:,} last touched 40 days ago, {built['long']:,} of {LONG_ENTRIES} entries), "
            f"{made['turn']:,} replies, {made['step']:,} steps, {made['task']:,} tasks, "
            f"{made['receipt']:,} receipts, {made['outbox']:,} sent replies; "
            f"built in {built['seconds']:.1f} s; SQLite ({ran['journal']})"
        )
        for line in ran["report"]:
            print(f"  {line}")
        print(f"  after: {ran['sessions_after']:,} sessions, {ran['entries_after']:,} entries")
        for name, (seconds, calls) in ran["plugins"].items():
            if calls:
                print(
                    f"  of which {name}: {seconds:.1f} s ({calls:,} calls, {seconds / calls * 1000:.2f} ms each)"
                )
        growth = ran["rss_peak"] - ran["rss_before"]
        print(
            f"  wall time: {ran['wall']:.1f} s (target ≤ {TARGET_S:.0f} s; ratio to target "
            f"{ran['wall'] / TARGET_S:.2f}x); peak RSS {ran['rss_peak']:.0f} MB, "
            f"{growth:.0f} MB above the process before the run"
        )
    if len(results) == 2:
        small, large = results[SMALL]["ran"], results[LARGE]["ran"]
        print(
            f"memory flat as the store grows 10x: peak RSS {small['rss_peak']:.0f} MB → "
            f"{large['rss_peak']:.0f} MB, ratio {large['rss_peak'] / small['rss_peak']:.2f}x "
            f"(growth during the run {small['rss_peak'] - small['rss_before']:.0f} → "
            f"{large['rss_peak'] - large['rss_before']:.0f} MB)"
        )
        print(
            f"time as the store grows 10x: {small['wall']:.1f} s → {large['wall']:.1f} s, "
            f"ratio {large['wall'] / small['wall']:.1f}x"
        )
    large = results[LARGE]["ran"]
    wall = large["wall"]
    flat = (
        f", peak RSS {large['rss_peak'] / results[SMALL]['ran']['rss_peak']:.2f}x the "
        "10x-smaller store's"
        if SMALL in results
        else ""
    )
    print(
        f"maintenance of {LARGE[0]:,} sessions and {LARGE[1]:,} entries with their replies, "
        f"steps, tasks and receipts: {wall:.1f} s (goal ≤ {TARGET_S:.0f} s, "
        f"{wall / TARGET_S:.2f}x of goal), peak RSS {large['rss_peak']:.0f} MB{flat} "
        f"{'PASS' if wall <= TARGET_S else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
