"""Maths, task lists and headings in the assistant's words.

``$…$`` and ``$$…$$`` become MathML on the server (chats/markdown.py: dollarmath, then
latex2mathml, then nh3 last), so the page draws them with no script; ``- [ ]`` and
``- [x]`` become check boxes the person cannot tick; a reply's headings sit in the
page's outline whatever level it starts at. Speed on huge replies is measured in
bench/bench_markdown.py.
"""

from __future__ import annotations

import re

import pytest

from chats import markdown as md
from tests.web.test_words import elements, unsafe_parts


def tags(html: str) -> list[str]:
    return [tag for tag, _ in elements(html)]


# ---------------------------------------------------------------------------
# Maths


def test_inline_and_displayed_maths_render_as_mathml():
    html = md.render_markdown("Euler: $e^{i\\pi}+1=0$, and\n\n$$\n\\frac{a}{b}\n$$\n")

    assert '<p>Euler: <math display="inline"><mrow><msup><mi>e</mi>' in html
    assert "<mi>π</mi>" in html and "<mo>+</mo><mn>1</mn><mo>=</mo><mn>0</mn>" in html
    assert '<math display="block"><mrow><mfrac><mrow><mi>a</mi></mrow><mrow><mi>b</mi>' in html
    assert unsafe_parts(html) == [], html


def test_double_dollars_inside_a_sentence_are_displayed_maths():
    html = md.render_markdown("so $$\\sum_{i=0}^n i$$ holds")
    assert html.startswith('<p>so <math display="block"><mrow><munderover><mo>∑</mo>')
    assert "$" not in html


@pytest.mark.parametrize(
    "text",
    [
        "it costs $5 and $10",
        "from $5, or $6.50 with tax",
        "between $ 3 and $ 4",
        "pay $5 now and $x$ later",  # only $x$ is maths
        "a \\$x\\$ escaped",
    ],
)
def test_a_dollar_amount_is_words_not_maths(text):
    html = md.render_markdown(text)
    words = re.sub(r"<math.*?</math>", "", html)
    assert "$5" in words or "$ 3" in words or "$x$" in text.replace("\\", "")
    assert html.count("<math") == (1 if "$x$ later" in text else 0), html


def test_maths_in_code_stays_code():
    html = md.render_markdown("Write `$x^2$` for it:\n\n```\n$$\\frac{a}{b}$$\n```\n\n    $y$\n")

    assert "<math" not in html
    assert "<code>$x^2$</code>" in html
    assert "<code>$$\\frac{a}{b}$$" in html and "<code>$y$" in html


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("$x^$", "<code>$x^$</code>"),
        ("a $\\begin{matrix}$ b", "<code>$\\begin{matrix}$</code>"),
        ("$\\rule$", "<code>$\\rule$</code>"),
        ("$$\nx_\n$$", '<pre class="code"><code>$$\nx_\n$$</code></pre>'),
    ],
)
def test_a_formula_latex2mathml_cannot_read_shows_as_its_source(text, shown):
    html = md.render_markdown(text)
    assert shown in html and "<math" not in html


def test_half_written_maths_never_fails_while_it_streams():
    reply = (
        "## The sum\n\nFor $n \\ge 1$:\n\n$$\n\\sum_{i=1}^{n} i = \\frac{n(n+1)}{2}\n$$\n\n"
        "- [x] base case $n=1$\n- [ ] step: $\\sqrt[3]{x^2_1}$ and `$code$`\n"
    )
    for end in range(len(reply) + 1):  # every word as it arrives, and every cut between
        html = md.render_markdown(reply[:end])
        assert unsafe_parts(html) == [], (reply[:end], html)
    assert html.count("<math") == 4


HOSTILE_MATHS = [
    "$\\href{javascript:alert(1)}{x}$",
    "$\\href{https://evil.example/}{click}$",
    "$\\style{background:url(https://evil.example/x)}{x}$",
    "$\\class{k}{x}$",
    "$\\color{white}{hidden}$ $\\colorbox{red}{x}$ $\\mathbackground{red}{x}$",
    "$\\rule{1em}{1em}$",
    "$\\text{</math><img src=x onerror=alert(1)>}$",
    '$\\text{<a href="https://evil.example/">click</a>}$',
    "$\\text{<input type=text>}$",
    "$<script>alert(1)</script>$",
    "$$<b onclick=alert(1)>x</b>$$",
    '$\\char"3C script\\char"3E$',
    "$\\mathrm{&lt;img src=x onerror=alert(1)&gt;}$",
    "- [x] <input type=text value=x>",
]


@pytest.mark.parametrize("text", HOSTILE_MATHS)
def test_hostile_latex_injects_nothing(text):
    html = md.render_markdown(text)

    assert unsafe_parts(html) == [], html
    assert tags(html).count("a") == 0, html  # no link from inside a formula
    given = {name for _, attrs in elements(html) for name, _ in attrs}
    forbidden = {"href", "src", "style", "mathcolor", "mathbackground", "value", "name"}
    assert not given & forbidden and not [n for n in given if n.startswith("on")], html


def test_markup_inside_a_formula_stays_words_inside_it():
    # latex2mathml's own convert() turns these back into markup; they must stay words.
    html = md.render_markdown('$\\text{<a href="https://evil.example/">click</a>}$')
    assert '<mtext>&lt;a&nbsp;href="https://evil.example/"&gt;click&lt;/a&gt;</mtext>' in html


def test_the_cleaner_keeps_mathml_but_not_its_links_styles_or_colours():
    raw = (
        '<math display="block" xmlns="x"><mrow href="javascript:alert(1)" style="color:red"'
        ' class="k"><mi mathvariant="bold" mathcolor="red" onclick="x()">x</mi>'
        '<mspace mathbackground="red" width="1em"></mspace></mrow></math>'
    )
    html = md.clean(raw)
    assert html == (
        '<math display="block"><mrow><mi mathvariant="bold">x</mi>'
        '<mspace width="1em"></mspace></mrow></math>'
    )


def test_a_formula_too_long_or_past_the_replys_share_shows_as_its_source():
    long = "x+" * (md.MATHS_MAX_CHARS // 2) + "1"
    assert md.render_markdown(f"${long}$") == f"<p><code>${long}$</code></p>\n"

    formula = "x+" * 900 + "1"  # under the bound, so each alone is maths
    many = md.render_markdown(" ".join(f"${formula}$" for _ in range(20)))
    shown = md.MATHS_BUDGET_CHARS // len(formula)
    assert many.count("<math") == shown and many.count("<code>") == 20 - shown


# ---------------------------------------------------------------------------
# Task lists


def test_a_task_list_shows_boxes_the_person_cannot_tick():
    html = md.render_markdown("- [ ] write the test\n- [x] fix `login()`\n- plain item\n")

    assert html == (
        '<ul class="contains-task-list">\n'
        '<li class="task-list-item"><label><input type="checkbox" disabled="disabled">'
        " write the test</label></li>\n"
        '<li class="task-list-item"><label><input type="checkbox" disabled="disabled"'
        ' checked=""> fix <code>login()</code></label></li>\n'
        "<li>plain item</li>\n</ul>\n"
    )


@pytest.mark.parametrize("text", ["[ ] not in a list", "- [ ]", "- [y] no", "- x [ ] later"])
def test_brackets_that_are_no_task_stay_words(text):
    assert "<input" not in md.render_markdown(text)


def test_the_cleaner_keeps_only_a_box_that_cannot_be_ticked():
    html = md.clean(
        '<input type="text" value="x" name="csrfmiddlewaretoken"><input type="checkbox"'
        ' checked onclick="x()"><input type="submit" formaction="/x">'
    )
    assert elements(html) == [
        ("input", [("type", "checkbox"), ("disabled", "disabled")]),
        ("input", [("type", "checkbox"), ("checked", ""), ("disabled", "disabled")]),
        ("input", [("type", "checkbox"), ("disabled", "disabled")]),
    ]


# ---------------------------------------------------------------------------
# Headings: in the page's outline, from h3 down, never skipping a level


@pytest.mark.parametrize(
    ("text", "levels"),
    [
        ("# A\n## B\n### C", ["h3", "h4", "h5"]),
        ("## A\n### B\n## C", ["h3", "h4", "h3"]),  # a reply that starts at ##
        ("#### A", ["h3"]),
        ("# A\n### B\n##### C\n### D", ["h3", "h4", "h5", "h4"]),  # jumps close up
        ("### A\n## B\n# C\n## D", ["h3", "h3", "h3", "h4"]),
        ("# a\n## b\n### c\n#### d\n##### e\n###### f", ["h3", "h4", "h5", "h6", "h6", "h6"]),
        ("A\n===\n\nB\n---", ["h3", "h4"]),  # setext headings too
    ],
)
def test_a_replys_headings_follow_its_own_outline_from_h3(text, levels):
    html = md.render_markdown(text)
    assert [t for t in tags(html) if t.startswith("h")] == levels
    opened = re.findall(r"<(h\d)>", html)
    closed = re.findall(r"</(h\d)>", html)
    assert opened == closed == levels
