"""The package's import graph and layer order, and the picture of docs/architecture.md.

``python -m studies.architecture`` redraws ``docs/architecture.png`` (``--out``: another
folder) from the code's own imports:
one row per line of the package order in architecture.md (lowest at the bottom), one box per
tier (a package, or a top-level module), and an arrow for each pair of tiers with imports
between them. tests/test_architecture.py checks the same graph against the same order.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .runner import publish

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "repinterp"
DOC = ROOT / "docs" / "architecture.md"


def module_name(path: Path) -> str:
    """``src/repinterp/a/b.py`` -> ``repinterp.a.b`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(name: str) -> bool:
    base = PACKAGE.parent / name.replace(".", "/")
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _from_imports(path: Path) -> Iterator[tuple[ast.ImportFrom, str]]:
    """Every ``from ... import`` of a repinterp module in a file (at the top, inside functions and
    under ``TYPE_CHECKING`` alike), with the full name of the module it imports from."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if target.split(".")[0] == "repinterp":
            yield node, target


def imports(path: Path) -> set[str]:
    """The repinterp modules a file imports (a cycle through any import is a cycle)."""
    found = set()
    for node, target in _from_imports(path):
        for alias in node.names:
            child = f"{target}.{alias.name}"
            found.add(child if _exists(child) else target)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "repinterp"}
    return found - {module_name(path)}


def module_graph() -> dict[str, set[str]]:
    """Every module of the package and the modules it imports."""
    return {module_name(p): imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def tier(module: str) -> str:
    """The tier a module belongs to: its package under repinterp (``repinterp.core.cover.greedy``
    -> ``core``), or its own name for a top-level module (``repinterp.interpreter`` ->
    ``interpreter``, the package's ``__init__`` -> ``repinterp``)."""
    return "repinterp" if module == "repinterp" else module.split(".")[1]


def tier_rows() -> list[list[str]]:
    """The package order of architecture.md, lowest row first: tiers on one row are independent
    of each other, and a tier imports only tiers of lower rows."""
    block = re.search(r"## Package order.*?```text\n(.*?)```", DOC.read_text(), re.S)
    if block is None:
        raise ValueError(f"{DOC} has no 'Package order' section with a text block")
    return [line.split() for line in block.group(1).splitlines() if line.strip()]


def tier_graph() -> dict[tuple[str, str], int]:
    """Imports between tiers: (importer, imported) -> how many module-to-module imports."""
    edges: dict[tuple[str, str], int] = {}
    for module, deps in module_graph().items():
        for dep in deps:
            if tier(module) != tier(dep):
                key = (tier(module), tier(dep))
                edges[key] = edges.get(key, 0) + 1
    return edges


def private_imports() -> list[str]:
    """``module imports _name from other`` for every private name a module of the package imports
    from another one (a module's underscored names are its own)."""
    return [
        f"{module_name(path)} imports {alias.name} from {target}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node, target in _from_imports(path)
        for alias in node.names
        if alias.name.startswith("_")
    ]


def draw() -> bytes:
    """The picture's PNG: the tiers as boxes, one row per line of the package order (lowest at
    the bottom), each with its modules and lines, and an arrow for each pair of tiers with
    imports between them, labelled with how many. The same tree gives the same bytes: the
    arrows drawn in sorted order, matplotlib's default style whatever the user's settings, no
    version in the file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with plt.style.context("default"):
        return _draw(plt)


def _draw(plt: Any) -> bytes:
    rows = tier_rows()
    sizes: dict[str, list[int]] = {}
    for path in PACKAGE.rglob("*.py"):
        entry = sizes.setdefault(tier(module_name(path)), [0, 0])
        entry[0] += 1
        entry[1] += len(path.read_text().splitlines())
    width = max(len(row) for row in rows)
    fig, ax = plt.subplots(figsize=(3.2 * width + 1, 1.1 * len(rows) + 1), dpi=110)
    where = {}
    for y, row in enumerate(rows):
        for x, name in enumerate(row):
            where[name] = ((x + (width - len(row)) / 2) * 1.6, y)
    for (src, dst), count in sorted(tier_graph().items()):
        (x0, y0), (x1, y1) = where[src], where[dst]
        ax.annotate(
            "",
            xy=(x1, y1 + 0.25),
            xytext=(x0, y0 - 0.25),
            arrowprops={"arrowstyle": "->", "color": "#7b8794", "lw": 0.5 + 0.15 * count},
        )
        ax.text(
            x0 + 0.3 * (x1 - x0),
            y0 - 0.3 + 0.3 * (y1 - y0),
            str(count),
            fontsize=7,
            color="#52606d",
            ha="center",
            va="center",
        )
    colours = {"core": "#fff2cc", "runtime": "#eeeeee", "data": "#e3f2e1", "models": "#e3f2e1"}
    colours |= {"strategies": "#f4e1f0", "maps": "#f4e1f0"}
    colours |= {"store": "#fde2c8", "evaluation": "#fde2c8", "report": "#d9ead3"}
    colours |= {"web": "#d0e0f3", "cli": "#ead1dc"}
    for name, (x, y) in where.items():
        modules, lines = sizes.get(name, (0, 0))
        label = f"{name}/" if modules > 1 else name
        ax.text(
            x,
            y,
            f"{label}\n{modules} module{'s' if modules != 1 else ''}, {lines} lines",
            ha="center",
            va="center",
            fontsize=8.5,
            bbox={"boxstyle": "round,pad=0.4", "fc": colours.get(name, "#ffffff"), "ec": "#555"},
        )
    xs = [x for x, _ in where.values()]
    ax.set_xlim(min(xs) - 1.0, max(xs) + 1.0)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.axis("off")
    ax.set_title(
        "repinterp: tiers in package order (lowest at the bottom); arrows are imports, with "
        "their count",
        fontsize=10,
    )
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", metadata={"Software": None})
    plt.close(fig)
    return png.getvalue()


def main(argv: list[str] | None = None) -> None:
    """Write ``architecture.png`` into ``--out`` (default docs/)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    publish(parser.parse_args(argv).out, {"architecture.png": draw()})


if __name__ == "__main__":
    main()
