"""axe-core in the page: the accessibility rules a browser test checks a page against.

axe-core is vendored (``tests/browser/vendor/``, see its README) and evaluated
through the DevTools protocol, which the page's Content-Security-Policy does
not govern, so the page under test keeps its own policy unchanged.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

AXE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"
BLOCKING = ("serious", "critical")


@cache
def _axe_source() -> str:
    return AXE.read_text(encoding="utf-8")


def axe_violations(
    page, impacts: tuple[str, ...] = BLOCKING, rules: tuple[str, ...] = ()
) -> list[str]:
    """Each violation of ``impacts``, or of one of ``rules`` at any impact, on the page as
    it is now: rule, impact, help, where."""
    if not page.evaluate("typeof window.axe === 'object'"):
        page.evaluate(_axe_source())
    results = page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
        ".map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.map(n => n.target.join(' '))}))"
    )
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {', '.join(v['nodes'][:5])}"
        for v in results
        if v["impact"] in impacts or v["id"] in rules
    ]
