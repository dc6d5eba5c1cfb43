"""The pass/fail table of the shortcut audit criteria (docs/results.md, "Shortcut audit
criterion, pre-registered 2026-11-28", "... second criterion, ..." to "... sixth criterion,
..."), read from the runs of ``docs/results/shortcut_suite_runs.sh``.

Each data set's run (``repinterp evaluate --protocol shortcut --model-seeds 5``) is a
``results.json`` whose ``per_run[r]["strategy_audit"]`` holds model r's audit over the whole
model (`repinterp.evaluation.protocols.shortcut.strategy_audit`). A row holds on a model when
its condition (`ROWS`) does, and passes on a data set when it holds on at least `NEEDED` of its
models; the criterion passes when every row passes on every data set it names. The first
criterion (`ROWS`) reads the one shortcut strategy (holding most cued images); the second
(`SECOND`) reads every *cued* strategy (at least half of its unseen images cued), as a cue the
discovery splits over several strategies makes several; the third and the fourth have the
second's rows (on other models, each for another audit); the fifth (`FIFTH`) reads *told* over
the cued images the model predicts the cue's class; the sixth (`SIXTH`) reads *told* as
``explain`` tells it (a flagged strategy, cued or not) and adds what the flag costs: at most
`CLEAN_TOLD` % of the uncued images the model predicts the cue's class told a flagged strategy.

Run: ``python -m studies.shortcut_criterion [--criterion first|...|sixth] [--runs
DIR] [--out FILE]`` (DIR: docs/results/shortcut-suite); prints the table as Markdown (and writes
it to a new ``--out``).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

SHORTCUTS = tuple(
    f"{family}-{kind}"
    for kind in ("mark:0.3", "move:0.5", "texture:0.3", "majority:0.9")
    for family in ("mnist", "shapes")
)
"""The shortcut data sets of the criterion."""
CLEAN_TOLD = 50
"""The sixth criterion's bound on the uncued images of the cue's class told a flagged strategy
(%)."""
LOCATED = tuple(name for name in SHORTCUTS if "-mark:" in name or "-move:" in name)
"""The shortcut data sets whose cue has a place (a box): the map row."""
CONTROLS = tuple(
    f"{family}-{kind}" for kind in ("markrand:0.3", "mark:0") for family in ("mnist", "shapes")
)
"""The controls: the mark on every class at random, and no cue."""
NEEDED = 4
"""Models (of 5) on which a row must hold."""
MODELS = 5


def _finite(value: Any) -> float:
    return float(value) if value is not None and math.isfinite(float(value)) else math.nan


def _flagged_first(audit: dict[str, Any]) -> bool:
    return _finite(audit["shortcut_flagged"]) == 1 and _finite(audit["shortcut_model_rank"]) == 1


def _why_map(audit: dict[str, Any]) -> bool:
    why = _finite(audit["why_on_cue"])
    return why >= 3 * _finite(audit["cue_area"]) and why > _finite(audit["gradcam_on_cue"])


def _quiet(audit: dict[str, Any]) -> bool:
    return audit["flagged"] == 0


def _told(audit: dict[str, Any]) -> bool:
    return _finite(audit["shortcut_flagged"]) == 1 and _finite(audit["told"]) >= 90


def _cued_first(audit: dict[str, Any]) -> bool:
    return _finite(audit["first_cued"]) == 1 and _finite(audit["shortcut_flagged"]) == 1


def _told_flagged(audit: dict[str, Any]) -> bool:
    return _finite(audit["told_flagged"]) >= 90


def _told_decided(audit: dict[str, Any]) -> bool:
    return _finite(audit["told_decided"]) >= 90


def _told_any(audit: dict[str, Any]) -> bool:
    return _finite(audit["told_any"]) >= 90


def _clean_spared(audit: dict[str, Any]) -> bool:
    return _finite(audit["clean_told"]) <= CLEAN_TOLD


Row = tuple[str, tuple[str, ...], Callable[[dict[str, Any]], bool], str]
ROWS: list[Row] = [
    (
        "flagged and first",
        SHORTCUTS,
        _flagged_first,
        "the shortcut strategy is flagged and ranks 1st of the whole model",
    ),
    (
        "why map on the cue",
        LOCATED,
        _why_map,
        "its why map's mass on each cued image's own cue >= 3 x the cue's area and > Grad-CAM's",
    ),
    ("no false alarm", CONTROLS, _quiet, "no strategy of the model is flagged"),
    (
        "told",
        SHORTCUTS,
        _told,
        ">= 90% of the unseen cued images are assigned the shortcut strategy, which is flagged",
    ),
]
"""The first criterion's rows: each its name, its data sets, its condition on one model's
``strategy_audit``, and the condition in words."""
SECOND: list[Row] = [
    (
        "flagged and first",
        SHORTCUTS,
        _cued_first,
        "the first strategy of the whole model is flagged and cued, and the shortcut strategy "
        "is flagged",
    ),
    ROWS[1],
    ROWS[2],
    (
        "told",
        SHORTCUTS,
        _told_flagged,
        ">= 90% of the unseen cued images are assigned a flagged cued strategy",
    ),
]
"""The second criterion's rows (see the module's docstring)."""
FIFTH: list[Row] = [
    *SECOND[:3],
    (
        "told",
        SHORTCUTS,
        _told_decided,
        ">= 90% of the unseen cued images that the model predicts the cue's class are assigned "
        "a flagged cued strategy",
    ),
]
"""The fifth criterion's rows: the second's, *told* read over the cued images the cue decides
(an image the model predicts another class for is told its own class's strategy)."""
SIXTH: list[Row] = [
    *SECOND[:3],
    (
        "told",
        SHORTCUTS,
        _told_any,
        ">= 90% of the unseen cued images that the model predicts the cue's class are assigned "
        "a flagged strategy",
    ),
    (
        "clean spared",
        SHORTCUTS,
        _clean_spared,
        f"<= {CLEAN_TOLD}% of the unseen uncued images that the model predicts the cue's class "
        "are assigned a flagged strategy",
    ),
]
"""The sixth criterion's rows: the fifth's, *told* read as ``explain`` tells it (any flagged
strategy: a cued image in a strategy that holds uncued images too is still told the flag),
and the flag's cost on the class's own images."""
CRITERIA = {
    "first": ROWS,
    "second": SECOND,
    "third": SECOND,
    "fourth": SECOND,
    "fifth": FIFTH,
    "sixth": SIXTH,
}


def folder(dataset: str) -> str:
    """The run folder of a data set under the runs' folder (``mnist-move:0.5`` ->
    ``mnist-move-0.5``)."""
    return dataset.replace(":", "-")


def _audits(runs: Path, dataset: str) -> list[dict[str, Any]] | None:
    """The per-model audits of a data set's run, or None when it has not been run."""
    path = runs / folder(dataset) / "results.json"
    if not path.is_file():
        return None
    return [run["strategy_audit"] for run in json.loads(path.read_text())["per_run"]]


def _shown(audit: dict[str, Any], row: str, criterion: str = "first") -> str:
    """What a model measured for a row, in a few characters."""
    if row == "why map on the cue":
        return (
            f"{_finite(audit['why_on_cue']):.1f}/{_finite(audit['gradcam_on_cue']):.1f}/"
            f"{_finite(audit['cue_area']):.1f}"
        )
    if row == "no false alarm":
        return f"{audit['flagged']}/{audit['strategies']}"
    flag = {1.0: "F", 0.0: "-"}.get(_finite(audit["shortcut_flagged"]), "?")
    if row == "clean spared":
        return f"{_finite(audit['clean_told']):.1f}%"
    if row == "told" and criterion == "sixth":  # any flagged (decided, to a flagged cued one)
        return f"{_finite(audit['told_any']):.1f}% ({_finite(audit['told_decided']):.1f}%)"
    if row == "told" and criterion == "fifth":  # one decimal: 89.9% does not read as 90%
        return f"{_finite(audit['told_decided']):.1f}% ({_finite(audit['told_flagged']):.1f}%)"
    if row == "told" and criterion != "first":
        return f"{_finite(audit['told_flagged']):.0f}%"
    if row == "told":
        return f"{_finite(audit['told']):.0f}%{flag}"
    if criterion != "first":
        first = {1.0: "cued", 0.0: "not"}.get(_finite(audit["first_cued"]), "?")
        return f"{first}/#{_finite(audit['shortcut_model_rank']):.0f}{flag}"
    return f"#{_finite(audit['shortcut_model_rank']):.0f}{flag}"


def table(runs: Path, criterion: str = "first") -> list[str]:
    """A criterion's table in Markdown: one line per row and data set, and the verdict."""
    lines = [
        "| Row | Data set | Per model | Models holding | Verdict |",
        "|---|---|---|---|---|",
    ]
    verdicts = []
    rows = CRITERIA[criterion]
    for name, datasets, holds, _ in rows:
        for dataset in datasets:
            audits = _audits(runs, dataset)
            if audits is None:
                lines.append(f"| {name} | `{dataset}` | not run | | **not run** |")
                verdicts.append(False)
                continue
            held = sum(holds(a) for a in audits)
            ok = held >= NEEDED and len(audits) == MODELS
            verdicts.append(ok)
            shown = ", ".join(_shown(a, name, criterion) for a in audits)
            verdict = "pass" if ok else "fail"
            lines.append(f"| {name} | `{dataset}` | {shown} | {held} / {len(audits)} | {verdict} |")
    passed = sum(verdicts)
    lines += ["", f"{passed} of {len(verdicts)} lines pass; the criterion "]
    lines[-1] += "passes." if passed == len(verdicts) else "fails."
    legend = "; ".join(f"*{name}*: {words}" for name, _, _, words in rows)
    lines += [
        "",
        f"A line passes when its condition holds on at least {NEEDED} of {MODELS} models "
        f"({legend}). Per model: "
        + (
            "whether the first strategy is flagged and cued, then the shortcut strategy's "
            "`#rank` and `F` (flagged) or `-`; why map / Grad-CAM / cue area (%); flagged / all "
            "strategies; "
            + {
                "fifth": "told (%), to a flagged cued strategy, of the cued images the model "
                "predicts the cue's class (of all of them).",
                "sixth": "told (%), to a flagged strategy, of the cued images the model "
                "predicts the cue's class (to a flagged cued strategy); clean told (%).",
            }.get(criterion, "told (%), to a flagged cued strategy.")
            if criterion != "first"
            else "`#rank` and `F` (flagged) or `-`; why map / Grad-CAM / cue area (%); flagged / "
            "all strategies; told (%) and the flag."
        ),
    ]
    return lines


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--criterion", choices=sorted(CRITERIA), default="first")
    parser.add_argument("--runs", type=Path, default=Path("docs/results/shortcut-suite"))
    parser.add_argument("--out", type=Path, help="also write the table to this new file")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.exists():
        raise SystemExit(f"--out {args.out} exists; give a new file")
    lines = table(args.runs, args.criterion)
    print("\n".join(lines))
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")
    return lines


if __name__ == "__main__":
    main()
