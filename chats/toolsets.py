"""A persona's two tool sets: one for the owner's own chats, one for chats with someone else's words.

A chat has someone else's words in it once a message from anyone but the owner
came in (its taint is ``person``), or when it belongs to an outside agent or
another app. From its next step on it gets the persona's second set, which by
default is empty: it can only answer in words. Where a persona does give
strangers tools, they work in the persona's own folder (never the owner's default
workspace), commands always run in the sandbox, and each tool can be made to ask
the owner first.

This module holds the rule alone; ``chats.tools.registry.tools_offered`` applies
it, the runtime asks it for the folder and the sandbox, and the gateway's
playground and the chat page show it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from chats.models import Agent, Conversation, McpStatus, McpTool, Origin, Taint
from chats.refusals import NO_FOLDER_OF_ITS_OWN, NOT_IN_SET

# A persona's tools from its MCP servers are named mcp__<server>__<tool> (chats.mcp.servers);
# none of Conch's own may be. Each is in a set only where the owner ticked it for that set.
MCP_PREFIX = "mcp__"

OWNERS = "owner"
STRANGERS = "strangers"

# Chats that are someone else's by where they come from, whatever their taint.
SOMEONE_ELSES_ORIGINS = (Origin.PEER, Origin.CLIENT)

WHY_OWNERS = "your own chat: the persona's tools for you"
WHY_STRANGERS = "someone else's words are in this chat: the persona's tools for other people"
WORDS_ONLY = "answers in words only"

ERR_NOT_IN_SET = NOT_IN_SET.model
ERR_NO_FOLDER_OF_ITS_OWN = NO_FOLDER_OF_ITS_OWN.model


@dataclass(frozen=True)
class ToolSet:
    """Which tools a chat may be offered, and how they run."""

    kind: str  # OWNERS or STRANGERS
    why: str
    persona: str
    # None: every tool; otherwise only these names.
    names: frozenset[str] | None
    # Tools that ask the owner first here, whatever the chat's mode.
    ask_first: frozenset[str] = frozenset()
    # The folder its tools work in ("" = the reply's own folder), and whether that
    # folder is refused (the persona has none of its own).
    folder: str = ""
    folder_refused: bool = False
    # Commands run in the sandbox or not at all, whatever CONCH_SANDBOX says.
    sandbox_required: bool = False
    # The persona's MCP tools ticked for this set; the only ones of theirs it allows.
    mcp: frozenset[str] = frozenset()

    def allows(self, tool_name: str) -> bool:
        if tool_name.startswith(MCP_PREFIX):
            return tool_name in self.mcp
        return self.names is None or tool_name in self.names

    def refusal(self, tool_name: str, *, uses_folder: bool) -> str:
        """Why ``tool_name`` may not run in a chat with this set, in words; "" when it may."""
        if not self.allows(tool_name):
            return ERR_NOT_IN_SET.format(tool=tool_name, persona=self.persona)
        if uses_folder and self.folder_refused:
            return ERR_NO_FOLDER_OF_ITS_OWN.format(
                tool=tool_name, persona=self.persona, folder=self.folder or "none"
            )
        return ""

    @property
    def for_strangers(self) -> bool:
        return self.kind == STRANGERS

    def summary(self) -> str:
        """The set in a few words, as the chat page and the playground show it."""
        if self.names is None:
            return "every tool"
        if not self.names and not self.mcp:
            return WORDS_ONLY
        return ", ".join(sorted(self.names | self.mcp))


def has_someone_elses_words(conversation: Conversation) -> bool:
    return conversation.taint == Taint.PERSON or conversation.origin in SOMEONE_ELSES_ORIGINS


def tool_set(agent: Agent, *, for_strangers: bool) -> ToolSet:
    """The persona's set for its owner's chats, or for chats with other people."""
    mcp, mcp_asking = _mcp_ticked(agent, for_strangers=for_strangers)
    if not for_strangers:
        allowed = agent.allowed_tools or []
        return ToolSet(
            kind=OWNERS,
            why=WHY_OWNERS,
            persona=agent.slug,
            names=frozenset(allowed) if allowed else None,
            mcp=mcp,
        )
    folder = agent.workspace
    return ToolSet(
        kind=STRANGERS,
        why=WHY_STRANGERS,
        persona=agent.slug,
        names=frozenset(agent.stranger_tools or []),
        # An MCP tool that asks first asks the owner each time in other people's chats.
        ask_first=frozenset(agent.stranger_tools_ask_first or []) | mcp_asking,
        folder=folder,
        folder_refused=is_owners_default_workspace(folder),
        sandbox_required=True,
        mcp=mcp,
    )


def _mcp_ticked(agent: Agent, *, for_strangers: bool) -> tuple[frozenset[str], frozenset[str]]:
    """The persona's MCP tools ticked for this set, and of those the ones that ask first.

    Only a working server's tools whose schema could be read: a failing server offers none.
    """
    if agent.pk is None:
        return frozenset(), frozenset()
    rows = McpTool.objects.filter(
        server__agent_id=agent.pk, server__enabled=True, server__status=McpStatus.OK, problem=""
    )
    rows = rows.filter(for_strangers=True) if for_strangers else rows.filter(for_owner=True)
    found = list(rows.values_list("call_name", "asks_first"))
    return frozenset(n for n, _ in found), frozenset(n for n, asks in found if asks)


def tool_set_for(conversation: Conversation) -> ToolSet:
    """The set this chat has now: read from the chat as it is, not as the reply began."""
    return tool_set(conversation.agent, for_strangers=has_someone_elses_words(conversation))


def is_owners_default_workspace(folder: str) -> bool:
    """Whether ``folder`` is, holds or lies inside the owner's default workspace."""
    if not folder:
        return True
    mine = _real(settings.CONCH_WORKSPACE)
    theirs = _real(folder)
    return theirs == mine or mine in theirs.parents or theirs in mine.parents


def _real(folder: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(os.path.expanduser(folder)))
