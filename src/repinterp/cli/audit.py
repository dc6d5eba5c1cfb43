"""``repinterp audit``: the strategies of an index fitted at ``granularity="strategy"``, ranked
over the whole model, the one to look at first, first (see
[`model_strategies`][repinterp.strategies.model.model_strategies] and
[`audit`][repinterp.strategies.audit]): ``audit.json`` and a self-contained ``index.html`` (images
inline) that opens with the model-wide ranking."""

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
    "table.ranking{border-collapse:collapse}table.ranking td,table.ranking th{padding:2px 6px;"
    "border-bottom:1px solid #ddd;text-align:right}table.ranking tr.flagged{color:#c0392b}"
    "@media (max-width:600px){.strategy{padding:.3rem}}"
)


def _ranking_table(strategies: list[Strategy], names: list[str]) -> str:
    """The model-wide ranking as an HTML table, each row linked to its strategy's card."""
    from ..strategies.audit import REASONS

    head = "".join(  # a reason's name may break after its underscores: the table fits 1280 px
        f"<th>{h.replace('_', '_<wbr>')}</th>"
        for h in ("model rank", "strategy", "class", "members", "score", "flag", *REASONS)
    )
    rows = []
    for s in strategies:
        a = s.audit
        main = " (main)" if a.main else ""
        cells = [
            str(a.model_rank),
            f"<a href='#strategy-{s.id}'>{s.id}</a>",
            html.escape(names[s.predicted_class]) + main,
            str(len(s.members)),
            f"{a.score:.3f}",
            "FLAGGED" if a.flagged else "",
            *(f"{a.reasons[r]:.2f}" for r in REASONS),
        ]
        flagged = " class='flagged'" if a.flagged else ""
        rows.append(f"<tr{flagged}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    table = f"<table class='ranking'><tr>{head}</tr>{''.join(rows)}</table>"
    return f"<div style='overflow-x:auto'>{table}</div>"  # on a phone the table scrolls alone


def _page(title: str, intro: list[str], table: str, cards: list[tuple[Strategy, str]]) -> str:
    from ..display.strategy import REASON_MEANINGS

    legend = "".join(
        f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in REASON_MEANINGS.items()
    )
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        *(f"<p>{html.escape(line)}</p>" for line in intro),
        "<h2>The model's strategies, the one to look at first, first</h2>",
        table,
        f"<details><summary>What the numbers mean</summary><dl>{legend}</dl></details>",
        "<h2>Each strategy, in the same order</h2>",
    ]
    for strategy, view in cards:
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
        The strategies, class by class, each class's in the audit's order (``audit.json``'s
        ``classes``; its ``ranking`` and the page run over the whole model).

    Raises:
        ValueError: the index is not of ``granularity="strategy"``.
    """
    from ..display.strategy import FLAG_MEANING, STRATEGY_MEANING
    from ..store.outputs import write_outputs
    from ..strategies.model import audit_ranking

    ri = ws.interpreter
    if not ri.config.granularity.has_strategies:
        raise ValueError(
            f"{ws.folder} was fitted at granularity {ri.granularity!r}: the audit needs an "
            "index of granularity strategy (repinterp fit --granularity strategy)"
        )
    strategies = ri.strategies(ws.reference)
    names = ri.class_names or [str(c) for c in range(ri.index.n_classes)]
    ranked = sorted(strategies, key=lambda s: s.audit.model_rank)
    classes: dict[int, list[dict[str, Any]]] = {}
    cards = []
    for s in strategies:
        member_names = [ws.reference_name(int(i)) for i in s.members]
        composition = ws.composition(s.members.tolist())
        entry = s.to_dict() | {
            "class_name": names[s.predicted_class],
            "runner_up_name": names[s.audit.runner_up],
            "member_names": member_names,
        }
        if composition is not None:
            entry["sub_labels"] = composition
        classes.setdefault(s.predicted_class, []).append(entry)
    for s in ranked:
        shown = [ws.reference_name(int(i)) for i in s.members[:members]]
        composition = ws.composition(s.members.tolist())
        view = s.show(
            ws.reference, k=members, legend=False, sub_labels=composition, member_names=shown
        )
        cards.append((s, view.html))
    flagged = sum(s.audit.flagged for s in strategies)
    intro = [
        f"The audit of {ws.folder}, {ri.granularity_text}: {len(strategies)} strategies in "
        f"{len(classes)} classes, {flagged} flagged (red).",
        STRATEGY_MEANING,
        FLAG_MEANING,
    ]
    summary = {
        "index": str(ws.folder),
        "repinterp_version": VERSION,
        "granularity": ri.granularity_text,
        "strategy": STRATEGY_MEANING,
        "flag": FLAG_MEANING,
        "strategies": len(strategies),
        "flagged": flagged,
        "ranking": [
            row | {"class_name": names[row["predicted_class"]]} for row in audit_ranking(ranked)
        ],
        "classes": [
            {"class": c, "class_name": names[c], "strategies": entries}
            for c, entries in classes.items()
        ],
    }
    write_outputs(
        {
            out / "audit.json": (json.dumps(summary, indent=2) + "\n").encode(),
            out / page: _page(
                "repinterp audit", intro, _ranking_table(ranked, names), cards
            ).encode(),
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
        for s in sorted(strategies, key=lambda s: s.audit.model_rank):
            name = names[s.predicted_class] if names else s.predicted_class
            mark = " FLAGGED" if s.audit.flagged else ""
            print(
                f"{s.audit.model_rank}. class {name}: strategy {s.id}, rank {s.audit.rank} "
                "in its class, "
                f"{len(s.members)} members, score {s.audit.score:.3f}{mark}"
            )
    flagged = sum(s.audit.flagged for s in strategies)
    print(f"audit of {len(strategies)} strategies, {flagged} flagged: open {out / 'index.html'}")


def _data_folder(dataset: str | None) -> list[str]:
    """The folder of an ``imagefolder:PATH`` data set, which the output keeps clear of."""
    if dataset and dataset.startswith("imagefolder:"):
        return [dataset.split(":", 1)[1]]
    return []
