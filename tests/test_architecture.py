"""The house rules of docs/architecture.md: no import cycle, no import against the layer order,
no module over about 450 lines."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "architecture", Path(__file__).resolve().parent.parent / "docs" / "architecture.py"
)
architecture = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(architecture)

MAX_LINES = 460  # "about 450"


def test_no_import_cycle() -> None:
    graph = architecture.module_graph()
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                raise AssertionError(
                    f"import cycle: {' -> '.join([*path[path.index(dep) :], dep])}"
                )
            if dep not in state:
                visit(dep, [*path, dep])
        state[module] = 2

    for module in graph:
        if module not in state:
            visit(module, [module])


def test_every_module_is_placed_in_the_layer_order() -> None:
    order = [name for row in architecture.layer_rows() for name in row]
    assert len(order) == len(set(order)), "a module is listed twice in docs/architecture.md"
    assert sorted(order) == sorted(architecture.module_graph()), (
        "docs/architecture.md's layer order and src/ list other modules"
    )


def test_imports_follow_the_layer_order() -> None:
    order = [name for row in architecture.layer_rows() for name in row]
    rank = {name: i for i, name in enumerate(order)}
    upward = [
        f"{module} imports {dep}"
        for module, deps in architecture.module_graph().items()
        for dep in sorted(deps)
        if rank[dep] >= rank[module]
    ]
    assert not upward, "imports against docs/architecture.md's layer order: " + "; ".join(upward)


def test_modules_stay_small() -> None:
    long = {
        architecture.module_name(p): n
        for p in architecture.PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"
