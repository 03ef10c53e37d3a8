"""The gateway's forms: the routing playground's, and a routine's. They parse and check
what the person typed.

A message of the person's own is checked by the gateway's one parser
(:func:`chats.gateway.inbound.inbound_parse`), so the playground refuses
exactly what ``POST /gateway/inbound`` refuses, naming the same field. What
depends on the playground's state (how many bindings, a tie) is the
service's to refuse, in :mod:`chats.gateway.playground`.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings

from chats.forms import folder_clean
from chats.gateway.ids import ANY_PEER
from chats.gateway.inbound import FIELDS, InboundError, inbound_parse
from chats.gateway.ladder import (
    CHANNEL_PATTERN,
    ERR_CHANNEL,
    ERR_KIND,
    ERR_KIND_NEEDED,
    ERR_ROLES_NEED_GUILD,
    ERR_WILDCARD_PARENT,
)
from chats.gateway.models import ChannelAccount, DmScope, PeerKind, Routine, RoutineDelivery
from chats.gateway.outbox import sender_channels
from chats.gateway.playground import AGENT_PATTERN, ERR_AGENT, ERR_SCOPE, PlaygroundError
from chats.limits import LIMITS
from chats.models import Conversation, Origin
from chats.personas import personas_for

ERR_TOO_LONG = "is at most %(limit_value)d characters."
# The parser wants a message id; the playground gives each message its own when fired.
CHECKED_AS = "play-check"


def first_error(form: forms.Form) -> PlaygroundError:
    """The form's first fault, as the page shows it: beside its field, or above the form."""
    field, errors = next(iter(form.errors.as_data().items()))
    return PlaygroundError(field, errors[0].messages[0])


def _roles(raw: str) -> list[str]:
    return sorted({role.strip() for role in raw.split(",") if role.strip()})


def _id_field() -> forms.CharField:
    return forms.CharField(
        required=False,
        max_length=LIMITS.inbound_id_chars,
        error_messages={"max_length": ERR_TOO_LONG},
    )


class PlaygroundScopeForm(forms.Form):
    dm_scope = forms.ChoiceField(
        choices=DmScope.choices,
        error_messages={"required": ERR_SCOPE, "invalid_choice": ERR_SCOPE},
    )


class PlaygroundBindingForm(forms.Form):
    """One playground binding. Roles are typed as a list: ``mod, admin``.

    A peer needs its kind; without a peer the kind the page sent is dropped.
    """

    agent = forms.CharField(required=False)
    channel = _id_field()
    account_id = _id_field()
    peer = _id_field()
    peer_kind = forms.CharField(required=False)
    parent_peer = _id_field()
    guild_id = _id_field()
    team_id = _id_field()
    roles = forms.CharField(required=False)

    def clean_agent(self) -> str:
        agent = self.cleaned_data["agent"].lower()
        if not AGENT_PATTERN.match(agent):
            raise forms.ValidationError(ERR_AGENT)
        return agent

    def clean_channel(self) -> str:
        channel = self.cleaned_data["channel"].lower()
        if not CHANNEL_PATTERN.match(channel):
            raise forms.ValidationError(ERR_CHANNEL)
        return channel

    def clean_peer_kind(self) -> str:
        kind = self.cleaned_data["peer_kind"].strip().lower()
        if kind and kind not in PeerKind.values:
            raise forms.ValidationError(ERR_KIND)
        if not self.cleaned_data.get("peer"):
            return ""
        if not kind:
            raise forms.ValidationError(ERR_KIND_NEEDED)
        return kind

    def clean_parent_peer(self) -> str:
        parent = self.cleaned_data["parent_peer"]
        if parent and self.cleaned_data.get("peer", "").strip() == ANY_PEER:
            raise forms.ValidationError(ERR_WILDCARD_PARENT)
        return parent

    def clean_roles(self) -> list[str]:
        roles = _roles(self.cleaned_data["roles"])
        if roles and not self.cleaned_data.get("guild_id"):
            raise forms.ValidationError(ERR_ROLES_NEED_GUILD)
        return roles


class PlaygroundMessageForm(forms.Form):
    """A message of the person's own, written field by field; roles as ``a, b``.

    Only the fields the form sent are given to the parser, as a chat app would
    leave out what it doesn't have. ``cleaned_data["inbound"]`` is the message.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in FIELDS:
            if name != "message_id":
                self.fields[name] = forms.CharField(required=False, strip=False)

    def clean(self) -> dict[str, Any]:
        raw: dict[str, Any] = {
            name: value for name, value in self.cleaned_data.items() if name in self.data
        }
        if "member_roles" in raw:
            raw["member_roles"] = _roles(raw["member_roles"])
        try:
            self.cleaned_data["inbound"] = inbound_parse(raw | {"message_id": CHECKED_AS})
        except InboundError as exc:
            field = exc.field if exc.field in self.fields else None
            self.add_error(field, exc.message)
        return self.cleaned_data


ERR_ROUTINE_NO_SENDER = "Conch can't send to {channel} yet; it sends to: {known}."
ERR_ROUTINE_NOT_YOUR_ACCOUNT = (
    "No {channel} bot account ({account}) is this account's: a routine sends only through "
    "its owner's own. The install's owner adds bot accounts in the admin."
)
ERR_NOT_YOUR_PERSONA_CHOICE = "That persona isn't this account's to use."


class RoutineChecks(forms.ModelForm):
    """What a routine's forms check beyond the model: a peer's chat app is one Conch sends to."""

    def _post_clean(self) -> None:
        # The model's own checks first: the channel is normalised there. (Django's hook,
        # which the stubs leave out.)
        super()._post_clean()  # type: ignore[misc]
        routine = self.instance
        if "channel" in self.errors or routine.deliver != RoutineDelivery.PEER:
            return
        if routine.channel not in sender_channels():
            known = ", ".join(sender_channels()) or "no chat app"
            self.add_error(
                "channel", ERR_ROUTINE_NO_SENDER.format(channel=routine.channel, known=known)
            )
            return
        # Sent through a bot account of the routine's owner's, never another account's bot.
        accounts = ChannelAccount.objects.filter(owner_id=routine.owner_id, channel=routine.channel)
        if routine.account_id:
            accounts = accounts.filter(account_id=routine.account_id)
        if not accounts.exists():
            self.add_error(
                "account_id",
                ERR_ROUTINE_NOT_YOUR_ACCOUNT.format(
                    channel=routine.channel, account=routine.account_id or "any"
                ),
            )


class RoutineAdminForm(RoutineChecks, forms.ModelForm):
    class Meta:
        model = Routine
        fields = [
            "owner",
            "name",
            "schedule",
            "time_zone",
            "agent",
            "folder",
            "mode",
            "text",
            "missed",
            "deliver",
            "target_chat",
            "channel",
            "account_id",
            "peer",
            "paused",
            "created_at",
        ]


class RoutineForm(RoutineChecks, forms.ModelForm):
    """A new routine. The model's ``clean`` refuses a bad schedule or time zone with words,
    beside the field; the folder is checked as a new chat's is."""

    class Meta:
        model = Routine
        fields = [
            "name",
            "schedule",
            "time_zone",
            "agent",
            "folder",
            "mode",
            "text",
            "missed",
            "deliver",
            "target_chat",
            "channel",
            "account_id",
            "peer",
        ]
        labels = {
            "agent": "Persona",
            "text": "Words to run",
            "missed": "After downtime",
            "deliver": "Where the result goes",
            "target_chat": "Your chat",
            "account_id": "Bot account",
        }
        widgets = {
            "text": forms.Textarea(attrs={"rows": 3}),
            "mode": forms.RadioSelect,
            "missed": forms.RadioSelect,
            "deliver": forms.RadioSelect,
        }

    def __init__(self, *args: Any, owner, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.instance.owner = owner
        agent_field = self.fields["agent"]
        target_field = self.fields["target_chat"]
        assert isinstance(agent_field, forms.ModelChoiceField)
        assert isinstance(target_field, forms.ModelChoiceField)
        agent_field.empty_label = None
        agent_field.queryset = personas_for(owner)  # only the personas this account may use
        agent_field.error_messages["invalid_choice"] = ERR_NOT_YOUR_PERSONA_CHOICE
        # A chat of yours, never a routine's own run.
        target_field.queryset = (
            Conversation.objects.filter(owner=owner, archived=False)
            .exclude(origin=Origin.ROUTINE)
            .order_by("-last_interaction_at")
        )
        self.fields["target_chat"].required = False
        self.fields["deliver"].initial = RoutineDelivery.RUN
        self.fields["time_zone"].initial = settings.CONCH_TIME_ZONE  # the person's own

    def clean_folder(self) -> str:
        return folder_clean(self.cleaned_data["folder"])
