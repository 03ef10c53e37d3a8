"""bench/bench_streaming.py --redis runs end to end: two servers on PostgreSQL and Redis.

No speed is judged here (see tests/bench/test_bench_streaming.py); the bench must
report the tabs of both servers and drop its database and Redis keys.
"""

from __future__ import annotations

import re

import psycopg
import pytest
import redis

from tests.bench.test_bench_streaming import bench_checked
from tests.scaleout.conftest import POSTGRES_ADMIN_URL, REDIS_URL

pytestmark = pytest.mark.scaleout


def test_bench_streaming_runs_on_two_servers_and_cleans_up(scaleout_services, tmp_path):
    out = bench_checked(tmp_path, "--redis")
    assert "PostgreSQL + Redis, 2 servers" in out
    assert "tabs on server 1: p50 " in out and "tabs on server 2: p50 " in out
    dropped = re.search(r"databases dropped: ([\w, ]+); \d+ Redis keys under (\S+) removed", out)
    assert dropped, out
    names = dropped.group(1).split(", ")
    assert len(names) == 2  # the seeded template and the run's copy
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        left = admin.execute(
            "SELECT datname FROM pg_database WHERE datname = ANY(%s)", [names]
        ).fetchall()
    assert left == []
    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert list(client.scan_iter(match=f"{dropped.group(2)}*")) == []
    finally:
        client.close()
