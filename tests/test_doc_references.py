"""The documentation cites only what exists: Python names, test files, and no control characters.

The Markdown pages are the specification (docs/method.md) and the guides; a name or test path
they cite must resolve in this checkout, and no stray control character (a LaTeX ``\\b`` or
``\\t`` written into a non-raw string) may hide in their formulas.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Pages that describe the code as it is; CHANGELOG.md is history and may name old modules.
PAGES = [*sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs/api").glob("*.md"))]
PAGES.append(ROOT / "README.md")
ALL_MARKDOWN = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md", ROOT / "CHANGELOG.md"]

CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")
# `repinterp.a.b` in code spans and mkdocstrings' `::: repinterp.a.b` directives.
NAME = re.compile(r"(?:`|^::: )(repinterp(?:\.\w+)+)", re.M)
# `repinterp.a.b` (`m1`, `m2.n`): members listed right after a cited name.
MEMBERS = re.compile(r"`(repinterp(?:\.\w+)+)` \(((?:`[\w.]+`(?:,\s+)?)+)\)")
TEST_PATH = re.compile(r"`(tests/[\w/*.]+?)(?:::\w+)?`")


def _attribute(obj: Any, name: str) -> Any:
    """``getattr``, counting a dataclass's fields without defaults; KeyError if absent."""
    if hasattr(obj, name):
        return getattr(obj, name)
    if name in getattr(obj, "__dataclass_fields__", {}):
        return None
    raise KeyError(name)


def _resolve(dotted: str) -> None:
    """Import the longest importable prefix of ``dotted`` and look the rest up as attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for part in parts[i:]:
            obj = _attribute(obj, part)
        return
    raise KeyError(dotted)


def _cited_names() -> list[tuple[str, str]]:
    """(page, dotted name) for every name and listed member the pages cite."""
    cited = []
    for page in PAGES:
        text = page.read_text()
        cited += [(page.name, name) for name in NAME.findall(text)]
        for owner, members in MEMBERS.findall(text):
            cited += [(page.name, f"{owner}.{m}") for m in re.findall(r"`([\w.]+)`", members)]
    return cited


def test_markdown_has_no_control_characters() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{n}: {line!r}"
        for path in ALL_MARKDOWN
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if CONTROL.search(line)
    ]
    assert not bad, "\n".join(bad)


def test_cited_names_exist() -> None:
    cited = _cited_names()
    assert len(cited) > 50  # the pattern still finds the method page's citations
    missing = []
    for page, name in cited:
        try:
            _resolve(name)
        except KeyError:
            missing.append(f"{page}: {name}")
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_cited_test_files_exist(page: Path) -> None:
    missing = [p for p in TEST_PATH.findall(page.read_text()) if not list(ROOT.glob(p))]
    assert not missing, missing


SPHINX_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj):`")


def test_docstrings_use_cross_references_the_site_renders() -> None:
    """mkdocstrings renders Markdown: a Sphinx role (``:func:`x```) would show as raw text on the
    API pages, so docstrings cite ``[`x`][repinterp.a.x]`` or plain code."""
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "src" / "repinterp").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if SPHINX_ROLE.search(line)
    ]
    assert not found, "Sphinx roles in docstrings: " + ", ".join(found[:10])
