"""This process's writers of a SQLite file go one at a time, in the order they came
(conch/sqlite3/writers.py), and wait for their turn there, not in SQLite's busy handler."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.db import connections, transaction

from conch.sqlite3.writers import WriterQueue, writer_queue

WAIT = 10  # seconds: a test that fails fails at this, never hangs


def test_the_queue_hands_the_lock_to_the_writers_in_the_order_they_asked():
    queue = WriterQueue()
    assert queue.acquire(timeout=WAIT)
    order: list[int] = []
    asked = [threading.Event() for _ in range(3)]

    def writer(n: int) -> None:
        asked[n].set()
        assert queue.acquire(timeout=WAIT)
        order.append(n)
        queue.release()

    threads = []
    for n in range(3):
        threads.append(threading.Thread(target=writer, args=(n,)))
        threads[-1].start()
        assert asked[n].wait(WAIT)
        _wait_until(lambda n=n: len(queue._waiting) == n + 1)
    queue.release()
    for thread in threads:
        thread.join(WAIT)
    assert order == [0, 1, 2]
    assert queue.acquire(timeout=0)  # free again once the last one let go


def test_a_writer_that_gives_up_leaves_the_queue_to_the_others():
    queue = WriterQueue()
    assert queue.acquire(timeout=WAIT)
    assert not queue.acquire(timeout=0.01)  # its turn did not come
    assert not queue._waiting
    queue.release()
    assert queue.acquire(timeout=0)


def _wait_until(condition, timeout: float = WAIT) -> None:
    done = threading.Event()
    for _ in range(int(timeout * 100)):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("gave up waiting")


@pytest.fixture
def on_file(tmp_path, django_db_blocker) -> Iterator[str]:
    """A second database, a real SQLite file with Conch's settings (IMMEDIATE): its own
    connection in each thread, as the server's threads have. The test's own database is
    not touched."""
    django_db_blocker.unblock()
    alias = "writers"
    config = {
        **connections.settings["default"],
        "NAME": str(tmp_path / "writers.sqlite3"),
        "TEST": {"NAME": None},
    }
    connections.settings[alias] = config
    with connections[alias].cursor() as cursor:
        cursor.execute("CREATE TABLE note (id INTEGER PRIMARY KEY, text TEXT)")
    yield alias
    connections[alias].close()
    del connections[alias]
    del connections.settings[alias]
    django_db_blocker.restore()


def _in_thread(target) -> threading.Thread:
    def run() -> None:
        try:
            target()
        finally:
            for conn in connections.all(initialized_only=True):
                conn.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_transaction_waits_for_the_one_before_it_in_the_queue_not_in_sqlite(on_file):
    queue = writer_queue(connections.settings[on_file]["NAME"])
    began = threading.Event()
    wrote: list[str] = []

    def second() -> None:
        with transaction.atomic(using=on_file):
            began.set()
            with connections[on_file].cursor() as cursor:
                cursor.execute("INSERT INTO note (text) VALUES ('second')")
        wrote.append("second")

    with transaction.atomic(using=on_file):
        with connections[on_file].cursor() as cursor:
            cursor.execute("INSERT INTO note (text) VALUES ('first')")
        thread = _in_thread(second)
        _wait_until(lambda: len(queue._waiting) == 1)  # queued behind this transaction
        assert not began.is_set()
    thread.join(WAIT)
    assert wrote == ["second"]
    assert queue.acquire(timeout=0)  # each let go of its turn
    queue.release()


def test_a_write_outside_a_transaction_waits_its_turn_too(on_file):
    queue = writer_queue(connections.settings[on_file]["NAME"])
    wrote = threading.Event()

    def autocommit() -> None:
        with connections[on_file].cursor() as cursor:
            cursor.execute("UPDATE note SET text = 'later'")
        wrote.set()

    with transaction.atomic(using=on_file):
        thread = _in_thread(autocommit)
        _wait_until(lambda: len(queue._waiting) == 1)
        assert not wrote.is_set()
    thread.join(WAIT)
    assert wrote.is_set()


def test_a_rolled_back_or_failed_transaction_lets_go_of_its_turn(on_file):
    queue = writer_queue(connections.settings[on_file]["NAME"])
    with pytest.raises(ZeroDivisionError):
        with transaction.atomic(using=on_file):
            1 / 0  # noqa: B018
    assert queue.acquire(timeout=0)
    queue.release()
    with transaction.atomic(using=on_file):
        transaction.set_rollback(True, using=on_file)
    assert queue.acquire(timeout=0)
    queue.release()


def test_a_connection_closed_in_its_transaction_lets_go_of_its_turn(on_file):
    queue = writer_queue(connections.settings[on_file]["NAME"])
    conn = connections[on_file]
    conn.ensure_connection()
    conn.set_autocommit(True)
    conn._start_transaction_under_autocommit()
    assert not queue.acquire(timeout=0)
    conn.close()
    assert queue.acquire(timeout=0)
    queue.release()


def test_a_commits_hooks_run_in_its_turn_and_the_next_writer_begins_after_them(on_file):
    """What a transaction writes once it commits (its events' numbers) waits behind no
    one, and a hook's own transaction runs in that turn rather than waiting for it."""
    queue = writer_queue(connections.settings[on_file]["NAME"])
    order: list[str] = []

    def write(text: str) -> None:
        with connections[on_file].cursor() as cursor:
            cursor.execute("INSERT INTO note (text) VALUES (%s)", [text])
        order.append(text)

    def next_writer() -> None:
        with transaction.atomic(using=on_file):
            write("next")

    def hook() -> None:
        thread = _in_thread(next_writer)
        threads.append(thread)
        _wait_until(lambda: len(queue._waiting) == 1)  # it came while the hooks run
        with transaction.atomic(using=on_file):
            write("hook, in a transaction of its own")
        assert len(queue._waiting) == 1  # that transaction's commit kept the turn
        write("hook, outside a transaction")

    threads: list[threading.Thread] = []
    with transaction.atomic(using=on_file):
        write("first")
        transaction.on_commit(hook, using=on_file)
    threads[0].join(WAIT)
    assert order == [
        "first",
        "hook, in a transaction of its own",
        "hook, outside a transaction",
        "next",
    ]
    assert queue.acquire(timeout=0)
    queue.release()
