"""Each image's relevance per channel to its predicted class: one K-vector per image.

A piecewise-linear head is a set of local linear classifiers, one per activation polytope
(OpenBox, Chu et al., KDD 2018); the pooled gradient x input of the predicted class's margin
over the mean other class summarises, per channel, the local classifier that decides an image.
The PCX-like grouping of the evaluation clusters these vectors; the audit can compare groups by
them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["channel_relevance"]


def channel_relevance(head: nn.Module, features: Tensor) -> Tensor:
    """Each image's pooled relevance of each channel ``k`` to its predicted class ``c``:
    ``l_k = sum_{h,w} t_khw * d(G_c - mean_{c' != c} G_c')/d t_khw``, one backward pass for the
    batch.

    Args:
        head: ``G``, feature maps -> logits.
        features: N x K x h x w feature maps ``t``.

    Returns:
        N x K, on the device of ``features``.
    """
    t = features.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        logits = head(t)
        c = logits.argmax(1, keepdim=True)
        own = logits.gather(1, c).squeeze(1)
        others = (logits.sum(1) - own) / max(1, logits.shape[1] - 1)
        (grad,) = torch.autograd.grad((own - others).sum(), t)
    return (t.detach() * grad).flatten(2).sum(2)
