"""Forms for the workspace: they parse and validate; the services write."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django import forms

from chats.limits import LIMITS
from chats.models import Agent, Mode
from chats.personas import personas_for
from chats.secretbox import SecretsKeyError, secret_seal

ERR_FOLDER_MISSING = "There is no folder at {path}."
ERR_FOLDER_NOT_DIR = "{path} is a file, not a folder."
ERR_FOLDER_RELATIVE = "Give the full path of the folder, such as ~/src/app or /srv/site."
ERR_URL_EMPTY = "Give the server's address, such as http://127.0.0.1:11434/v1."
ERR_URL_SCHEME = "The address must start with http:// or https:// (got “{scheme}://”)."
ERR_URL_PORT = "The address has a port that isn't a number from 1 to 65535."
ERR_URL_NOT = "That isn't an address: give one such as http://127.0.0.1:11434/v1."
ERR_URL_EXTRA = "Give the server's address without a ? or # part, or a name and password in it."
ERR_MODEL_EMPTY = "Pick one of the server's models, or type its name."
ERR_KEY_CHARS = "A key is letters, digits and signs, with no spaces."


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
    # Only the personas this account may use (chats/personas.py): set per form.
    agent = forms.ModelChoiceField(
        queryset=Agent.objects.none(),
        empty_label=None,
        error_messages={"invalid_choice": "That persona isn't this account's to use."},
    )
    mode = forms.ChoiceField(
        choices=Mode.choices,
        initial=Mode.AUTO,
        widget=forms.RadioSelect,
        help_text="Ask: it asks before changing files or running commands. "
        "Auto: it works on its own. Plan: it reads and plans, and changes nothing.",
    )

    def __init__(self, *args, account, **kwargs) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        agent = self.fields["agent"]
        assert isinstance(agent, forms.ModelChoiceField)
        agent.queryset = personas_for(account)

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


def base_url_clean(raw: str) -> str:
    """An address as a person types it, made a model server's base URL: http or https,
    a host, a good port, no trailing slash, and ``/v1`` when it has no path (where
    OpenAI-compatible servers put their API). ``ValueError`` says what is wrong."""
    text = (raw or "").strip()
    if not text:
        raise ValueError(ERR_URL_EMPTY)
    if "://" not in text:
        text = f"http://{text}"
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise ValueError(ERR_URL_SCHEME.format(scheme=parts.scheme))
    if any(c.isspace() for c in text) or not parts.hostname:
        raise ValueError(ERR_URL_NOT)
    try:
        port = parts.port
    except ValueError:
        raise ValueError(ERR_URL_PORT) from None
    if port == 0:
        raise ValueError(ERR_URL_PORT)
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError(ERR_URL_EXTRA)
    path = parts.path.rstrip("/") or "/v1"
    return f"{parts.scheme}://{parts.netloc}{path}"


class ConnectModelForm(forms.Form):
    """Connect a model: a server's address, one of its models, and a key if it needs one.

    The key is never shown again: the field starts empty, and left empty it keeps
    the key already saved for that address (chats/runtime/connect.py)."""

    base_url = forms.CharField(
        label="Address",
        max_length=1024,
        help_text="The server's API address; it usually ends in /v1.",
        widget=forms.TextInput(
            attrs={"placeholder": "http://127.0.0.1:11434/v1", "autocomplete": "off"}
        ),
    )
    model = forms.CharField(
        label="Model",
        max_length=200,
        error_messages={"required": ERR_MODEL_EMPTY},
        widget=forms.TextInput(attrs={"placeholder": "qwen2.5-coder:7b", "autocomplete": "off"}),
    )
    key = forms.CharField(
        label="Key",
        required=False,
        max_length=4096,
        strip=True,
        help_text="Only for a server that needs one (a hosted API). "
        "Leave it empty to keep the key already saved for this address.",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
    )

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.fields["base_url"].error_messages["required"] = ERR_URL_EMPTY

    def clean_base_url(self) -> str:
        try:
            return base_url_clean(self.cleaned_data["base_url"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_key(self) -> str:
        key = self.cleaned_data.get("key") or ""
        if key and not (key.isascii() and key.isprintable() and " " not in key):
            raise forms.ValidationError(ERR_KEY_CHARS)
        if key:
            try:
                secret_seal(key)  # a key file that can't seal it is said here, not as a 500
            except SecretsKeyError as exc:
                raise forms.ValidationError(str(exc)) from None
        return key
