"""Session keys: a pure function of where a message came from (seed ch. 1-2).

``agent:<agentId>:<mainKey>``, where the main key is

- a DM, by ``dmScope``: ``dm:shared`` | ``dm:<peer>`` | ``dm:<channel>:<peer>``
  (the default) | ``dm:<channel>:<account>:<peer>``. A peer with an identity
  link is ``linked:<name>`` in the peer's place, so the scope's other parts
  stay: under ``per-channel-peer`` a linked person still has one session per
  channel (``dm:<channel>:linked:<name>``), under ``per-peer`` one in all
  (``dm:linked:<name>``), as OpenClaw's ``identityLinks`` do;
- a group: ``group:<channel>:<group>``, whatever the ``dmScope``;
- a thread: ``thread:<channel>:<parent>:<thread>``, its own session;
- a cron run: ``cron:<job>:<run>``, fresh every run (the run is its message id).

No two origins share a key (:func:`key_part`): each part is escaped (``%`` and
``:``), and a part that would read as one of the key's own words (``shared``,
``linked``) has its first letter escaped, so a DM from ``alice`` on a channel
named ``linked`` is not the linked person ``alice``. The account is normalized,
a DM's peer (and a linked person's name) is lower-cased on every channel, and
group, room and thread ids keep the case their platform gave them
(:func:`chats.gateway.ids.peer_id`).
"""

from __future__ import annotations

from collections.abc import Mapping

from chats.gateway.ids import DIRECT, normalize_account_id, peer_id
from chats.gateway.inbound import Inbound
from chats.gateway.models import ChatType, DmScope

SHARED, LINKED = "shared", "linked"
# Words a key spells itself; a name equal to one is escaped so it can't be read as one.
RESERVED_PARTS = frozenset({SHARED, LINKED})


def key_part(value: str) -> str:
    """One name as a key part: ``%`` and ``:`` escaped, and a reserved word's first letter."""
    if "%" in value or ":" in value:
        value = value.replace("%", "%25").replace(":", "%3A")
    if value in RESERVED_PARTS:
        value = f"%{ord(value[0]):02X}{value[1:]}"
    return value


def main_key_for(
    inbound: Inbound,
    *,
    dm_scope: str = DmScope.PER_CHANNEL_PEER,
    identity_links: Mapping[tuple[str, str], str] | None = None,
) -> str:
    """The conversation's own key, before the agent's namespace.

    ``identity_links`` map ``(channel, peer)``, both lower-cased, to a person's one name.
    """
    raw_channel = inbound.channel
    channel = key_part(raw_channel)
    kind = inbound.chat_type
    if kind == ChatType.GROUP:
        return f"group:{channel}:{key_part(inbound.group_id.strip())}"
    if kind == ChatType.THREAD:
        parent = key_part(inbound.thread_parent.strip())
        return f"thread:{channel}:{parent}:{key_part(inbound.thread_id.strip())}"
    if kind == ChatType.CRON:
        return f"cron:{key_part(inbound.job_id)}:{key_part(inbound.message_id)}"
    if dm_scope == DmScope.SHARED:
        return f"dm:{SHARED}"
    peer = peer_id(DIRECT, inbound.peer)
    linked = identity_links.get((raw_channel.lower(), peer)) if identity_links else None
    who = f"{LINKED}:{key_part(linked.lower())}" if linked else key_part(peer)
    if dm_scope == DmScope.PER_PEER:
        return f"dm:{who}"
    if dm_scope == DmScope.PER_ACCOUNT_CHANNEL_PEER:
        return f"dm:{channel}:{key_part(normalize_account_id(inbound.account_id))}:{who}"
    return f"dm:{channel}:{who}"


def session_key_for(agent_slug: str, main_key: str) -> str:
    return f"agent:{agent_slug}:{main_key}"


def is_shared_dm(inbound: Inbound, dm_scope: str) -> bool:
    """Every DM from anyone in one session: the leak the UI flags in red."""
    return inbound.chat_type == ChatType.DM and dm_scope == DmScope.SHARED
