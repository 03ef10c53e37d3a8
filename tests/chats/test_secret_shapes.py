"""Secret shapes come from a maintained set (gitleaks' rules, vendored in chats/data/gitleaks.toml).

The corpus is gitleaks' own true positives (tests/fixtures/gitleaks_samples.json, extracted by
tests/fixtures/gitleaks_samples.py from gitleaks' rule generators at the commit it names), plus
the shapes once seen crossing between chats. Every one goes through ``scrub_secrets``, the one entry point.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chats import secretshapes
from chats.quoting import REDACTED, quote, scrub_secrets

SAMPLES = json.loads((Path(__file__).parents[1] / "fixtures" / "gitleaks_samples.json").read_text())

# Samples the extractor cuts from a longer context, or that gitleaks finds only with a file's path:
# gitleaks' own rules don't find them as one line either (checked below, so the list stays true).
NOT_ONE_LINE = {
    '"type": "service_account"',  # a key file's marker: judged with the rest of the file
    'value: "sq0csp-0p9h7g6f4s3s3s3-4a3ardgwa6ADRDJDDKUFYDYDYDY"',  # gitleaks' own rule doesn't find it alone either
}

# These crossed before. Values made here; the AWS pair's is shaped like AWS's own example.
ISSUE_SHAPES = {
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYzKQ3Lm9Nv8Tq": "wJalrXUtnFEMI",
    "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzKQ3Lm9Nv8Tq": "wJalrXUtnFEMI",
    "export AWS_SECRET_ACCESS_KEY='9dk3LmQ0pZr8Xw2Vn5Bt7Yc1Hs4Gf6Ja0Ke3Uo9I'": "9dk3LmQ0",
    "the app token is xapp-1-A052FGTS2DL-5171572773297-610b6a11f4b7eb819e87b767d80e6575": "xapp-1-A052",
    "post to https://hooks.slack.com/services/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 now": (
        "qW3rT5yU7iO9"
    ),
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGXk2p8BCAC7\n-----END PGP PRIVATE KEY BLOCK-----": (
        "lQOYBGXk2p8BCAC7"
    ),
    '{"dbPassword": "Tr0ub4dor&3-horse"}': "Tr0ub4dor",
    "client.secret=Zx81kQm2Pq0Lw7Rn": "Zx81kQm2",
}

# Secrets in pieces. A private key's second half (body and END, no BEGIN), and a
# token with an invisible inside it: the text and a part of it that must not cross.
_BODY = (
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "9z+40RQzuVaE8AkAFmxZzow3x+VJYKdjykkJ0iT9wCS0DRTXu269V264Vf/3jvre\n"
    "Zw==\n"
)
PIECES_SHAPES = {
    "and the rest of it:\n" + _BODY + "-----END RSA PRIVATE KEY-----": "VTLw7onLRnrq0",
    _BODY + "-----END OPENSSH PRIVATE KEY-----\nthat's all": "9z+40RQzuVaE8",
    "-----END PRIVATE KEY-----": "-----END PRIVATE KEY-----",
    "ghp_16C7e42F292c6912E\u200b7710c838347Ae178B4a": "ghp_16C7e42F292c6912E",
    "token ghp_16C7e42F292c6912E\u2060\u00ad7710c838347Ae178B4a here": "7710c838347Ae178B4a",
    "ｇｈｐ＿16C7e42F292c6912E7710c838347Ae178B4a": "16C7e42F292c6912E",
    "sk-proj-\u200dAbCdEfGhIjKlMnOpQrStUvWx": "AbCdEfGhIjKlMnOp",
}


def _secrets_in(text: str) -> list[str]:
    return [text[a:b] for a, b in secretshapes.secret_spans(text)]


def test_every_gitleaks_rule_but_a_known_few_is_read():
    assert len(secretshapes.rules()) >= 200
    assert secretshapes.SKIPPED == ["pkcs12-file"]  # a rule about file names only


def test_gitleaks_own_samples_are_taken_out():
    literal = [s["text"] for s in SAMPLES["samples"] if s["kind"] == "literal"]
    assert len(literal) >= 200
    crossed = []
    for text in literal:
        found = _secrets_in(text)
        if text in NOT_ONE_LINE:
            assert not found, f"{text!r} is found now: take it off NOT_ONE_LINE"
            continue
        assert found, text
        out = scrub_secrets(text)
        crossed += [secret for secret in found if secret in out]
    assert crossed == []


@pytest.mark.parametrize(
    "sample", [s for s in SAMPLES["samples"] if s["kind"] == "pair"], ids=lambda s: s["identifier"]
)
def test_a_known_secret_in_gitleaks_shapes_is_taken_out(sample):
    secret, ident = sample["secret"], sample["identifier"]
    # Some of the ways gitleaks' GenerateSampleSecrets wraps a secret (cmd/generate/config/utils).
    for shape in (
        f'{ident}Token = "{secret}"',
        f"{ident}_token: {secret}",
        f'{{\n    "{ident}_token": "{secret}"\n}}',
        f"{ident.upper()}_TOKEN={secret}",
    ):
        assert secret not in scrub_secrets(shape), shape


@pytest.mark.parametrize("text,fragment", [*ISSUE_SHAPES.items(), *PIECES_SHAPES.items()])
def test_the_shapes_once_seen_crossing_are_taken_out(text, fragment):
    out = scrub_secrets(text)
    assert fragment not in out and REDACTED in out
    assert fragment not in quote(out)  # quoted last, the invisible written as a space


def test_words_without_a_secret_keep_their_invisibles_and_full_width_letters():
    for text in ("ｗｉｄｅ words", "a\u200bb", "soft\u00adhyphen", "emoji \u2764\ufe0f"):
        assert scrub_secrets(text) == text


def test_a_secret_in_words_of_many_lines_takes_out_only_the_secret():
    text = "Grüße,\nthe key is ghp_16C7e42F292c6912E\u200b7710c838347Ae178B4a\n\tthanks"
    assert scrub_secrets(text) == "Grüße,\nthe key is [redacted]\n\tthanks"


def test_a_file_named_like_a_secret_in_a_tools_message_is_no_secret():
    said = "cat: /srv/owner/owner-secret.txt: No such file or directory"
    assert scrub_secrets(said) == said
    # A setting whose last part is a secret's name still is one, and so is "password = …".
    assert scrub_secrets("db.password: hunter22") == "db.password: [redacted]"
    assert scrub_secrets("client.secret=Zx81kQm2Pq0Lw7Rn") == "client.secret=[redacted]"
    assert scrub_secrets("secret.txt = Zx81kQm2Pq0Lw7Rn") == "secret.txt = [redacted]"


def test_ordinary_words_are_left_alone():
    for text in (
        "the secretary is away",
        "max_tokens: 800",
        "set the token limit higher",
        "read the password policy in docs/security.md",
        "commit 4b825dc642cb6eb9a060e54bf8d69288fbee4904 fixed it",
    ):
        assert scrub_secrets(text) == text
