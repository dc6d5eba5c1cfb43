"""Whether models trained on the planted-shortcut data sets learn the mark, and on the
controls ignore it (docs/method.md, "Data sets with a planted shortcut").

For ``FAMILY-mark:F`` and ``FAMILY-markrand:F``, each of the first N models of
``--model-seeds`` (the bundled recipe, trained on the data-seed-0 reference part, read from
the model cache when there) on all the unseen images: its accuracy on the unmarked ones; on
``*-mark``, the share of the marked ones it calls the target class and of the same images
without the mark it calls the source class; on ``*-markrand``, the share of the marked ones
whose prediction the mark changes.

Run (one torch thread): ``OMP_NUM_THREADS=1 PYTHONPATH=src python -m studies.marks FAMILY
[--models N] [--share F]``, FAMILY ``mnist`` or ``shapes``, N models (1), F the share (0.3);
prints one line per data set and model.
"""

from __future__ import annotations

import argparse

import torch

from repinterp.data.datasets import MARKS, load_dataset
from repinterp.evaluation.setup import load_setup


def lines(family: str, n_models: int, share: str) -> list[str]:
    """One line per data set (``-mark``, ``-markrand``) and model (see the docstring)."""
    mark = MARKS[family]
    plain = load_dataset(f"{family}-mark:0").unseen  # the same unseen images, none marked
    out = []
    for kind in ("mark", "markrand"):
        setup = load_setup(f"{family}-{kind}:{share}", model_seeds=n_models, n_unseen=None)
        unseen, marked = setup.unseen, setup.unseen.marked
        for trained in setup.models:
            with torch.no_grad():
                predicted = trained.model.eval()(unseen.inputs()).argmax(1)
                unmarked = trained.model(plain.inputs()).argmax(1)
            correct = (predicted[~marked] == unseen.labels[~marked]).double().mean()
            line = f"{family}-{kind}:{share} seed {trained.seed}: unmarked accuracy "
            line += f"{100 * float(correct):.1f}% of {int((~marked).sum())}"
            if kind == "mark":
                by_mark = (predicted[marked] == mark.target).double().mean()
                without = (unmarked[marked] == mark.source).double().mean()
                line += f"; marked called {mark.target}: {100 * float(by_mark):.1f}% of "
                line += f"{int(marked.sum())}; the same unmarked called {mark.source}: "
                line += f"{100 * float(without):.1f}%"
            else:
                changed = (predicted[marked] != unmarked[marked]).double().mean()
                line += f"; the mark changes {100 * float(changed):.1f}% of {int(marked.sum())}"
            out.append(line)
    return out


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("family", choices=sorted(MARKS))
    parser.add_argument("--models", type=int, default=1, help="model seeds 0..N-1 (1)")
    parser.add_argument("--share", default="0.3", help="the marked share F (0.3)")
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        found = lines(args.family, args.models, args.share)
    finally:
        torch.set_num_threads(threads)
    print("\n".join(found))
    return found


if __name__ == "__main__":
    main()
