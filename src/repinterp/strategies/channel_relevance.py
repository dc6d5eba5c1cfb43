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

__all__ = ["channel_relevance", "input_relevance"]


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


def input_relevance(
    psi: nn.Module,
    head: nn.Module,
    batches: list[Tensor],
    empty: tuple[int, int, int],
    contrast: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Each image's logits and its gradient x input map of its predicted class's logit (minus
    class ``contrast``'s, where given), summed over the input's channels, ReLU: what the audit
    pastes and its "why" maps show.

    Args:
        psi: the model up to the target layer.
        head: ``G``, the rest of it.
        batches: the images (B x C x H x W each, as the model takes them, on its device).
        empty: (classes, H, W), the shapes of the result when there is no batch.
        contrast: N classes whose logit is subtracted (what sets the prediction apart from
            them), N the images of all batches; None: none.

    Returns:
        Logits (N x classes) and maps (N x H x W, not scaled), on the CPU.
    """
    logits, maps = [], []
    sizes = [len(part) for part in batches]
    others = None if contrast is None else contrast.cpu().long().split(sizes)
    for j, part in enumerate(batches):
        with torch.enable_grad():
            x = part.detach().clone().requires_grad_(True)
            out = head(psi(x))
            top = out.gather(1, out.argmax(1, keepdim=True))
            if others is not None:
                top = top - out.gather(1, others[j][:, None].to(out.device))
            (grad,) = torch.autograd.grad(top.sum(), x)
        logits.append(out.detach().float().cpu())
        maps.append((grad * x.detach()).sum(1).clamp(min=0).float().cpu())
    if not logits:
        return torch.empty(0, empty[0]), torch.empty(0, *empty[1:])
    return torch.cat(logits), torch.cat(maps)
