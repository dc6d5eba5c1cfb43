"""The house rules of docs/architecture.md: no import cycle, no import against the package order,
no private name imported from another module, and a small top level."""

from __future__ import annotations

import re

from studies import architecture


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


def test_every_tier_is_placed_in_the_package_order() -> None:
    order = [name for row in architecture.tier_rows() for name in row]
    assert len(order) == len(set(order)), "a tier is listed twice in docs/architecture.md"
    tiers = {architecture.tier(module) for module in architecture.module_graph()}
    assert sorted(order) == sorted(tiers), (
        "docs/architecture.md's package order and src/ list other tiers"
    )


def test_imports_follow_the_package_order() -> None:
    rank = {name: y for y, row in enumerate(architecture.tier_rows()) for name in row}
    against = [
        f"{importer} imports {imported} ({count} times)"
        for (importer, imported), count in sorted(architecture.tier_graph().items())
        if rank[imported] >= rank[importer]
    ]
    assert not against, "imports against docs/architecture.md's package order: " + "; ".join(
        against
    )


def test_no_private_name_is_imported_from_another_module() -> None:
    found = architecture.private_imports()
    assert not found, "private names imported across modules: " + "; ".join(found)


def test_the_top_level_is_small() -> None:
    top = [p.name for p in architecture.PACKAGE.glob("*.py")]
    assert len(top) <= 10, f"{len(top)} modules at the top of src/repinterp: {sorted(top)}"


MAX_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(path.relative_to(architecture.PACKAGE)): n
        for path in architecture.PACKAGE.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_a_granularity_is_named_only_by_the_registry_and_its_own_module() -> None:
    """No surface compares a granularity's name (each asks a capability, e.g.
    ``has_strategies``), and the removed ``logic`` is named only by the registry's refusal."""
    from repinterp.core.granularities import GRANULARITIES, REMOVED

    names = "|".join([*GRANULARITIES, *REMOVED])
    compared = re.compile(
        rf"""granularity\S*\s*[!=]=\s*["']({names})["']|["']({names})["']\s*[!=]=\s*\S*granularity"""
    )
    own = {"core/granularities.py", "core/granularity.py", "strategies/granularity.py"}
    found = []
    for path in sorted(architecture.PACKAGE.rglob("*.py")):
        name = str(path.relative_to(architecture.PACKAGE))
        text = path.read_text()
        if name in own:
            continue
        found += [f"{name}: {m.group(0)}" for m in compared.finditer(text)]
        found += [f"{name}: logic" for _ in re.finditer(r"\blogic\b", text)]
    assert not found, "granularity names outside the registry: " + "; ".join(found)


def test_the_facade_stays_a_facade() -> None:
    """Issue 41: ``RepresentativeInterpreter`` reads in a few screens (≤ 300 lines) and takes
    ≤ 11 named constructor keywords; every other setting travels in ``FitConfig``."""
    import inspect

    from repinterp.interpreter import RepresentativeInterpreter

    path = architecture.PACKAGE / "interpreter.py"
    assert len(path.read_text().splitlines()) <= 300
    named = [
        p
        for p in inspect.signature(RepresentativeInterpreter).parameters.values()
        if p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    assert len(named) <= 11, [p.name for p in named]
