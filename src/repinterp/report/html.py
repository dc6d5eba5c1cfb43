"""A one-page static HTML report of explained inputs: grouped by predicted class, with a table of
contents, a legend that names every number, and the heat maps' colour bar."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from ..core.interpretation import METRIC_MEANINGS
from ..display.colours import SCALE, colorbar_css
from ..display.html import MEANINGS, composition_html
from ..store.outputs import write_outputs

__all__ = ["GLOSSARY", "colorbar_css", "write_report"]

# Every number the report shows: (name, what it is).
GLOSSARY = [
    ("score", "the model's softmax probability of the predicted class on the image"),
    (
        "masked",
        "the same probability when only the 20 % hottest pixels of the image's heat map are "
        "kept and the other 80 % blacked out (higher: the heat map found what the model uses)",
    ),
    (
        "representativeness |R|",
        "reference images covered by P(x): on the input's side of every one of its boundaries",
    ),
    ("|P(x)|", "boundaries in the interpretation P(x), out of the |Q| sampled"),
    (
        "τ(x) (delta)",
        "reference images of another class that no choice of boundaries separates from the "
        "input; P(x) may cover that many",
    ),
    (
        "semantic",
        f"RI's distance of a similar image to the input, {METRIC_MEANINGS['semantic']}; the "
        "figures show it under the image's score, the JSON files hold it and name it (metric)",
    ),
]

_STYLE = """
:root { color-scheme: light dark; --ink: #222; --muted: #666; --line: #ccc; --paper: #fff; }
@media (prefers-color-scheme: dark) {
  :root { --ink: #e6e6e6; --muted: #a8a8a8; --line: #444; --paper: #15181c; }
}
body { font: 16px/1.5 system-ui, sans-serif; margin: 0 auto; padding: 1rem; max-width: 1280px;
       color: var(--ink); background: var(--paper); }
h1 { font-size: 1.5rem; } h2 { font-size: 1.3rem; margin-top: 2.5rem;
  border-bottom: 1px solid var(--line); } h3 { font-size: 1.05rem; margin-top: 1.5rem; }
table { border-collapse: collapse; margin: .5rem 0; font-size: .95rem; }
td, th { border: 1px solid var(--line); padding: .2rem .6rem; text-align: left; }
th { font-weight: 600; } abbr { cursor: help; }
dl.legend { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem; }
dl.legend dt { font-weight: 600; } dl.legend dd { margin: 0; }
.figure { overflow-x: auto; } .figure img { width: 100%; min-width: 900px; display: block;
  background: #fff; border: 1px solid var(--line); }
.colorbar { height: 14px; width: min(420px, 100%); border: 1px solid var(--line); }
.scale { display: flex; justify-content: space-between; width: min(420px, 100%);
  font-size: .9rem; color: var(--muted); } .scale-note { margin-top: .2rem; }
.granularity { font-weight: 600; margin: -.5rem 0 .5rem; }
nav ol, ol.similar { columns: 2 16rem; } .muted { color: var(--muted); } .note { color: #c06000; }
@media (max-width: 600px) { dl.legend { grid-template-columns: 1fr; } dl.legend dd {
  margin-bottom: .5rem; } }
"""


def _class_of(summary: dict[str, Any]) -> str:
    name = summary.get("class_name")
    return str(summary["predicted_class"] if name is None else name)


def _anchor(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text)


def _entry(entry: dict[str, Any]) -> list[str]:
    s = entry["summary"]
    name = html.escape(entry["name"])
    tips = dict(GLOSSARY)
    rows = [
        ("predicted class", "the class the model predicts for the input", _class_of(s)),
        ("score", tips["score"], f"{s['score']:.3f}"),
        ("representativeness |R|", tips["representativeness |R|"], str(s["representativeness"])),
        ("|P(x)|", tips["|P(x)|"], str(len(s["boundaries"]))),
        ("τ(x) (delta)", tips["τ(x) (delta)"], str(s["delta"])),
    ]
    if s.get("reference_name"):
        rows.insert(0, ("input", "the reference image explained", s["reference_name"]))
    if s.get("strategy") is not None:
        flag = {True: ", flagged by the audit", False: ", not flagged"}.get(
            s["strategy_flagged"], ""
        )
        rows.append(("strategy", MEANINGS["strategy"], f"{s['strategy']}{flag}"))
    if "regions" in s:
        regions = ", ".join(map(str, s["regions"]))
        rows.append(("regions", MEANINGS["regions"], regions))
        rows.append(("interprets", MEANINGS["interprets"], str(s["interprets"])))
    cells = [
        f"<tr><th><abbr title='{html.escape(tip)}'>{html.escape(key)}</abbr></th>"
        f"<td>{html.escape(value)}</td></tr>"
        for key, tip, value in rows
    ]
    if s.get("sub_labels"):
        cells.append(
            f"<tr><th><abbr title='{html.escape(MEANINGS['sub-labels'])}'>sub-labels</abbr></th>"
            f"<td>{composition_html(s['sub_labels'], width=None)}</td></tr>"
        )
    table = "".join(cells)
    note = f"<p class='note'>{html.escape(s['message'])}</p>" if s["message"] else ""
    return [
        f"<h3 id='{_anchor(entry['name'])}'>{name}: predicted "
        f"{html.escape(_class_of(s))}</h3><table>{table}</table>{note}",
        f"<div class='figure'><img src='{html.escape(entry['figure'])}' "
        f"alt='case study {name}: the input, its most similar reference images, their heat "
        "maps and scores'></div>",
        _similar_files(s),
        f"<p><a href='{html.escape(entry['json'])}'>{name} as JSON</a></p>",
    ]


def _similar_files(summary: dict[str, Any]) -> str:
    """The similar images of the figure by name, in its order, with their distances."""
    items = "".join(
        f"<li>{html.escape(s.get('name') or 'reference ' + str(s['reference']))} "
        f"<span class='muted'>(distance {s['distance']:.4g})</span></li>"
        for s in summary.get("similar", [])
    )
    what = f"The most similar images ({html.escape(summary.get('metric', 'semantic'))} distance)"
    return f"<p class='similar'>{what}:</p><ol class='similar'>{items}</ol>" if items else ""


def write_report(
    path: str | Path,
    title: str,
    intro: str,
    entries: list[dict[str, Any]],
    granularity: str | None = None,
) -> None:
    """Write ``index.html``: the entries under a heading per predicted class, a table of
    contents, and a legend with the heat maps' colour bar.

    Args:
        path: the HTML file to write (replaced by a rename, see `write_outputs`).
        title: page title.
        intro: a paragraph about the model, data and index (plain text).
        entries: one per explained input: ``name``, ``figure`` (relative path of its PNG),
            ``json`` (relative path of its JSON) and ``summary`` (``Interpretation.to_dict()``;
            a polytope's card also ``regions``, ``interprets`` and, where sub-labels are
            known, ``sub_labels``: [`composition`][repinterp.core.groups.composition]).
        granularity: the index's granularity in words
            ([`granularity_text`][repinterp.interpreter.RepresentativeInterpreter.granularity_text]),
            shown under the title; None: not shown.
    """
    classes: dict[str, list[dict[str, Any]]] = {}
    for entry in sorted(entries, key=lambda e: e["summary"]["predicted_class"]):
        classes.setdefault(_class_of(entry["summary"]), []).append(entry)
    toc = "".join(
        f"<li><a href='#class-{_anchor(c)}'>class {html.escape(c)}</a>: "
        + ", ".join(f"<a href='#{_anchor(e['name'])}'>{html.escape(e['name'])}</a>" for e in group)
        + "</li>"
        for c, group in classes.items()
    )
    named = list(GLOSSARY)
    if granularity is not None:
        named.append(("granularity", MEANINGS["granularity"]))
    if any(e["summary"].get("sub_labels") for e in entries):
        named.append(("sub-labels", MEANINGS["sub-labels"]))
    glossary = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in named)
    shown = "" if granularity is None else f"<p class='granularity'>{html.escape(granularity)}</p>"
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>{shown}<p>{html.escape(intro)}</p>",
        f"<nav aria-label='contents'><h2>Contents</h2><ol>{toc}</ol></nav>",
        "<section id='legend'><h2>How to read the figures</h2>",
        "<p>Each figure: the input, then its most similar covered reference images (ranked by "
        "the semantic distance, the paper's Dist, shown under each); the rows show the images "
        "with their score, the heat map alone, and the heat map over the image with the masked "
        "score.</p>",
        f"<div class='colorbar' style='background: {colorbar_css()}' role='img' "
        f"aria-label='colour bar of the heat maps'></div>",
        "<div class='scale'><span>0 = coldest pixel</span><span>1 = hottest pixel</span></div>",
        f"<p class='scale-note'>Colours of the heat maps: {html.escape(SCALE)}.</p>",
        f"<dl class='legend'>{glossary}</dl></section>",
    ]
    for c, group in classes.items():
        parts.append(f"<h2 id='class-{_anchor(c)}'>Class {html.escape(c)}</h2>")
        for entry in group:
            parts += _entry(entry)
    parts.append("</body></html>")
    write_outputs({Path(path): "\n".join(parts).encode()})
