"""Sphinx's settings for Conch's docs: Markdown through MyST, the furo theme.

tests/conch/test_docs.py builds them with warnings as errors (-W --keep-going) and
nitpicky (-n), so a broken link, reference or heading anchor fails the suite.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

_pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())

project = "Conch"
author = "Conch's contributors"
copyright = "Conch's contributors"  # noqa: A001 - Sphinx's own name for it
release = version = _pyproject["project"]["version"]

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# [text](page.md#a-heading) links are checked against the page's headings.
myst_heading_anchors = 3
myst_enable_extensions = ["deflist"]

html_theme = "furo"
html_title = "Conch"
html_static_path: list[str] = []
nitpicky = True
