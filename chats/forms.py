"""Forms for the workspace: they parse and validate; the services write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django import forms

from chats.limits import LIMITS
from chats.models import Agent, Mode
from chats.secretbox import SecretsKeyError, secret_seal

ERR_FOLDER_MISSING = "There is no folder at {path}."
ERR_FOLDER_NOT_DIR = "{path} is a file, not a folder."
ERR_FOLDER_RELATIVE = "Give the full path of the folder, such as ~/src/app or /srv/site."


def folder_clean(raw: str) -> str:
    """A folder as typed: empty for the persona's own, else a full path to a folder that
    is there, resolved. Raises ValidationError with words."""
    raw = (raw or "").strip()
    if not raw:
        return ""
    path = Path(raw).expanduser()
    if not path.is_absolute():
        raise forms.ValidationError(ERR_FOLDER_RELATIVE)
    if not path.exists():
        raise forms.ValidationError(ERR_FOLDER_MISSING.format(path=raw))
    if not path.is_dir():
        raise forms.ValidationError(ERR_FOLDER_NOT_DIR.format(path=raw))
    return str(path.resolve())


class NewChatForm(forms.Form):
    title = forms.CharField(
        max_length=LIMITS.title_chars,
        required=False,
        help_text="Leave it empty and your first message names the chat.",
        widget=forms.TextInput(attrs={"placeholder": "Fix the login bug", "autocomplete": "off"}),
    )
    folder = forms.CharField(
        max_length=1024,
        required=False,
        help_text="Where it works. Leave it empty for the agent’s own folder.",
        widget=forms.TextInput(attrs={"placeholder": "~/src/app", "autocomplete": "off"}),
    )
    agent = forms.ModelChoiceField(queryset=Agent.objects.all(), empty_label=None)
    mode = forms.ChoiceField(
        choices=Mode.choices,
        initial=Mode.AUTO,
        widget=forms.RadioSelect,
        help_text="Ask: it asks before changing files or running commands. "
        "Auto: it works on its own. Plan: it reads and plans, and changes nothing.",
    )

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)

    def clean_folder(self) -> str:
        return folder_clean(self.cleaned_data["folder"])


class WriteOnlySecretMixin:
    """A ``secret`` field that starts empty and, left empty, keeps the stored value.

    For admin forms of auth profiles and chat-app accounts: a secret is never
    shown again once saved, and saving the form without retyping it loses nothing.
    """

    cleaned_data: dict[str, Any]  # given by the ModelForm it is mixed into
    instance: Any

    def clean_secret(self) -> str:
        value = self.cleaned_data.get("secret") or ""
        if not value and self.instance.pk:
            return self.instance.secret
        try:
            secret_seal(value)  # a key file that can't seal it is said here, not as a 500
        except SecretsKeyError as exc:
            raise forms.ValidationError(str(exc)) from None
        return value
