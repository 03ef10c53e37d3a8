"""Session keys: a pure function of where a message came from (seed ch. 1-2).

``agent:<agentId>:<mainKey>``, where the main key is

- a DM, by ``dmScope``: ``dm:shared`` | ``dm:<peer>`` | ``dm:<channel>:<peer>``
  (the default) | ``dm:<channel>:<account>:<peer>``; a peer with an identity
  link is ``dm:linked:<name>`` under every scope but ``shared``;
- a group: ``group:<channel>:<group>``, whatever the ``dmScope``;
- a thread: ``thread:<channel>:<parent>:<thread>``, its own session;
- a cron run: ``cron:<job>:<run>``, fresh every run (the run is its message id).

Each part is escaped (``%`` and ``:``), so no two origins share a key by
smuggling a colon into an id.
"""

from __future__ import annotations

from collections.abc import Mapping

from chats.gateway.inbound import Inbound
from chats.gateway.models import ChatType, DmScope


def _part(value: str) -> str:
    if "%" in value or ":" in value:
        return value.replace("%", "%25").replace(":", "%3A")
    return value


def main_key_for(
    inbound: Inbound,
    *,
    dm_scope: str = DmScope.PER_CHANNEL_PEER,
    identity_links: Mapping[tuple[str, str], str] | None = None,
) -> str:
    """The conversation's own key, before the agent's namespace."""
    channel = _part(inbound.channel)
    kind = inbound.chat_type
    if kind == ChatType.GROUP:
        return f"group:{channel}:{_part(inbound.group_id)}"
    if kind == ChatType.THREAD:
        return f"thread:{channel}:{_part(inbound.thread_parent)}:{_part(inbound.thread_id)}"
    if kind == ChatType.CRON:
        return f"cron:{_part(inbound.job_id)}:{_part(inbound.message_id)}"
    if dm_scope == DmScope.SHARED:
        return "dm:shared"
    if identity_links:
        linked = identity_links.get((inbound.channel, inbound.peer))
        if linked:
            return f"dm:linked:{_part(linked)}"
    peer = _part(inbound.peer)
    if dm_scope == DmScope.PER_PEER:
        return f"dm:{peer}"
    if dm_scope == DmScope.PER_ACCOUNT_CHANNEL_PEER:
        return f"dm:{channel}:{_part(inbound.account_id)}:{peer}"
    return f"dm:{channel}:{peer}"


def session_key_for(agent_slug: str, main_key: str) -> str:
    return f"agent:{agent_slug}:{main_key}"


def is_shared_dm(inbound: Inbound, dm_scope: str) -> bool:
    """Every DM from anyone in one session: the leak the UI flags in red."""
    return inbound.chat_type == ChatType.DM and dm_scope == DmScope.SHARED
