"""``repinterp explain``: explain images with a saved index (`explain_to_files`), and, with
``--contrast``, the class it names (`contrast_class`); its flags beside it."""

from __future__ import annotations

import argparse
import io
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .inputs import inputs_of, open_workspace
from .options import at_least, common, index_options, overwrite

if TYPE_CHECKING:
    from ..workspace import Workspace

__all__ = ["FAR_PERCENTILE", "add_arguments", "contrast_class", "run"]


def _number(text: str) -> int | None:
    """``text`` as a whole number of ASCII digits (``"²"`` is not one), or None."""
    return int(text) if text.isascii() and text.isdigit() else None


def contrast_class(workspace: Workspace, given: str) -> tuple[int, str | None]:
    """The class ``--contrast`` names, by its name or else its index, and a note to show
    when ``given`` is both a class's name and another class's index (the name is taken).

    Raises:
        ValueError: no such class.
    """
    names = workspace.interpreter.class_names or []
    n = workspace.interpreter.index.n_classes
    index = _number(given)
    if given in names:
        c = names.index(given)
        if index is None or index == c or index >= n:
            return c, None
        return c, (
            f"--contrast {given}: the class named {given!r} (index {c}), not class index "
            f"{index} (named {names[index]!r})"
        )
    if index is not None and index < n:
        return index, None
    known = ", ".join(names) if names else f"0 to {n - 1}"
    raise ValueError(f"--contrast {given}: no such class (classes: {known})")


FAR_PERCENTILE = 95
"""`explain` warns about an input whose ``distance_percentile`` exceeds this."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``repinterp explain``."""
    p.add_argument(
        "images", nargs="+", metavar="IMAGE", help="image files, or reference:I / unseen:I"
    )
    index_options(p)
    p.add_argument("--out", required=True, help="folder for the figures and JSON files")
    p.add_argument("--top-k", type=at_least(0), default=8, help="similar images shown (8)")
    p.add_argument(
        "--contrast",
        metavar="CLASS",
        help="beyond the paper: also draw, for each image predicted another class, the "
        "contrastive map of why the model says its class rather than CLASS (a class's name, "
        "else its index): the heat map of the boundary between the two classes at the image "
        "(Eq. 2's weights)",
    )
    overwrite(p)
    common(p)


INPUTS_FILE = "inputs.csv"
"""What `explain` writes beside the figures: which input each output name stands for."""
INPUTS_COLUMNS = ("name", "input", "path", "figure", "json", "contrast_figure")


def _inputs_file(out: Path, specs: list[str], entries: list[dict[str, Any]]) -> bytes:
    """``inputs.csv``, one row per output name (sorted): the input as given (a file, or
    ``reference:I``), its absolute path (empty for an image of the data set) and the files
    written for it; the rows of an earlier ``explain`` into ``out`` whose names this one did
    not write again are kept."""
    import csv

    from ..store.outputs import listed

    rows: dict[str, dict[str, str]] = {}
    if INPUTS_FILE in listed(out) and (out / INPUTS_FILE).is_file():
        with suppress(ValueError, csv.Error), open(out / INPUTS_FILE, newline="") as f:
            rows = {row["name"]: row for row in csv.DictReader(f) if row.get("name")}
    for spec, entry in zip(specs, entries, strict=True):
        part, _, number = spec.partition(":")
        numbered = part in ("reference", "unseen") and _number(number) is not None
        rows[entry["name"]] = {
            "name": entry["name"],
            "input": spec,
            "path": "" if numbered else str(Path(spec).resolve()),
            "figure": entry["figure"],
            "json": entry["json"],
            "contrast_figure": entry["summary"].get("contrast", {}).get("figure", ""),
        }
    text = io.StringIO()
    writer = csv.DictWriter(text, INPUTS_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows[name] for name in sorted(rows))
    return text.getvalue().encode()


def run(args: argparse.Namespace) -> None:
    """Run ``repinterp explain`` with its parsed arguments."""
    from ..report.explanations import explain_to_files
    from ..store.files import refuse_folders
    from ..store.outputs import claim, listed, refuse_inputs, write_outputs
    from ..workspace import resolve_images
    from .strategy_notes import explain_note

    out = Path(args.out)
    parts = [spec.partition(":") for spec in args.images]
    numbered = [p in ("reference", "unseen") and _number(n) is not None for p, _, n in parts]
    files = [spec for spec, no in zip(args.images, numbered, strict=True) if not no]
    with claim(out, "explain", args.overwrite, inputs_of(args.weights, *files)):
        ws = open_workspace(args)
        refuse_inputs(out, inputs_of(data=ws.recipe.get("dataset")))
        refuse_folders([out / INPUTS_FILE])
        if (out / INPUTS_FILE).exists() and INPUTS_FILE not in listed(out):
            raise ValueError(
                f"{out / INPUTS_FILE} was not written by repinterp and is kept: move it or give "
                "another --out (explain writes which input each name stands for there)"
            )
        pixels, names = resolve_images(ws, args.images)
        own = [_number(n) if p == "reference" else None for p, _, n in parts]
        contrast = None
        if args.contrast is not None:
            contrast, note = contrast_class(ws, args.contrast)
            if note:
                print(note)  # even with --quiet: which class is a choice made for the user
        entries = explain_to_files(
            ws, pixels, names, out, args.top_k, not args.quiet, own, contrast=contrast
        )
        write_outputs({out / INPUTS_FILE: _inputs_file(out, args.images, entries)})
    for entry in entries:
        s = entry["summary"]
        print(
            f"{entry['name']}: class {s['class_name'] or s['predicted_class']}, "
            f"|P| = {len(s['boundaries'])}, representativeness {s['representativeness']}, "
            f"delta {s['delta']} -> {out / entry['figure']}"
        )
        far = s["distance_percentile"]
        if far is not None and far > FAR_PERCENTILE:
            print(
                f"warning: {entry['name']} lies farther from its nearest covered reference image "
                f"than {far:.1f}% of them from theirs (above {FAR_PERCENTILE}%): it may be unlike "
                "every reference image, and its explanation a guess"
            )
        note = explain_note(entry["name"], s)
        if note is not None:
            print(note)
        vs = s.get("contrast", {})
        if "message" in vs:
            print(f"{entry['name']}: no contrast with class {vs['class_name']!r}: {vs['message']}")
    print(f"which input each name stands for: {out / INPUTS_FILE}")
