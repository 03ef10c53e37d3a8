"""The assistant's words as the page shows them: Markdown, with code highlighted, made safe.

One path, three maintained libraries:

1. ``markdown-it-py`` parses CommonMark plus tables and strikethrough, with raw
   HTML off (a ``<script>`` in a reply is text) and ``linkify-it-py`` turning bare
   addresses into links: only those written with a scheme or ``www.``, never a file
   name that looks like a domain (:func:`_linkify_strict`). Its own link check already refuses ``javascript:``,
   ``vbscript:``, ``file:`` and ``data:`` links. Images are off: a reply never
   makes the page fetch anything (an image's address can carry what it read out).
2. Pygments colours a fenced block whose language it knows, as classes only
   (the page's CSP forbids inline styles; ``static/code.css`` holds the colours).
3. ``nh3`` (Ammonia) cleans the result against a short list of tags, attributes,
   classes and link schemes, so no path gives a tag, an attribute or a link that
   runs code, whatever a parser bug or a later plugin lets through.

The person's own words are never rendered: they stay plain text.
"""

from __future__ import annotations

import html
import re
from functools import cache

import nh3
from markdown_it import MarkdownIt
from markdown_it.token import Token
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.token import STANDARD_TYPES
from pygments.util import ClassNotFound

__all__ = ["CODE_CSS_SCOPE", "clean", "code_css", "plain_text", "render_markdown"]

# A reply's headings sit under the chat's h1 and the page's h2s.
HEADING_SHIFT = 2
# Where the highlighted code's colours apply (static/code.css).
CODE_CSS_SCOPE = ".md pre.code"

TAGS = {
    "p", "br", "hr", "h3", "h4", "h5", "h6", "strong", "em", "s", "del",
    "code", "pre", "span", "blockquote", "ul", "ol", "li",
    "table", "thead", "tbody", "tr", "th", "td", "a",
}  # fmt: skip
ATTRIBUTES = {
    "a": {"href", "title"},
    "ol": {"start"},
    "code": {"data-lang"},
}
ALIGN_CLASSES = {"align-left", "align-center", "align-right"}
CLASSES = {
    "pre": {"code"},
    "span": {name for name in STANDARD_TYPES.values() if name},
    "th": ALIGN_CLASSES,
    "td": ALIGN_CLASSES,
}
SCHEMES = {"http", "https", "mailto"}
LINK_REL = "noopener noreferrer nofollow"


def _code_block(code: str, lang: str, _attrs: str) -> str:
    """A fenced block: ``<pre class="code"><code>``, coloured by Pygments when it knows the language."""
    name = (lang or "").strip().split()[0] if (lang or "").strip() else ""
    body = html.escape(code)
    if name:
        try:
            lexer = get_lexer_by_name(name)
        except ClassNotFound:
            pass
        else:
            body = highlight(code, lexer, HtmlFormatter(nowrap=True))
    label = f' data-lang="{html.escape(name)}"' if name else ""
    return f'<pre class="code"><code{label}>{body}</code></pre>\n'


WWW = "www."


def _linkify_strict(md: MarkdownIt) -> None:
    """Link only what is written as an address: a scheme (``https://…``, ``mailto:…``) or
    ``www.``. linkify-it's fuzzy links read every file name as a domain (``greet.py``,
    ``README.md`` went to strangers' websites); a bare e-mail address stays text too."""
    linkify = md.linkify
    if linkify is None:  # markdown-it-py[linkify] brings it: a broken install, said plainly
        raise RuntimeError("linkify-it-py is missing: install markdown-it-py[linkify].")
    linkify.set({"fuzzy_link": False, "fuzzy_email": False})
    rest = re.compile(r"^" + linkify.re["src_host_port_strict"] + linkify.re["src_path"], re.I)

    def validate(_linkify, text: str, pos: int) -> int:
        before = pos - len(WWW) - 1
        if before >= 0 and (text[before] == "." or text[before].isalnum()):
            return 0  # foo.www.example: a name that happens to hold "www.", not an address
        found = rest.search(text[pos:])
        return len(found.group(0)) if found else 0

    def normalize(_linkify, match) -> None:
        match.url = "http://" + match.url

    linkify.add(WWW, {"validate": validate, "normalize": normalize})


@cache
def _parser() -> MarkdownIt:
    md = MarkdownIt(
        "commonmark",
        {"html": False, "linkify": True, "typographer": False, "highlight": _code_block},
    )
    md.enable(["table", "strikethrough", "linkify"])
    md.disable("image")
    _linkify_strict(md)
    return md


def _rework(tokens: list[Token]) -> None:
    """Headings one level under the page's; a table column's alignment as a class, not a style."""
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            level = min(6, int(token.tag[1]) + HEADING_SHIFT)
            token.tag = f"h{level}"
        elif token.type in ("th_open", "td_open"):
            style = str(token.attrGet("style") or "")
            if style.startswith("text-align:"):
                token.attrs.pop("style", None)
                token.attrSet("class", "align-" + style.split(":", 1)[1])


def render_markdown(text: str) -> str:
    """The assistant's words as safe HTML: Markdown rendered, then cleaned."""
    md = _parser()
    tokens = md.parse(str(text or ""))
    _rework(tokens)
    return clean(md.renderer.render(tokens, md.options, {}))


def clean(html: str) -> str:
    """Keep only the tags, attributes, classes and link schemes a reply may have (nh3)."""
    return nh3.clean(
        html,
        tags=TAGS,
        attributes=ATTRIBUTES,
        allowed_classes=CLASSES,
        url_schemes=SCHEMES,
        link_rel=LINK_REL,
        set_tag_attribute_values={"a": {"target": "_blank"}},  # a link never leaves the chat
        strip_comments=True,
    )


def code_css() -> str:
    """The colours for highlighted code, light and dark: what ``static/code.css`` holds."""
    light = HtmlFormatter(style="default").get_style_defs(CODE_CSS_SCOPE)
    dark = HtmlFormatter(style="monokai").get_style_defs(CODE_CSS_SCOPE)
    keep = [line for line in light.splitlines() if line.startswith(CODE_CSS_SCOPE + " .")]
    keep_dark = [
        "  " + line for line in dark.splitlines() if line.startswith(CODE_CSS_SCOPE + " .")
    ]
    return (
        "/* Generated by chats.markdown.code_css(): Pygments' default and monokai styles. */\n"
        + "\n".join(keep)
        + "\n@media (prefers-color-scheme: dark) {\n"
        + "\n".join(keep_dark)
        + "\n}\n"
    )


def plain_text(text: str) -> str:
    """The words of the assistant's Markdown without its marks, as one line of text: what a
    search result quotes. The same parser as the page's, so what reads as a mark there
    (``**``, ``#``, a fence, a link's address) is left out here, and what is text there
    (a ``<b>`` written in a reply) stays text. Plain text, for the template to escape."""
    parts: list[str] = []

    def walk(tokens: list[Token]) -> None:
        for token in tokens:
            if token.children:
                walk(token.children)
            elif token.type in ("softbreak", "hardbreak") or (token.block and token.nesting == -1):
                parts.append(" ")
            elif token.content:
                parts.append(token.content)

    walk(_parser().parse(str(text or "")))
    return " ".join("".join(parts).split())
