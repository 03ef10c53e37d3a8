"""Two maintenance runs at once on the real PostgreSQL never over-compact (issue 13, item 9).

Every runner starts a maintenance run, so two processes run one at the same time. Here the
second has counted a long session's entries (700, over the cap of 500) and is held there
until the first, in another process, has compacted it. Without the re-read under the chat's
lock the second folded the first one's recap and 200 of the entries the cap keeps.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.scaleout.processes import MANAGE, REPO, manage_ok, wait_until

SEED = """
import json
from chats.gateway.models import SessionOrigin
from chats.models import Entry, EntryRole
from chats.runtime.chats import conversation_create
from chats.signin import owner_ensure
chat = conversation_create(owner=owner_ensure(), title="Long", origin="chat_app",
                           origin_channel="telegram")
chat.session_key = "agent:main:dm:telegram:long"
chat.save(update_fields=["session_key"])
SessionOrigin.objects.create(conversation=chat, chat_type="dm", channel="telegram", peer="long")
Entry.objects.bulk_create(
    Entry(conversation=chat, seq=n, role=EntryRole.PERSON, text=f"line {n}.")
    for n in range(1, 701)
)
print(json.dumps({"pk": chat.pk}))
"""

# The second run: counted, then held until the first run is done.
HELD = """
import pathlib, time
from chats.gateway import maintenance
real = maintenance.session_compact
def held(**kwargs):
    pathlib.Path({counted!r}).write_text("counted")
    while not pathlib.Path({first_done!r}).exists():
        time.sleep(0.05)
    return real(**kwargs)
maintenance.session_compact = held
report = maintenance.maintenance_run()
print("compacted", report.compacted, "deferred", report.compaction_deferred)
"""

FIRST = """
import pathlib
from chats.gateway.maintenance import maintenance_run
report = maintenance_run()
print("compacted", report.compacted, "deferred", report.compaction_deferred)
pathlib.Path({first_done!r}).write_text("done")
"""

AFTER = """
import json
from chats.models import Entry, EntryKind
entries = Entry.objects.filter(conversation_id={pk})
recap = entries.get(kind=EntryKind.RECAP)
print(json.dumps({{"count": entries.count(), "recaps": entries.filter(kind=EntryKind.RECAP).count(),
  "compacted": recap.data["compacted"], "first_kept": min(e.seq for e in entries if e.kind != EntryKind.RECAP)}}))
"""


def _shell(code: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(MANAGE), "shell", "-c", code],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_maintenance_runs_at_once_compact_a_session_once(scaleout, tmp_path):
    env = scaleout.env
    manage_ok("migrate", "--noinput", "-v0", env=env, timeout=120)
    seeded = manage_ok("shell", "-c", SEED, env=env, timeout=120)
    pk = json.loads(seeded.stdout.strip().splitlines()[-1])["pk"]
    counted, first_done = tmp_path / "counted", tmp_path / "first_done"

    second = _shell(HELD.format(counted=str(counted), first_done=str(first_done)), env)
    wait_until(counted.exists, timeout=120, what="the second run to count the entries")
    first = _shell(FIRST.format(first_done=str(first_done)), env)
    out_first, err_first = first.communicate(timeout=120)
    out_second, err_second = second.communicate(timeout=120)
    assert first.returncode == 0, err_first
    assert second.returncode == 0, err_second
    assert out_first.strip().splitlines()[-1] == "compacted 1 deferred 0"
    assert out_second.strip().splitlines()[-1] == "compacted 0 deferred 1"

    after = json.loads(
        manage_ok("shell", "-c", AFTER.format(pk=pk), env=env).stdout.strip().splitlines()[-1]
    )
    # One recap of the 201 oldest, and the most recent 499 untouched: the cap, not less.
    assert after == {"count": 500, "recaps": 1, "compacted": 201, "first_kept": 202}
