"""Whether models learn each planted cue of the shortcut suite (`repinterp.data.cues`): the
shortcut rate on unseen images given the cue.

For each data set ``FAMILY-KIND:F`` and each model (the family's recipe, `RECIPES`, trained on
the data-seed-0 reference part with each ``--seeds`` seed, read from the model cache when
there), on the unseen images that carry no cue:

- ``mark``, ``move``, ``texture``: the source class's images, the cue stamped on each
  (`stamp_cue`): the share the model calls the target class (*the shortcut rate*), and the
  share of the same images without the cue it calls the target class;
- ``majority``: the other classes' images with the watermark: the share it calls the
  watermark's class, and without the watermark;
- ``markrand`` (the control): every class's images with the mark: the share whose prediction
  the mark changes.

Also each model's accuracy on the unseen images without a cue. Run (one torch thread):
``OMP_NUM_THREADS=1 PYTHONPATH=src python -m studies.cue_rates mnist-move:0.5 ...
[--seeds 100]``; prints one line per data set and model (and writes them to ``--out FILE``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from repinterp.data.cues import (
    CUES,
    MARKS,
    SHORTCUT_KINDS,
    cue_masks,
    object_pixels,
    stamp_cue,
)
from repinterp.data.datasets import load_dataset
from repinterp.evaluation.setup import recipe_for
from repinterp.store.model_cache import default_cache, trained_model


def cued_rate(spec: str, model: torch.nn.Module) -> dict[str, float]:
    """A model's rates on ``spec``'s unseen images without a cue (see the docstring), in %."""
    name = spec.partition(":")[0]
    family, _, kind = name.partition("-")
    mark, style = MARKS[family], CUES[family]
    unseen = load_dataset(spec).unseen
    clean = unseen.subset((~unseen.marked).nonzero().flatten())
    if kind in SHORTCUT_KINDS:
        looked = clean.subset((clean.labels == mark.source).nonzero().flatten())
    elif kind == "majority":
        looked = clean.subset((clean.labels != mark.target).nonzero().flatten())
    else:
        looked = clean
    cued = looked.images.clone()
    masks = cue_masks(looked.images, kind, mark, 0, style, object_pixels(looked))
    stamp_cue(cued, masks, kind, mark, style)
    model = model.eval()
    with torch.no_grad():
        plain = model(looked.inputs()).argmax(1)
        given = model(looked.normalization(cued)).argmax(1)
        accuracy = (model(clean.inputs()).argmax(1) == clean.labels).double().mean()
    out = {"accuracy": 100 * float(accuracy), "images": len(looked)}
    if kind == "markrand":
        out["changed"] = 100 * float((given != plain).double().mean())
    else:
        out["shortcut_rate"] = 100 * float((given == mark.target).double().mean())
        out["without_cue"] = 100 * float((plain == mark.target).double().mean())
    return out


def lines(specs: list[str], seeds: list[int]) -> list[str]:
    """One line per data set and model seed."""
    out = []
    for spec in specs:
        recipe = recipe_for(spec)
        if recipe is None:
            raise SystemExit(f"no recipe for {spec}")
        split = load_dataset(spec)
        for seed in seeds:
            trained = trained_model(recipe, split, spec, 0, seed, default_cache(), "cpu", False)
            rates = cued_rate(spec, trained.model)
            text = ", ".join(
                f"{key} {value:.1f}%" if key != "images" else f"{int(value)} images"
                for key, value in rates.items()
            )
            out.append(f"{spec} seed {seed}: {text}")
            print(out[-1], flush=True)
    return out


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="+", help="data sets FAMILY-KIND:F")
    parser.add_argument("--seeds", type=int, nargs="+", default=[100], help="model seeds (100)")
    parser.add_argument("--out", type=Path, help="also write the lines to this new file")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.exists():
        raise SystemExit(f"--out {args.out} exists; give a new file")
    torch.set_num_threads(1)
    found = lines(args.specs, args.seeds)
    if args.out is not None:
        args.out.write_text("\n".join(found) + "\n")
    return found


if __name__ == "__main__":
    main()
