"""Plant a known cue in a copy of a user's image folder (one subfolder per class), to check
that `repinterp audit` finds a shortcut one knows is there.

The kinds are the shortcut suite's (`repinterp.data.cues`), sized to each image
(`repinterp.data.cues.sized_cues`): ``mark`` (a square by the top-left corner), ``move`` (the
same square at a place drawn for each image), ``texture`` (faint diagonal stripes) take a
seeded share ``--fraction`` of ``--source``'s images, stamp the cue and file them under
``--target`` (the shortcut); ``majority`` stamps a watermark in the bottom-right corner on
that share of ``--target``'s own images and ``markrand`` a mark on that share of every
class's images, both keeping the classes. Every other image is copied byte for byte.

The new folder ``--out`` holds the classes' subfolders and ``cues.json`` (for evaluation
only; `repinterp` reads image files only): the settings and, per cued image, its original
path, its new path and its cue's box ``(x0, y0, x1, y1)`` in pixels (the whole image for the
texture; for the watermark its outer box). Cued images are written as PNG (lossless, so the
cue is exactly as stamped). The input folder is never written to; an existing non-empty
``--out`` is refused.

Run: ``python -m studies.plant_cue --kind move --source cup --target cat --fraction 0.3 --in
DIR --out DIR2 [--seed 0]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from repinterp.data.cues import CUE_KINDS, SHORTCUT_KINDS, cue_rows, plant_cue
from repinterp.data.image_files import image_tensor, read_image

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


def _class_files(root: Path) -> dict[str, list[Path]]:
    """The image files of each class subfolder (sorted, hidden files left out)."""
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    return {
        folder.name: sorted(
            p
            for p in folder.rglob("*")
            if p.is_file()
            and p.suffix.lower() in IMAGE_SUFFIXES
            and not any(part.startswith(".") for part in p.relative_to(root).parts)
        )
        for folder in classes
    }


def _check(source_dir: Path, out: Path, classes: list[str], args: argparse.Namespace) -> None:
    """Refuse settings that would write into the input, overwrite, or mean nothing."""
    inside = os.path.commonpath([source_dir.resolve(), out.resolve()])
    if inside in (str(source_dir.resolve()), str(out.resolve())):
        raise SystemExit(f"--out {out} and --in {source_dir} must not hold one another")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SystemExit(f"--out {out} exists and is not an empty folder; give a new one")
    if len(classes) < 2:
        raise SystemExit(f"--in {source_dir} holds {len(classes)} class folder(s); 2 are needed")
    needed = {"target": args.target} | (
        {"source": args.source} if args.kind in SHORTCUT_KINDS else {}
    )
    for flag, name in needed.items():
        if name not in classes:
            raise SystemExit(f"--{flag} {name!r} is not a class of --in: {', '.join(classes)}")
    if args.kind in SHORTCUT_KINDS and args.source == args.target:
        raise SystemExit("--source and --target must differ")
    if not 0 <= args.fraction <= 1:
        raise SystemExit(f"--fraction must be in [0, 1], got {args.fraction}")


def _new(destination: Path) -> Path:
    """``destination``, its folder made; refused when two images would be written there."""
    if destination.exists():
        raise SystemExit(f"{destination} would be written twice: rename one of its sources")
    destination.parent.mkdir(parents=True, exist_ok=True)
    return destination


def plant_folder(
    source_dir: Path,
    out: Path,
    kind: str,
    source: str | None,
    target: str,
    fraction: float,
    seed: int = 0,
) -> dict[str, Any]:
    """Write ``source_dir``'s classes to the new folder ``out`` with a planted cue (see the
    module's docstring) and return what ``cues.json`` holds."""
    files = _class_files(source_dir)
    names = list(files)
    paths = [p for name in names for p in files[name]]
    labels = torch.tensor([i for i, name in enumerate(names) for _ in files[name]])
    classes = {
        "markrand": list(range(len(names))),
        "majority": [names.index(target)],
    }.get(kind, [names.index(source)] if source is not None else [])
    chosen = set(cue_rows(labels, classes, fraction, seed).tolist())
    out.mkdir(parents=True, exist_ok=True)
    cued = []
    for row, (path, label) in enumerate(zip(paths, labels.tolist(), strict=True)):
        relative = path.relative_to(source_dir / names[label])
        if row not in chosen:
            shutil.copyfile(path, _new(out / names[label] / relative))
            continue
        image = read_image(path, 3)
        pixels = image_tensor(image, 3)
        mask = plant_cue(pixels, kind, seed=seed * 1_000_003 + row)
        filed = names.index(target) if kind in SHORTCUT_KINDS else label
        destination = _new((out / names[filed] / relative).with_suffix(".png"))
        array = (pixels.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
        Image.fromarray(array).save(destination)
        ys, xs = mask.nonzero().unbind(1)
        box = [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]
        cued.append(
            {
                "file": path.relative_to(source_dir).as_posix(),
                "written": destination.relative_to(out).as_posix(),
                "box": box,
            }
        )
    manifest = {
        "kind": kind,
        "source": source,
        "target": target,
        "fraction": fraction,
        "seed": seed,
        "images": len(paths),
        "cued": cued,
    }
    (out / "cues.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=CUE_KINDS, required=True)
    parser.add_argument("--source", help="the class whose images get the cue (mark, move, texture)")
    parser.add_argument("--target", required=True, help="the class the cue leads to")
    parser.add_argument("--fraction", type=float, required=True, help="the share cued, in [0, 1]")
    parser.add_argument("--in", dest="source_dir", type=Path, required=True, help="the folder")
    parser.add_argument("--out", type=Path, required=True, help="the new folder")
    parser.add_argument("--seed", type=int, default=0, help="seed of the choice (0)")
    args = parser.parse_args(argv)
    if args.kind in SHORTCUT_KINDS and args.source is None:
        parser.error(f"--kind {args.kind} needs --source")
    if not args.source_dir.is_dir():
        raise SystemExit(f"--in {args.source_dir} is not a folder")
    _check(args.source_dir, args.out, list(_class_files(args.source_dir)), args)
    manifest = plant_folder(
        args.source_dir, args.out, args.kind, args.source, args.target, args.fraction, args.seed
    )
    print(f"{len(manifest['cued'])} of {manifest['images']} images cued; written to {args.out}")
    return manifest


if __name__ == "__main__":
    main()
