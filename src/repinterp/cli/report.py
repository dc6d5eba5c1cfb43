"""``repinterp report``: a static HTML report of k-means regions of an index; its flags beside
it."""

from __future__ import annotations

import argparse
from pathlib import Path

from .inputs import inputs_of, open_workspace
from .options import at_least, common, index_options, overwrite

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``repinterp report``."""
    index_options(p)
    p.add_argument("--out", required=True, help="folder for the report")
    p.add_argument(
        "--regions",
        type=at_least(1),
        help="number of regions (10 x classes), shared among the classes the model predicts on "
        "the reference set: one each (so at least as many as those classes), the rest in "
        "proportion to their images; k-means within each class",
    )
    p.add_argument("--top-k", type=at_least(0), default=6, help="similar images per region (6)")
    overwrite(p)
    common(p)


def run(args: argparse.Namespace) -> None:
    """Run ``repinterp report`` with its parsed arguments."""
    from tqdm.auto import tqdm

    from ..core.regions import RegionSet, distinct_polytopes
    from ..evaluation.groupings import region_groups
    from ..report import write_report
    from ..report.explanations import explain_to_files
    from ..store.files import refuse_folders
    from ..store.outputs import claim, refuse_inputs

    out = Path(args.out)
    with claim(out, "report", args.overwrite, inputs_of(args.weights)):
        refuse_folders(
            [out / n for n in ("index.html", "strategies.html", "audit.json")]
        )  # as the figures' names are
        ws = open_workspace(args)
        refuse_inputs(out, inputs_of(data=ws.recipe.get("dataset")))
        ri = ws.interpreter
        with tqdm(total=1, desc="k-means regions", disable=args.quiet) as bar:
            regions = RegionSet.build(ri, args.regions, args.seed, by_class=True)
            polytopes = distinct_polytopes(regions)
            bar.update()
        inputs = [p.inputs[0] for p in polytopes]
        names = [f"polytope-{n + 1}-ref-{i}" for n, i in enumerate(inputs)]
        pixels = ws.reference_pixels(inputs)
        extra = []
        for p in polytopes:
            more = {"regions": p.regions, "interprets": p.interpreted}
            sub_labels = ws.composition(p.members)
            extra.append(more if sub_labels is None else {**more, "sub_labels": sub_labels})
        entries = explain_to_files(
            ws, pixels, names, out, args.top_k, not args.quiet, inputs, extra=extra
        )
        intro = (
            f"{len(regions)} regions: k-means (seed {args.seed}) on the reference feature maps "
            f"of {args.index}, within each class the model predicts on them, the regions shared "
            "among those classes in proportion to their images, at least one each; each region "
            "is the polytope P(x) of the reference image nearest a centre. Regions whose "
            f"inputs share one polytope are drawn once: {len(polytopes)} distinct polytopes, "
            "the most representative first within each class."
        )
        n_classes = ri.fitted_index.n_classes
        unpredicted = sorted(set(range(n_classes)) - set(regions.classes.tolist()))
        if unpredicted:
            class_names = ri.class_names or [str(c) for c in range(n_classes)]
            intro += (
                " Classes without a region (the model predicts none of the reference images "
                f"as them): {', '.join(repr(class_names[c]) for c in unpredicted)}."
            )
        finds = region_groups(regions).sentence()
        if ri.granularity == "strategy":
            from .audit import write_audit

            found = len(write_audit(ws, out, args.top_k, "strategies.html"))
            finds += f"; the model's {found} strategies, ranked by the audit: strategies.html"
        intro += f" Over the reference set, {finds}."
        write_report(out / "index.html", "repinterp regions", intro, entries, ri.granularity_text)
    print(
        f"report of {len(regions)} regions, {len(polytopes)} distinct polytopes ({finds}): "
        f"open {out / 'index.html'}"
    )
