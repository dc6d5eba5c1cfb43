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

With ``--rule`` (`RESCORING`), the saved runs are read as if their audit had been that rule's
(`rescored`: each strategy's saved reasons scored and flagged again, the readings that depend
on the flags recomputed): how the earlier criteria's models, public since their runs, read
under a later rule, before that rule's own criterion runs on new models.

Run: ``python -m studies.shortcut_criterion [--criterion first|...|sixth] [--runs
DIR] [--rule 0.6.4|0.6.5] [--out FILE]`` (DIR: docs/results/shortcut-suite); prints the table as
Markdown (and writes it to a new ``--out``).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from repinterp.evaluation.protocols.shortcut import told_shares
from repinterp.strategies.audit import (
    REASONS,
    audit_scores,
    flags_of,
    model_ranking,
    standout_scores,
)

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
    return _finite(audit.get("told_any")) >= 90


def _clean_spared(audit: dict[str, Any]) -> bool:
    return _finite(audit.get("clean_told")) <= CLEAN_TOLD


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


RESCORING: dict[str, Callable[[list[dict[str, float]], list[Any]], list[float]]] = {
    "0.6.4": lambda reasons, classes: standout_scores(reasons, classes=classes),
    "0.6.5": audit_scores,
}
"""The audit rules a saved run can be read under (``--rule``): each the scores of a model's
strategies from their reasons and classes, flagged by `flags_of` (0.6.4 and 0.6.5 share it)."""


def rescored(run: dict[str, Any], rule: str) -> dict[str, Any]:
    """A saved run's ``strategy_audit`` as if its audit had been ``rule``'s (`RESCORING`): each
    strategy of its table scored and flagged again from its saved reasons, the model ranked
    again, and what depends on the flags recomputed (``flagged``, ``flagged_share``,
    ``any_flagged``, ``flagged_uncued``, ``first_cued``, ``shortcut_model_rank``,
    ``shortcut_flagged``, ``shortcut_score``, ``told_decided``, ``told_any``,
    ``clean_told``); ``told_flagged`` is NaN (its denominator, all the unseen cued images, is
    not saved), the maps' readings are kept."""
    table = run["strategies"]
    missing = sorted({r for row in table for r in REASONS if r not in row["reasons"]})
    if missing:
        raise ValueError(
            f"these runs were audited before the reasons {', '.join(missing)}: they cannot be "
            f"read under {rule}'s audit"
        )
    classes = [row["class"] for row in table]
    scores = RESCORING[rule]([row["reasons"] for row in table], classes)
    flags = flags_of(scores, classes)
    ranks = model_ranking(scores, [row["size"] for row in table])
    rows = [
        row | {"score": score, "flagged": flag, "model_rank": rank}
        for row, score, flag, rank in zip(table, scores, flags, ranks, strict=True)
    ]
    audit = dict(run["strategy_audit"]) | {
        "flagged": sum(flags),
        "flagged_share": 100 * sum(flags) / max(1, len(flags)),
        "any_flagged": float(any(flags)),
        "flagged_uncued": sum(row["flagged"] and not row["cued_strategy"] for row in rows),
        "told_flagged": math.nan,
    }
    shortcut = next((row for row in rows if row["shortcut"]), None)
    if shortcut is None:
        return audit
    looked = sum(row["cued"] for row in rows)
    first = min(rows, key=lambda row: row["model_rank"])
    return (
        audit
        | told_shares(rows, looked, looked)
        | {
            "told_flagged": math.nan,
            "first_cued": float(first["flagged"] and first["cued_strategy"]),
            "shortcut_model_rank": shortcut["model_rank"],
            "shortcut_flagged": float(shortcut["flagged"]),
            "shortcut_score": shortcut["score"],
        }
    )


def _audits(runs: Path, dataset: str, rule: str | None = None) -> list[dict[str, Any]] | None:
    """The per-model audits of a data set's run (read under ``rule``, `rescored`, when given),
    or None when it has not been run."""
    path = runs / folder(dataset) / "results.json"
    if not path.is_file():
        return None
    per_run = json.loads(path.read_text())["per_run"]
    if rule is not None:
        return [rescored(run, rule) for run in per_run]
    return [run["strategy_audit"] for run in per_run]


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
        return f"{_finite(audit.get('clean_told')):.1f}%"
    if row == "told" and criterion == "sixth":  # any flagged (decided, to a flagged cued one)
        return f"{_finite(audit.get('told_any')):.1f}% ({_finite(audit['told_decided']):.1f}%)"
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


def table(runs: Path, criterion: str = "first", rule: str | None = None) -> list[str]:
    """A criterion's table in Markdown: one line per row and data set, and the verdict (the
    runs read under ``rule``, `rescored`, when given)."""
    lines = [
        "| Row | Data set | Per model | Models holding | Verdict |",
        "|---|---|---|---|---|",
    ]
    verdicts = []
    rows = CRITERIA[criterion]
    for name, datasets, holds, _ in rows:
        for dataset in datasets:
            audits = _audits(runs, dataset, rule)
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
    parser.add_argument("--rule", choices=sorted(RESCORING), help="read the runs under this rule")
    parser.add_argument("--out", type=Path, help="also write the table to this new file")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.exists():
        raise SystemExit(f"--out {args.out} exists; give a new file")
    try:
        lines = table(args.runs, args.criterion, args.rule)
    except ValueError as error:
        raise SystemExit(f"--rule {args.rule}: {error}") from None
    if args.rule is not None:
        lines[:0] = [
            f"The runs of `{args.runs}` read under {args.rule}'s audit (`python -m "
            f"studies.shortcut_criterion --criterion {args.criterion} --runs {args.runs} --rule "
            f"{args.rule}`): each strategy's saved reasons scored and flagged again, the model "
            "ranked again, the maps' readings as saved.",
            "",
        ]
    print("\n".join(lines))
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")
    return lines


if __name__ == "__main__":
    main()
