"""Decision logic below the class: ``granularity="logic"``, beyond the paper.

A piecewise-linear head is a set of local linear classifiers, one per activation polytope
(OpenBox, Chu et al., KDD 2018). Two images of one class may be classified by different local
logic; the paper's ``D(x)`` (the reference images of other classes) never separates them, so
its cover may hold both. Here (docs/method.md, "Beyond the paper"):

- each image gets a *logic vector* ``l(x)`` (K values, `logic_vectors`): the relevance of
  each channel to its class, ``sum_hw psi(x) * d(F_c - mean_{c' != c} F_c')/d psi`` at ``x``;
- ``D(x)`` also holds the reference images of ``x``'s class whose logic vector has cosine
  similarity below ``gamma`` with ``x``'s (`excluded`);
- ``Q`` also holds hyperplanes of the head's own neurons, the pre-activations of its first
  ReLU (`neuron_boundaries`), so that the cover can cut those images off.

``gamma = -1`` excludes nothing, and the cover then uses Eq. 2's boundaries only: the
paper's RI exactly. The default ``gamma`` (`default_gamma`) is read off the reference images.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, fx, nn

from .boundaries import Boundaries, project

__all__ = [
    "GAMMA_QUANTILE",
    "GRANULARITIES",
    "check_granularity",
    "default_gamma",
    "describe_granularity",
    "excluded",
    "logic_vectors",
    "neuron_boundaries",
    "neuron_count",
    "project_blocks",
    "uses_neurons",
]

GRANULARITIES = ("class", "logic")
GAMMA_SAMPLE = 2048
"""Most reference images per class whose pairwise cosines `default_gamma` reads."""
GAMMA_QUANTILE = 0.03
"""`default_gamma`'s quantile of the within-class cosines: the largest of 0.5, 0.2, 0.1, 0.05,
0.03, 0.02, 0.01 at which at least half of a held-out part of the reference images fall in
polytopes shared by at least 5 of them, on both `mnist-super` and `shapes` (docs/method.md,
"Beyond the paper"); the median (0.5) made almost every polytope distinct."""
NEURON_CLASSES = -1
"""The ``top_classes`` of a neuron hyperplane (it separates no pair of classes)."""


def check_granularity(granularity: str) -> str:
    """``granularity`` if it is one of `GRANULARITIES`, else ``ValueError``."""
    if granularity not in GRANULARITIES:
        raise ValueError(
            f"unknown granularity {granularity!r}; choose one of {', '.join(GRANULARITIES)}"
        )
    return granularity


def describe_granularity(granularity: str, gamma: float | None = None) -> str:
    """How every view names a granularity: ``granularity class (the paper's RI)``, or
    ``granularity logic (γ = 0.312)`` with the ``gamma`` in use (``γ chosen at fit`` before
    a fit chose it)."""
    if granularity != "logic":
        return f"granularity {granularity} (the paper's RI)"
    threshold = "γ chosen at fit" if gamma is None else f"γ = {gamma:.3g}"
    return f"granularity logic ({threshold}, beyond the paper)"


def _is_relu(node: fx.Node, modules: dict[str, nn.Module]) -> bool:
    if node.op == "call_module":
        return isinstance(modules.get(str(node.target)), nn.ReLU)
    if node.op == "call_function":
        return node.target in (torch.relu, torch.relu_, nn.functional.relu)
    return node.op == "call_method" and node.target in ("relu", "relu_")


def pre_activations(head: nn.Module) -> nn.Module:
    """The head ``G`` cut before its first ReLU: feature maps N x K x h x w -> the ReLU's
    input, flattened, N x M (its M neurons).

    Args:
        head: a split model's head (``SplitModel.head``: a traced ``graph_module`` inside).

    Raises:
        ValueError: the head has no ReLU.
    """
    graph_module = getattr(head, "graph_module", head)
    if not isinstance(graph_module, fx.GraphModule):
        graph_module = fx.symbolic_trace(graph_module)
    modules = dict(graph_module.named_modules())
    graph, env = fx.Graph(), {}
    for node in graph_module.graph.nodes:
        if _is_relu(node, modules):
            out = graph.call_method("flatten", (env[node.args[0]], 1))
            graph.output(out)
            return fx.GraphModule(graph_module, graph)
        env[node] = graph.node_copy(node, lambda n: env[n])
    raise ValueError("granularity='logic' needs a ReLU in the head (after the target layer)")


def neuron_boundaries(head: nn.Module, features: Tensor, n: int, seed: int) -> Boundaries:
    """Hyperplanes of ``min(n, M)`` of the head's first-ReLU neurons, drawn uniformly with
    ``seed`` (ascending), each linearised at the mean of ``features``: ``W = dz_j/dt`` and
    ``b = z_j(t0) - <W, t0>``, exact where the head is affine up to that ReLU (every small CNN
    of the zoo, at its default layer).

    Args:
        head: ``G``.
        features: N x K x h x w feature maps (those of ``Q``'s sources).
        n: how many neurons at most.
        seed: seeds the draw (on the CPU).

    Returns:
        Boundaries with ``top_classes`` `NEURON_CLASSES`, on the device of ``features``.
    """
    cut = pre_activations(head)
    t0 = features.detach().mean(0, keepdim=True).clone()
    with torch.no_grad():
        m = cut(t0).shape[1]
    chosen = torch.randperm(m, generator=torch.Generator().manual_seed(seed))[:n].sort().values
    chosen = chosen.to(features.device)
    t = t0.expand(len(chosen), *t0.shape[1:]).clone().requires_grad_(True)
    with torch.enable_grad():
        z = cut(t).gather(1, chosen[:, None]).squeeze(1)
        (weight,) = torch.autograd.grad(z.sum(), t)
    bias = z.detach() - (weight * t0).flatten(1).sum(1)
    classes = torch.full((len(chosen), 2), NEURON_CLASSES, dtype=torch.long, device=t0.device)
    return Boundaries(weight.detach(), bias, classes)


def neuron_count(q: Boundaries) -> int:
    """How many of ``Q``'s boundaries are neuron hyperplanes (they come last)."""
    return int((q.top_classes[:, 0] == NEURON_CLASSES).sum())


def project_blocks(features: Tensor, boundaries: Boundaries, n_neurons: int) -> Tensor:
    """`project` on Eq. 2's boundaries and, apart, on the ``n_neurons`` neuron hyperplanes
    after them, so that Eq. 2's columns are those of a class fit bit for bit (N x |Q|)."""
    if n_neurons == 0:
        return project(features, boundaries)
    q = len(boundaries) - n_neurons
    blocks = (torch.arange(q), torch.arange(q, len(boundaries)))
    device = boundaries.bias.device
    return torch.cat([project(features, boundaries.select(b.to(device))) for b in blocks], 1)


def logic_vectors(head: nn.Module, features: Tensor) -> Tensor:
    """Each image's local decision logic for its predicted class ``c``: the pooled relevance
    ``l_k = sum_{h,w} t_khw * d(G_c - mean_{c' != c} G_c')/d t_khw`` (N x K), one backward
    pass for the batch."""
    t = features.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        logits = head(t)
        c = logits.argmax(1, keepdim=True)
        own = logits.gather(1, c).squeeze(1)
        others = (logits.sum(1) - own) / max(1, logits.shape[1] - 1)
        (grad,) = torch.autograd.grad((own - others).sum(), t)
    return (t.detach() * grad).flatten(2).sum(2)


def _cosines(a: Tensor, b: Tensor) -> Tensor:
    """A x B cosine similarities in [-1, 1] of the rows of ``a`` and ``b`` (0 for a zero row)."""
    a = nn.functional.normalize(a.float(), dim=1)
    b = nn.functional.normalize(b.float(), dim=1)
    return (a @ b.T).clamp(-1, 1)


def excluded(
    logic: Tensor,
    classes: Tensor,
    reference_logic: Tensor,
    reference_classes: Tensor,
    gamma: float,
) -> Tensor:
    """The same-class reference images that ``D(x)`` also holds: N x |R| bool, True where
    the reference image is predicted ``x``'s class and its logic vector's cosine similarity with
    ``x``'s is below ``gamma`` (none for ``gamma = -1``).

    Args:
        logic: N x K logic vectors of the inputs.
        classes: N predicted classes of the inputs.
        reference_logic: |R| x K logic vectors of the reference images.
        reference_classes: |R| predicted classes.
        gamma: the threshold, in [-1, 1].
    """
    same = reference_classes.unsqueeze(0) == classes.unsqueeze(1)
    cos = _cosines(logic, reference_logic.to(logic.device))
    return same & (cos < gamma)


def default_gamma(
    logic: Tensor, classes: Tensor, seed: int = 0, quantile: float = GAMMA_QUANTILE
) -> float:
    """The default ``gamma``, read off the reference images only: the ``quantile`` (default
    `GAMMA_QUANTILE`) of the cosine similarities of the logic vectors of every pair of distinct
    reference images predicted the same class (pooled over the classes; at most `GAMMA_SAMPLE`
    images per class, drawn with ``seed``). So each image's ``D(x)`` holds about that share of
    its class, the images whose logic is least like its own. -1 when no class has two images.

    Raises:
        ValueError: ``quantile`` outside [0, 1].
    """
    if not 0 <= quantile <= 1:
        raise ValueError(f"quantile must be in [0, 1], got {quantile}")
    generator = torch.Generator().manual_seed(seed)
    values = []
    classes = classes.cpu()
    for c in classes.unique().tolist():
        rows = (classes == c).nonzero().flatten()
        rows = rows[torch.randperm(len(rows), generator=generator)[:GAMMA_SAMPLE]]
        if len(rows) < 2:
            continue
        cos = _cosines(logic[rows.to(logic.device)], logic[rows.to(logic.device)]).cpu()
        values.append(cos[torch.triu_indices(len(rows), len(rows), 1).unbind()])
    if not values:
        return -1.0
    return float(np.quantile(torch.cat(values).numpy(), quantile, method="lower"))


def uses_neurons(extra: Tensor) -> Tensor:
    """Which inputs' covers may use the neuron hyperplanes: those whose ``D(x)`` holds a
    same-class image (N bool, from `excluded`'s N x |R|); the others are covered on Eq. 2's
    boundaries alone, as the paper's RI covers them."""
    return extra.any(1)
