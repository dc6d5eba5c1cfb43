"""A one-page static HTML report of explained inputs."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

__all__ = ["write_report"]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: .5rem 0; font-size: .9rem; }
td, th { border: 1px solid #ccc; padding: .2rem .6rem; text-align: left; }
img { max-width: 100%; border: 1px solid #ddd; }
.note { color: #a15c00; }
"""


def write_report(path: str | Path, title: str, intro: str, entries: list[dict[str, Any]]) -> None:
    """Write ``index.html``.

    Args:
        path: the HTML file to write.
        title: page title.
        intro: a paragraph about the model, data and index (plain text).
        entries: one per explained input: ``name``, ``figure`` (relative path of its PNG),
            ``json`` (relative path of its JSON) and ``summary`` (``Interpretation.to_dict()``).
    """
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><p>{html.escape(intro)}</p>",
    ]
    for entry in entries:
        s = entry["summary"]
        label = s["class_name"] if s["class_name"] is not None else s["predicted_class"]
        rows = [
            ("predicted class", f"{label} (score {s['score']:.3f})"),
            ("representativeness", f"{s['representativeness']} reference images covered"),
            ("boundaries in P(x)", str(len(s["boundaries"]))),
            ("delta", str(s["delta"])),
        ]
        table = "".join(
            f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows
        )
        note = f"<p class='note'>{html.escape(s['message'])}</p>" if s["message"] else ""
        parts += [
            f"<h2>{html.escape(entry['name'])}</h2><table>{table}</table>{note}",
            f"<img src='{html.escape(entry['figure'])}' alt='case study {entry['name']}'>",
            f"<p><a href='{html.escape(entry['json'])}'>JSON</a></p>",
        ]
    parts.append("</body></html>")
    Path(path).write_text("\n".join(parts))
