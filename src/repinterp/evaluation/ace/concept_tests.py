"""ACE's tests of a concept (steps 3 and 4 of [`ace`][repinterp.evaluation.ace]): that a cluster's
patches come from enough distinct images (`passes_spread_test`), and the TCAV score of a CAV
(`tcav_score`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import train_test_split

__all__ = ["passes_spread_test", "tcav_score"]


def passes_spread_test(image_numbers: np.ndarray | Sequence[int], n_discovery: int) -> bool:
    """ACE's test that a cluster's patches come from enough distinct discovery images.

    With ``n`` patches from ``u`` distinct images out of ``D = n_discovery``: true if
    ``u > 0.5 n``, or ``u > 0.25 n and u > 0.25 D``, or ``u > 0.1 n and u > 0.5 D``.

    Args:
        image_numbers: (n,) discovery image of each patch in the cluster.
        n_discovery: number of discovery images.
    """
    n = len(image_numbers)
    u = len(np.unique(np.asarray(image_numbers)))
    return (
        u > 0.5 * n
        or (u > 0.25 * n and u > 0.25 * n_discovery)
        or (u > 0.1 * n and u > 0.5 * n_discovery)
    )


def tcav_score(
    positive: np.ndarray, negative: np.ndarray, gradients: np.ndarray, seed: int
) -> tuple[float, float]:
    """The TCAV score of the CAV of ``positive`` against ``negative`` (fitted as tcav does, see
    [`ace`][repinterp.evaluation.ace]), and the CAV's held-out accuracy.

    Args:
        positive: P x D flattened activations of the concept's patches.
        negative: M x D flattened activations of a random set (both cut to the shorter).
        gradients: I x D gradients of the class output at the target layer, one per image.
        seed: seeds the split and the classifier.

    Returns:
        ``(score, accuracy)``: the share of images whose derivative along the CAV is positive,
        and the CAV's accuracy on the held-out third, both in [0, 1].
    """
    n = min(len(positive), len(negative))
    x = np.concatenate([positive[:n], negative[:n]])
    y = np.repeat([0, 1], n)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.33, stratify=y, random_state=seed
    )
    model = SGDClassifier(alpha=0.01, max_iter=1000, tol=1e-3, random_state=seed)
    model.fit(x_train, y_train)
    # Label 0 is the concept: the CAV points against the coefficients (tcav's cavs[0]).
    cav = -model.coef_[0] / np.linalg.norm(model.coef_[0])
    return float(np.mean(gradients @ cav > 0)), float(model.score(x_test, y_test))
