"""Reads for the gateway: its settings, sessions by key, who the owner is on a channel,
and a persona's own auth profiles."""

from __future__ import annotations

from django.db.models import Exists, Q, QuerySet, Subquery

from chats.gateway.models import ChatType, GatewayConfig, OwnerIdentity
from chats.models import Agent, AuthProfile, Conversation

ERR_NOT_THIS_PERSONAS = "That auth profile isn't this persona's."


def gateway_config() -> GatewayConfig:
    config, _ = GatewayConfig.objects.get_or_create(pk=1)
    return config


def stored_routing_version() -> Subquery:
    """The stored routing version, as a subquery a caller adds to a query it makes anyway."""
    return Subquery(GatewayConfig.objects.filter(pk=1).values("routing_version")[:1])


def session_active(*, agent_id: int, session_key: str, owner=None) -> Conversation | None:
    """The live generation of a session. Always looked up with its agent (and its owner,
    when given), so a message can only ever land in that persona's, that person's chat."""
    chats = Conversation.objects.filter(agent_id=agent_id, session_key=session_key, archived=False)
    if owner is not None:
        chats = chats.filter(owner=owner)
    return chats.select_related("agent").first()


def session_for_inbound(*, agent_id: int, session_key: str, owner, inbound):
    """What a message to a session reads, in one query: its live generation (with its
    agent and its origin), the stored routing version (so a binding changed in another
    process is seen, with no query of its own) and, for a DM, whether the sender is the
    owner. None when the session has no live generation."""
    chats = Conversation.objects.filter(
        agent_id=agent_id, session_key=session_key, archived=False, owner=owner
    ).annotate(routing_version_stored=stored_routing_version())
    if inbound.chat_type == ChatType.DM:
        chats = chats.annotate(
            from_owner=Exists(
                _owner_peers(
                    owner=owner,
                    channel=inbound.channel,
                    account_id=inbound.account_id,
                    peer=inbound.peer,
                )
            )
        )
    # Only what taking a message in reads (anything else loads if asked, and the query
    # count test would see it): compiling the chat's, its agent's and its origin's every
    # column cost more than running the query. A live generation is unique: no order.
    found = chats.select_related("gateway").only(*INBOUND_READS).order_by()[:1]
    return next(iter(found), None)


# The chat's fields and its origin's that a message to a live session reads.
INBOUND_READS = (
    "public_id",
    "owner_id",
    "agent_id",
    "status",
    "taint",
    "mode",
    "last_interaction_at",
    "session_key",
    "gateway__reply_to",
    "gateway__channel",
    "gateway__account_id",
    "gateway__rule",
)


def session_key_taken(*, session_key: str, owner) -> bool:
    """Whether another person's live chat holds this key (keys are unique among live chats)."""
    return (
        Conversation.objects.filter(session_key=session_key, archived=False)
        .exclude(owner=owner)
        .exists()
    )


def session_latest_archived(*, agent_id: int, session_key: str, owner) -> Conversation | None:
    return (
        Conversation.objects.filter(
            agent_id=agent_id, session_key=session_key, archived=True, owner=owner
        )
        .order_by("-session_started_at", "-pk")
        .first()
    )


def someone_elses(*, owner, inbound, from_owner: bool | None = None) -> bool:
    """Whether a message brings someone else's words: a group or thread, or a DM not from
    the owner (``from_owner``, when already read with the session: see
    :func:`session_for_inbound`)."""
    if inbound.chat_type in (ChatType.GROUP, ChatType.THREAD):
        return True
    if inbound.chat_type != ChatType.DM:
        return False
    if from_owner is None:
        from_owner = is_owner_peer(
            owner=owner, channel=inbound.channel, account_id=inbound.account_id, peer=inbound.peer
        )
    return not from_owner


def is_owner_peer(*, owner, channel: str, account_id: str, peer: str) -> bool:
    """Whether ``peer`` on ``channel`` is the owner themself (configured in OwnerIdentity)."""
    return _owner_peers(owner=owner, channel=channel, account_id=account_id, peer=peer).exists()


def _owner_peers(*, owner, channel: str, account_id: str, peer: str) -> QuerySet[OwnerIdentity]:
    return OwnerIdentity.objects.filter(
        Q(account_id="") | Q(account_id=account_id),
        owner=owner,
        channel__iexact=channel,
        peer=peer,
    )


def auth_profiles_for(*, agent: Agent) -> QuerySet[AuthProfile]:
    """One persona's auth profiles: never another's."""
    return AuthProfile.objects.filter(agent=agent).order_by("name")


def auth_profile_for(*, conversation: Conversation, name: str) -> AuthProfile:
    """The named auth profile of the persona this chat belongs to.

    Raises ``AuthProfile.DoesNotExist`` for a name only another persona has,
    so one persona's credentials never reach another's chat, tools or prompt.
    """
    try:
        return AuthProfile.objects.get(agent_id=conversation.agent_id, name=name)
    except AuthProfile.DoesNotExist:
        raise AuthProfile.DoesNotExist(ERR_NOT_THIS_PERSONAS) from None
