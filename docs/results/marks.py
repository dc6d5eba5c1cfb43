"""Whether models trained on the planted-shortcut data sets learn the mark, and on the
controls ignore it (docs/method.md, "Data sets with a planted shortcut").

For ``FAMILY-mark:F`` and ``FAMILY-markrand:F``, each of the first N models of
``--model-seeds`` (the bundled recipe, trained on the data-seed-0 reference part, read from
the model cache when there) on all the unseen images: its accuracy on the unmarked ones; on
``*-mark``, the share of the marked ones it calls the target class and of the same images
without the mark it calls the source class; on ``*-markrand``, the share of the marked ones
whose prediction the mark changes.

Run (one torch thread): ``OMP_NUM_THREADS=1 python docs/results/marks.py FAMILY [N] [F]``,
FAMILY ``mnist`` or ``shapes``, N models (1), F the share (0.3).
"""

import sys

import torch

from repinterp.data.datasets import MARKS, load_dataset
from repinterp.evaluation.setup import load_setup

torch.set_num_threads(1)
family, *rest = sys.argv[1:]
n_models = int(rest[0]) if rest else 1
share = rest[1] if len(rest) > 1 else "0.3"
mark = MARKS[family]
plain = load_dataset(f"{family}-mark:0").unseen  # the same unseen images, none marked
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
        print(line, flush=True)
