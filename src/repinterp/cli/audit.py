"""``repinterp audit``: the strategies of an index fitted at ``granularity="strategy"``, class by
class, the one to look at first, first (see
[`model_strategies`][repinterp.strategies.model.model_strategies]): ``audit.json`` and a
self-contained ``index.html`` (images inline)."""

from __future__ import annotations

import argparse
import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..runtime.version import VERSION
from .options import at_least, common, index_options, overwrite

if TYPE_CHECKING:
    from ..strategies.model import Strategy
    from ..workspace import Workspace

__all__ = ["add_arguments", "audit_command", "write_audit"]

_STYLE = (
    "body{font-family:sans-serif;margin:1rem auto;max-width:1200px;padding:0 .8rem}"
    ".strategy{border:1px solid #ccc;border-radius:6px;padding:.6rem;margin:.8rem 0}"
    ".strategy.flagged{border:2px solid #c0392b}"
    ".ri-tile img{max-width:100%}"
    "@media (max-width:600px){.strategy{padding:.3rem}}"
)


def _page(title: str, intro: str, sections: list[tuple[str, list[tuple[Any, str]]]]) -> str:
    from ..display.strategy import REASON_MEANINGS

    legend = "".join(
        f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in REASON_MEANINGS.items()
    )
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><p>{html.escape(intro)}</p>",
        f"<details><summary>What the numbers mean</summary><dl>{legend}</dl></details>",
    ]
    for heading, strategies in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        for strategy, view in strategies:
            flagged = " flagged" if strategy.audit.flagged else ""
            parts.append(
                f"<section class='strategy{flagged}' id='strategy-{strategy.id}'>{view}</section>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``repinterp audit``."""
    index_options(p)
    p.add_argument("--out", required=True, help="folder for audit.json and index.html")
    p.add_argument("--members", type=at_least(0), default=8, help="members shown per strategy (8)")
    overwrite(p)
    common(p)


def write_audit(ws: Workspace, out: Path, members: int, page: str) -> list[Strategy]:
    """Write ``audit.json`` and the page ``page`` (self-contained HTML) of the strategies of
    ``ws``'s index into ``out`` (claimed by the caller), ``members`` members shown each.

    Returns:
        The strategies, class by class, each class's in the audit's order.

    Raises:
        ValueError: the index is not of ``granularity="strategy"``.
    """
    from ..store.outputs import write_outputs

    ri = ws.interpreter
    if not ri.config.granularity.has_strategies:
        raise ValueError(
            f"{ws.folder} was fitted at granularity {ri.granularity!r}: the audit needs an "
            "index of granularity strategy (repinterp fit --granularity strategy)"
        )
    strategies = ri.strategies(ws.reference)
    names = ri.class_names or [str(c) for c in range(ri.index.n_classes)]
    classes: dict[int, list[Strategy]] = {}
    for s in strategies:
        classes.setdefault(s.predicted_class, []).append(s)
    record, sections = [], []
    for c, group in classes.items():
        entries, views = [], []
        for s in group:
            entry = s.to_dict()
            entry["member_names"] = [ws.reference_name(int(i)) for i in s.members[:members]]
            composition = ws.composition(s.members.tolist())
            if composition is not None:
                entry["sub_labels"] = composition
            entries.append(entry)
            view = s.show(ws.reference, k=members, legend=False, sub_labels=composition)
            views.append((s, view.html))
        flagged = sum(s.audit.flagged for s in group)
        record.append({"class": c, "class_name": names[c], "strategies": entries})
        count = f"{len(group)} strateg{'y' if len(group) == 1 else 'ies'}"
        sections.append((f"Class {names[c]}: {count}, {flagged} flagged", views))
    flagged = sum(s.audit.flagged for s in strategies)
    intro = (
        f"The strategies of {ws.folder}, {ri.granularity_text}: within each class the model "
        "predicts, groups of reference images it treats alike, found without labels, each with "
        "the polytope of its member nearest its centre. They are ranked by the audit, which "
        "reads the model's logits, the strategies' heat maps and pooled features, never a "
        f"label: {len(strategies)} strategies in {len(classes)} classes, {flagged} flagged "
        "(score 0.3 or more, red frame)."
    )
    summary = {
        "index": str(ws.folder),
        "repinterp_version": VERSION,
        "granularity": ri.granularity_text,
        "strategies": len(strategies),
        "flagged": flagged,
        "classes": record,
    }
    write_outputs(
        {
            out / "audit.json": (json.dumps(summary, indent=2) + "\n").encode(),
            out / page: _page("repinterp audit", intro, sections).encode(),
        }
    )
    return strategies


def audit_command(args: argparse.Namespace, inputs: list[Path]) -> None:
    """Run ``repinterp audit`` (``inputs``: the files it reads, which its output keeps clear of).

    Raises:
        ValueError: the index is not of ``granularity="strategy"``.
    """
    from ..store.files import refuse_folders
    from ..store.outputs import claim, refuse_inputs
    from ..workspace import open_index

    out = Path(args.out)
    with claim(out, "audit", args.overwrite, inputs):
        refuse_folders([out / "audit.json", out / "index.html"])  # before any work
        ws = open_index(
            args.index, device=args.device, progress=not args.quiet, weights=args.weights
        )
        refuse_inputs(out, [Path(p) for p in _data_folder(ws.recipe.get("dataset"))])
        strategies = write_audit(ws, out, args.members, "index.html")
    names = ws.interpreter.class_names
    if not args.quiet:
        for s in strategies:
            name = names[s.predicted_class] if names else s.predicted_class
            mark = " FLAGGED" if s.audit.flagged else ""
            print(
                f"class {name}: strategy {s.id}, rank {s.audit.rank}, "
                f"{len(s.members)} members, score {s.audit.score:.3f}{mark}"
            )
    flagged = sum(s.audit.flagged for s in strategies)
    print(f"audit of {len(strategies)} strategies, {flagged} flagged: open {out / 'index.html'}")


def _data_folder(dataset: str | None) -> list[str]:
    """The folder of an ``imagefolder:PATH`` data set, which the output keeps clear of."""
    if dataset and dataset.startswith("imagefolder:"):
        return [dataset.split(":", 1)[1]]
    return []
