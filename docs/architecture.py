"""The package's import graph and layer order, and the picture of docs/architecture.md.

``python docs/architecture.py`` redraws ``docs/architecture.png`` from the code's own imports:
one row per line of the layer order in architecture.md (lowest at the bottom), one box per
module, and an arrow from each module to every module it imports. tests/test_architecture.py
checks the same graph against the same order.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

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


def imports(path: Path) -> set[str]:
    """The repinterp modules a file imports: at the top, inside functions and under
    ``TYPE_CHECKING`` alike (a cycle through any of them is a cycle)."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "repinterp":
                continue
            for alias in node.names:
                child = f"{target}.{alias.name}"
                found.add(child if _exists(child) else target)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "repinterp"}
    return found - {module}


def module_graph() -> dict[str, set[str]]:
    """Every module of the package and the modules it imports."""
    return {module_name(p): imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def layer_rows() -> list[list[str]]:
    """The layer order of architecture.md, lowest row first, as full module names."""
    block = re.search(r"## Layer order.*?```text\n(.*?)```", DOC.read_text(), re.S)
    if block is None:
        raise ValueError(f"{DOC} has no 'Layer order' section with a text block")
    return [
        [name if name == "repinterp" else f"repinterp.{name}" for name in line.split()]
        for line in block.group(1).splitlines()
        if line.strip()
    ]


def draw(out: Path = ROOT / "docs" / "architecture.png") -> None:
    """Draw the layer rows as boxes and the imports as arrows into ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = layer_rows()
    graph = module_graph()
    width = max(len(row) for row in rows)
    fig, ax = plt.subplots(figsize=(1.9 * width + 1, 0.95 * len(rows) + 1.2), dpi=110)
    where = {}
    for y, row in enumerate(rows):
        for x, name in enumerate(row):
            where[name] = (x + (width - len(row)) / 2, y)
    for name, deps in graph.items():
        for dep in deps:
            (x0, y0), (x1, y1) = where[name], where[dep]
            ax.annotate(
                "",
                xy=(x1, y1 + 0.22),
                xytext=(x0, y0 - 0.22),
                arrowprops={"arrowstyle": "->", "color": "#9aa5b1", "lw": 0.6, "alpha": 0.6},
            )
    family = {"evaluation": "#fde2c8", "report": "#d9ead3", "web": "#d0e0f3", "cli": "#ead1dc"}
    for name, (x, y) in where.items():
        short = name.removeprefix("repinterp.") if name != "repinterp" else "repinterp"
        colour = family.get(short.split(".")[0], "#fff2cc" if y < 4 else "#eeeeee")
        ax.text(
            x,
            y,
            short.replace("evaluation.", "eval.").replace("methods.", "m."),
            ha="center",
            va="center",
            fontsize=8,
            bbox={"boxstyle": "round,pad=0.35", "fc": colour, "ec": "#555555", "lw": 0.8},
        )
    ax.set_xlim(-0.8, width - 0.2)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.axis("off")
    ax.set_title(
        "repinterp: modules by layer (lowest at the bottom); arrows are imports, always downward",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


if __name__ == "__main__":
    draw()
