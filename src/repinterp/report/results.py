"""The files of an evaluation protocol's results (`evaluate`): `write_results` writes
``results.json``, ``units.json`` (each run's per-image values, when it has them), ``results.md``
(`results_markdown`: tables shaped like the paper's) and the protocol's plots
(`report.plots`); `rewrite_results` replaces the JSON and Markdown of results already written.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..evaluation.protocols.markdown import results_markdown
from ..store.outputs import write_outputs
from .plots import save_plots

__all__ = ["rewrite_results", "write_results"]


def _json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _json_ready(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_results(results: dict[str, Any], out: str | Path) -> list[Path]:
    """Write ``results.json``, ``units.json`` (when every run has per-image values),
    ``results.md`` and the protocol's PNG plots into ``out``, each replacing its earlier file
    by a rename (`write_outputs`).

    Returns:
        The files written.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    units = [run.get("units") for run in results.get("per_run", [])]
    contents = {}
    if units and all(u is not None for u in units):
        results = results | {
            "per_run": [
                {k: v for k, v in run.items() if k != "units"} for run in results["per_run"]
            ]
        }
        text = json.dumps(_json_ready(units), separators=(",", ":"))
        contents[out / "units.json"] = text.encode()
    plots = save_plots(results, out)
    text = json.dumps(_json_ready(results), indent=2) + "\n"
    markdown = results_markdown(results, [p.name for p in plots])
    contents = {out / "results.json": text.encode(), **contents}
    contents[out / "results.md"] = markdown.encode()
    write_outputs(contents)
    return [*contents, *plots]


def rewrite_results(results: dict[str, Any], out: str | Path) -> list[Path]:
    """Replace ``results.json`` and ``results.md`` of results already written into ``out`` (by
    a rename, `write_outputs`), its ``units.json`` and plots left as they are (the plots still
    linked).

    Returns:
        The files written.
    """
    out = Path(out)
    plots = sorted(path.name for path in out.glob("*.png"))
    contents = {
        out / "results.json": (json.dumps(_json_ready(results), indent=2) + "\n").encode(),
        out / "results.md": results_markdown(results, plots).encode(),
    }
    write_outputs(contents)
    return list(contents)
