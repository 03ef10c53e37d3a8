"""The assistant's words as the page shows them: Markdown, with code highlighted, made safe.

One path, three maintained libraries:

1. ``markdown-it-py`` parses CommonMark plus tables, strikethrough and task lists
   (``- [x]``, shown as check boxes the person cannot tick), with raw
   HTML off (a ``<script>`` in a reply is text) and ``linkify-it-py`` turning bare
   addresses into links: only those written with a scheme or ``www.``, never a file
   name that looks like a domain (:func:`_linkify_strict`). Its own link check already refuses ``javascript:``,
   ``vbscript:``, ``file:`` and ``data:`` links. Images are off: a reply never
   makes the page fetch anything (an image's address can carry what it read out).
   ``$…$`` and ``$$…$$`` are maths (mdit-py-plugins' dollarmath, with Pandoc's rule
   that a dollar amount is not: "$5 and $10" stays words), turned into MathML here by
   ``latex2mathml``, so the browser draws it and the page needs no script (:func:`_maths`).
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
from collections.abc import Sequence
from functools import cache, lru_cache
from typing import Any
from xml.etree.ElementTree import tostring

import nh3
from latex2mathml.converter import convert_to_element
from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token
from mdit_py_plugins.dollarmath import dollarmath_plugin
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.token import STANDARD_TYPES
from pygments.util import ClassNotFound

__all__ = [
    "CODE_CSS_SCOPE",
    "clean",
    "code_css",
    "plain_text",
    "render_markdown",
    "render_markdown_kept",
    "render_markdown_live",
]

# A reply's headings sit under the chat's h1 and the transcript's h2: its top level is h3.
TOP_HEADING = 3
# The longest formula turned into MathML, and the most of a reply's words that are: past
# them, formulas show as their source. A formula is a line or a few, and a long one
# costs latex2mathml some 60 ms: a reply of nothing but formulas renders in under a
# second, each time its words stream in, and never holds the page up.
MATHS_MAX_CHARS = 2_000
MATHS_BUDGET_CHARS = 20_000
# Where the highlighted code's colours apply (static/code.css).
CODE_CSS_SCOPE = ".md pre.code"

# What latex2mathml writes (read from its converter), less what would let a reply
# link, style or colour anything: \href and \class and \style give an mrow an href,
# a class or a style; \color and \colorbox a colour that could hide words in the
# page's background or be unreadable in the other theme.
MATHML_ATTRIBUTES = {
    "math": {"display"},
    "menclose": {"notation"},
    "mfrac": {"linethickness"},
    "mi": {"mathvariant"},
    "mn": set(),
    "mo": {
        "accent", "fence", "form", "largeop", "lspace", "mathvariant", "maxsize",
        "minsize", "movablelimits", "rspace", "separator", "stretchy",
    },
    "mover": {"accent"},
    "mpadded": {"depth", "height", "lspace", "voffset", "width"},
    "mphantom": set(),
    "mroot": set(),
    "mrow": {"movablelimits"},
    "mspace": {"depth", "height", "linebreak", "width"},
    "msqrt": set(),
    "mstyle": {"displaystyle", "mathsize", "scriptlevel"},
    "msub": set(),
    "msubsup": set(),
    "msup": set(),
    "mtable": {"columnlines", "columnspacing", "displaystyle", "rowlines", "rowspacing"},
    "mtd": {"columnalign"},
    "mtext": {"mathvariant"},
    "mtr": set(),
    "munder": set(),
    "munderover": set(),
}  # fmt: skip
TAGS = {
    "p", "br", "hr", "h3", "h4", "h5", "h6", "strong", "em", "s", "del",
    "code", "pre", "span", "blockquote", "ul", "ol", "li",
    "table", "thead", "tbody", "tr", "th", "td", "a", "label", "input",
    *MATHML_ATTRIBUTES,
}  # fmt: skip
ATTRIBUTES = {
    "a": {"href", "title"},
    "ol": {"start"},
    "code": {"data-lang"},
    # A task list's box: the cleaner also sets type and disabled on every input it
    # keeps (:func:`clean`), so none is a text field, a button or a box to tick.
    "input": {"checked", "disabled", "type"},
    **{tag: names for tag, names in MATHML_ATTRIBUTES.items() if names},
}
ALIGN_CLASSES = {"align-left", "align-center", "align-right"}
CLASSES = {
    "pre": {"code"},
    "span": {name for name in STANDARD_TYPES.values() if name},
    "th": ALIGN_CLASSES,
    "td": ALIGN_CLASSES,
    "ul": {"contains-task-list"},
    "ol": {"contains-task-list"},
    "li": {"task-list-item"},
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


def _mathml(latex: str, *, display: str, env: dict[str, int]) -> str:
    """``latex`` as a ``<math>`` element, or ``""`` when latex2mathml can't read it.

    latex2mathml's own ``convert`` un-escapes its whole output to turn its character
    references into characters, and so turns ``\\text{</math><img …>}`` back into
    markup. Here each text and attribute value is un-escaped on its own, and the tree
    written out again, escaped: whatever the formula holds stays words inside it."""
    left = env.setdefault("maths_chars_left", MATHS_BUDGET_CHARS)
    if len(latex) > min(MATHS_MAX_CHARS, left):
        return ""
    env["maths_chars_left"] = left - len(latex)
    try:
        root = convert_to_element(latex, display=display)
    except Exception:  # noqa: BLE001 - any formula it can't read shows as its source
        # latex2mathml raises its own errors for a formula cut short ("x^"), and plain
        # IndexError, KeyError or RecursionError for others: none may fail the page.
        return ""
    for element in root.iter():
        element.text = html.unescape(element.text) if element.text else element.text
        element.tail = html.unescape(element.tail) if element.tail else element.tail
        for name, value in element.attrib.items():
            element.attrib[name] = html.unescape(value)
    return tostring(root, encoding="unicode", short_empty_elements=False)


def _maths(self: Any, tokens: Sequence[Token], idx: int, _options: Any, env: Any) -> str:
    """A formula as MathML the browser draws; one it can't read as the source, in code."""
    token = tokens[idx]
    block = token.type == "math_block"
    latex = token.content.strip()
    display = "inline" if token.type == "math_inline" else "block"
    mathml = _mathml(latex, display=display, env=env)
    if block:
        return mathml + "\n" if mathml else _code_block(f"$$\n{latex}\n$$", "", "")
    return mathml or f"<code>{html.escape(token.markup + latex + token.markup)}</code>"


@cache
def _parser() -> MarkdownIt:
    md = MarkdownIt(
        "commonmark",
        {"html": False, "linkify": True, "typographer": False, "highlight": _code_block},
    )
    md.enable(["table", "strikethrough", "linkify"])
    md.disable("image")
    _linkify_strict(md)
    # Pandoc's rule for what a dollar opens: no space inside either dollar, and no digit
    # after the closing one, so "$5 and $10" are prices. No labels: they make links.
    # "$$…$$" inside a paragraph is displayed too, as it is on a line of its own.
    md.use(
        dollarmath_plugin,
        allow_labels=False,
        allow_space=False,
        allow_digits=False,
        double_inline=True,
    )
    for kind in ("math_inline", "math_inline_double", "math_block"):
        md.add_render_rule(kind, _maths)
    md.core.ruler.after("inline", "task_lists", _task_lists)
    return md


# "[ ]" or "[x]" and a space, at the start of a list item: GitHub's task list.
TASK = re.compile(r"\[([ xX])\][ \t\n\v\f\r]+")


def _task_lists(state: StateCore) -> None:
    """A list item that starts with ``[ ]`` or ``[x]`` shows a check box the person cannot
    tick, inside a label, so the item's words name it.

    What mdit-py-plugins' tasklists plugin makes, in one pass: the plugin looks for each
    item's list by walking back over every token before it, and a reply of 20,000 items
    took 76 seconds to render, on every word that streamed in."""
    tokens = state.tokens
    lists: list[Token] = []  # the lists the token is in, innermost last
    for index, token in enumerate(tokens):
        if token.type in ("bullet_list_open", "ordered_list_open"):
            lists.append(token)
        elif token.type in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
        elif (
            token.type == "inline"
            and lists
            and tokens[index - 1].type == "paragraph_open"
            and tokens[index - 2].type == "list_item_open"
            and token.children
            and token.children[0].type == "text"
            and (found := TASK.match(token.children[0].content))
        ):
            first = token.children[0]
            first.content = first.content[found.end() :]
            checked = " checked" if found.group(1) in "xX" else ""
            box = f'<label><input type="checkbox" disabled{checked}> '
            token.children[:0] = [_html(box)]
            token.children.append(_html("</label>"))
            tokens[index - 2].attrSet("class", "task-list-item")
            lists[-1].attrSet("class", "contains-task-list")


def _html(markup: str) -> Token:
    token = Token("html_inline", "", 0)
    token.content = markup
    return token


def _heading_levels(tokens: list[Token], open_levels: list[int] | None = None) -> list[int]:
    """Each heading at its depth in the reply's own outline, from h3 down, never skipping
    a level: a reply that starts at ``##`` or jumps from ``#`` to ``###`` still reads
    h3, h4, … in order under the page's h2, as screen readers list them.

    ``open_levels``: the written levels of the headings the first one sits under (the
    outline of the words before these); returns the outline after them."""
    open_levels = list(open_levels or [])  # the written levels of the headings this one sits under
    for index, token in enumerate(tokens):
        if token.type != "heading_open":
            continue
        written = int(token.tag[1])
        while open_levels and open_levels[-1] >= written:
            open_levels.pop()
        open_levels.append(written)
        token.tag = f"h{min(6, TOP_HEADING - 1 + len(open_levels))}"
        tokens[index + 2].tag = token.tag  # heading_open, its inline words, heading_close
    return open_levels


def _rework(tokens: list[Token], outline: list[int] | None = None) -> list[int]:
    """Headings in the page's outline; a table column's alignment as a class, not a style.
    Returns the outline after them (see :func:`_heading_levels`)."""
    outline = _heading_levels(tokens, outline)
    for token in tokens:
        if token.type in ("th_open", "td_open"):
            style = str(token.attrGet("style") or "")
            if style.startswith("text-align:"):
                token.attrs.pop("style", None)
                token.attrSet("class", "align-" + style.split(":", 1)[1])
    return outline


def render_markdown(text: str) -> str:
    """The assistant's words as safe HTML: Markdown rendered, then cleaned."""
    md = _parser()
    tokens = md.parse(str(text or ""))
    _rework(tokens)
    return clean(md.renderer.render(tokens, md.options, {}))


# A stored reply is rendered again with each render of its chat's transcript (each push
# of the chat's page, each answer to a request), and parsing is most of a render: the
# latest renders are kept, by their words. Longer words are rendered each time, so what
# is kept stays small (at most some 256 x 80 kB).
RENDERS_KEPT = 256
KEPT_CHARS = 20_000


@lru_cache(maxsize=RENDERS_KEPT)
def _render_kept(text: str) -> str:
    return render_markdown(text)


def render_markdown_kept(text: str) -> str:
    """:func:`render_markdown`, kept for words rendered again unchanged (a stored reply)."""
    text = str(text or "")
    return _render_kept(text) if len(text) <= KEPT_CHARS else render_markdown(text)


# A running reply's words are rendered again each time more of them come, and parsing is
# most of a render (some 20 ms for 6,000 characters of prose): each finished part is
# rendered once and kept here, by its words and what comes into it from before.
LIVE_PARTS_KEPT = 512
# A fence opens or closes a code block: ``` or ~~~, after at most three spaces.
FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
# A line that may go on what came before it, across a blank line: indented (a list item's
# words, indented code), a list item, a quote, maths.
GOES_ON = re.compile(r"[ \t>$]|([-*+]|\d{1,9}[.)])([ \t]|$)")


def live_parts(text: str) -> list[str]:
    """The words cut where nothing after can change what is before: at a blank line
    outside a fence and outside maths, before a line that can't go on a list, a quote or
    indented code. Every part but the last is finished; joined, they are the words.

    A link's definition is the one thing a part can't keep to itself: it is read wherever
    it stands, before or after its uses (:func:`render_markdown_live` sees to it)."""
    parts: list[str] = []
    start = 0
    position = 0
    fence = ""  # the open fence's marks
    dollars = 0  # "$$" seen outside fences: odd inside a maths block
    blank = False
    for line in text.split("\n"):
        if (
            blank
            and not fence
            and dollars % 2 == 0
            and line.strip()
            and not GOES_ON.match(line)
            and position > start
        ):
            parts.append(text[start:position])
            start = position
        found = FENCE.match(line)
        if fence:
            if found and found.group(1)[0] == fence[0] and len(found.group(1)) >= len(fence):
                if not line[found.end() :].strip():
                    fence = ""
        elif found:
            fence = found.group(1)
        elif "$$" in line:
            if "`" in line or "\\" in line or line.startswith(("    ", "\t")):
                break  # code or an escape: whether it opens maths isn't known here
            dollars += line.count("$$")
        blank = not line.strip()
        position += len(line) + 1
    parts.append(text[start:])
    return parts


def _part_rendered(
    text: str, outline: tuple[int, ...], maths_left: int
) -> tuple[str, tuple[int, ...], int, bool]:
    """One part of the words, rendered with the outline and the maths budget the words
    before it left; returns them as they are after it too, and whether the part defines a
    link (``[x]: https://…``, the parser's own reading: in a quote, a list, anywhere)."""
    md = _parser()
    found: dict[str, Any] = {}
    tokens = md.parse(text, found)
    after = _rework(tokens, list(outline))
    env = {"maths_chars_left": maths_left}
    rendered = clean(md.renderer.render(tokens, md.options, env))
    return rendered, tuple(after), env["maths_chars_left"], bool(found.get("references"))


_part_kept = lru_cache(maxsize=LIVE_PARTS_KEPT)(_part_rendered)


def render_markdown_live(text: str) -> str:
    """:func:`render_markdown` for a reply whose words are still coming: the same HTML,
    but each finished part of them (:func:`live_parts`) is parsed once, not on each push.

    Words that define a link render whole: a definition in any part makes ``[x]`` a link
    in every part, those before it too."""
    text = str(text or "")
    parts = live_parts(text)
    outline: tuple[int, ...] = ()
    maths_left = MATHS_BUDGET_CHARS
    rendered = []
    for n, part in enumerate(parts):
        render = _part_kept if n < len(parts) - 1 else _part_rendered
        html_part, outline, maths_left, defines_link = render(part, outline, maths_left)
        if defines_link:
            return render_markdown(text)
        rendered.append(html_part)
    return "".join(rendered)


def clean(html: str) -> str:
    """Keep only the tags, attributes, classes and link schemes a reply may have (nh3)."""
    return nh3.clean(
        html,
        tags=TAGS,
        attributes=ATTRIBUTES,
        allowed_classes=CLASSES,
        url_schemes=SCHEMES,
        link_rel=LINK_REL,
        set_tag_attribute_values={
            "a": {"target": "_blank"},  # a link never leaves the chat
            "input": {"type": "checkbox", "disabled": "disabled"},  # only a task list's box
        },
        strip_comments=True,
    )


def code_css() -> str:
    """The colours for highlighted code, light and dark: what ``static/code.css`` holds.

    The dark ones apply where the page is dark: under a dark system unless the person
    chose the light theme, or wherever they chose the dark one (static/conch-theme.js
    sets ``data-theme`` on ``<html>``). CSS can't join a media query and a selector in one
    rule, so the dark rules are written once for each.
    """
    light = HtmlFormatter(style="default").get_style_defs(CODE_CSS_SCOPE)
    keep = [line for line in light.splitlines() if line.startswith(CODE_CSS_SCOPE + " .")]

    def dark(root: str, indent: str) -> list[str]:
        scope = f"{root} {CODE_CSS_SCOPE}"
        rules = HtmlFormatter(style="monokai").get_style_defs(scope)
        return [indent + line for line in rules.splitlines() if line.startswith(scope + " .")]

    return (
        "/* Generated by chats.markdown.code_css(): Pygments' default and monokai styles. */\n"
        + "\n".join(keep)
        + "\n@media (prefers-color-scheme: dark) {\n"
        + "\n".join(dark(":root:not([data-theme=light])", "  "))
        + "\n}\n"
        + "\n".join(dark(":root[data-theme=dark]", ""))
        + "\n"
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
