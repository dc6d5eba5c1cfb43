"""docs/notebooks/quickstart.ipynb runs from top to bottom, and its interpretations draw their
images inline, both when it runs here and in the outputs saved for the documentation site."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs the notebook in a Jupyter kernel (about a minute)

nbformat = pytest.importorskip("nbformat", reason="the `dev` extra is not installed")
nbclient = pytest.importorskip("nbclient", reason="the `dev` extra is not installed")

NOTEBOOK = Path(__file__).resolve().parent.parent / "docs" / "notebooks" / "quickstart.ipynb"
PNG = '<img src="data:image/png;base64,'


def _interpretation_views(notebook) -> list[str]:
    """The HTML that the cells tagged ``interpretation`` display, one per cell."""
    views = []
    for cell in notebook.cells:
        if "interpretation" in cell.metadata.get("tags", []):
            html = [o.data["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]
            assert len(html) == 1, cell.source
            views.append(html[0])
    return views


def _check(views: list[str]) -> None:
    assert len(views) == 4
    for html in views:
        assert 'class="repinterp"' in html and PNG in html
    first, loaded, given, resnet = views
    # fitted here: the input and 8 similar digits, each with its heat map, the colour bar drawn
    # by CSS (a theme's img rule cannot squash it), each similar digit's true label
    assert first.count(PNG) == 2 * (1 + 8) and 'aria-label="colour bar: inferno"' in first
    assert first.count("<br>label ") + first.count('bold">label ') == 8
    # loaded: no reference image, the input, the 9 heat maps and the colour bar, and how to draw
    assert loaded.count('alt="image"') == 1 and loaded.count(PNG) == 1 + 9
    assert 'aria-label="colour bar: inferno"' in loaded
    assert "e.show(reference)" in loaded
    assert given.count('alt="image"') == 1 + 4
    assert resnet.count('alt="image"') >= 2 and 'alt="heat map"' in resnet


def _strategy_card(notebook) -> str:
    """The HTML of the cell that shows one strategy (``own.show(...)``)."""
    (cell,) = [c for c in notebook.cells if c.cell_type == "code" and "own.show(" in c.source]
    (html,) = [o.data["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]
    return html


def _check_strategy_card(html: str) -> None:
    from repinterp.strategies.audit import REASONS

    # this version's audit: every reason it reads, with its meaning
    for reason in REASONS:
        assert f"<b>{reason}</b>" in html and f"<li>{reason}: " in html, reason


def test_the_saved_notebook_shows_its_outputs() -> None:
    assert NOTEBOOK.stat().st_size < 2_000_000
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    _check(_interpretation_views(notebook))
    _check_strategy_card(_strategy_card(notebook))


def test_the_notebook_runs_and_draws_its_interpretations(tmp_path: Path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    for cell in notebook.cells:
        cell.outputs = [] if cell.cell_type == "code" else cell.get("outputs")
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on an error
    _check(_interpretation_views(notebook))
    _check_strategy_card(_strategy_card(notebook))
