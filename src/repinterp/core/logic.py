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

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, fx, nn

from .boundaries import Boundaries
from .decision_set import Decisions, DecisionSet, FitContext

__all__ = [
    "GAMMA_QUANTILE",
    "LogicDecisions",
    "LogicSet",
    "default_gamma",
    "excluded",
    "logic_vectors",
    "neuron_boundaries",
]

GAMMA_SAMPLE = 2048
"""Most reference images per class whose pairwise cosines `default_gamma` reads."""
GAMMA_QUANTILE = 0.03
"""`default_gamma`'s quantile of the within-class cosines: the largest of 0.5, 0.2, 0.1, 0.05,
0.03, 0.02, 0.01 at which at least half of a held-out part of the reference images fall in
polytopes shared by at least 5 of them, on both `mnist-super` and `shapes` (docs/method.md,
"Beyond the paper"); the median (0.5) made almost every polytope distinct."""
NEURON_CLASSES = -1
"""The ``top_classes`` of a neuron hyperplane (it separates no pair of classes)."""


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


def _describe(gamma: float | None) -> str:
    threshold = "γ chosen at fit" if gamma is None else f"γ = {gamma:.3g}"
    return f"granularity logic ({threshold}, beyond the paper)"


class LogicDecisions(Decisions):
    """``granularity="logic"`` fitted: ``Q`` also holds neuron hyperplanes, the index each
    image's logic vector (column ``"logic"``), and ``D(x)`` the same-class images whose logic
    vector's cosine with ``x``'s is below ``gamma``.

    Attributes:
        gamma: the threshold in use (None until `finish` reads the default off the data).
    """

    name = "logic"

    def __init__(self, boundaries: Boundaries | None, gamma: float | None, seed: int) -> None:
        self.boundaries = boundaries
        self.given = gamma
        self.gamma = gamma
        self.seed = seed

    def columns(self, head: nn.Module, features: Tensor, logits: Tensor) -> dict[str, Tensor]:
        return {"logic": logic_vectors(head, features)}

    def finish(self, columns: dict[str, Tensor], predictions: Tensor) -> None:
        if self.given is None:
            self.gamma = default_gamma(columns["logic"], predictions, self.seed)

    def excluded(
        self,
        reference_columns: dict[str, Tensor],
        reference_predictions: Tensor,
        columns: dict[str, Tensor],
        predicted: Tensor,
    ) -> Tensor:
        if self.gamma is None:
            raise RuntimeError("gamma is read off the reference set at fit: fit first")
        reference = reference_columns["logic"]
        return excluded(columns["logic"], predicted, reference, reference_predictions, self.gamma)

    def manifest(self) -> dict[str, Any]:
        return {"granularity": self.name, "gamma": self.gamma}

    def describe(self) -> str:
        return _describe(self.gamma)


@dataclass(frozen=True)
class LogicSet(DecisionSet):
    """``granularity="logic"`` (beyond the paper): polytopes of one decision logic.

    Attributes:
        gamma: the cosine threshold below which a same-class image joins ``D(x)``, in [-1, 1]
            (-1: the paper's RI); None: `default_gamma`, read off the reference set at every
            fit, or the index's at load.

    Raises:
        ValueError: ``gamma`` outside [-1, 1] (NaN too).
    """

    name: ClassVar[str] = "logic"
    gamma: float | None = None

    def __post_init__(self) -> None:
        if self.gamma is not None and not -1 <= self.gamma <= 1:
            raise ValueError(f"gamma must be in [-1, 1], got {self.gamma}")

    def fit(self, context: FitContext) -> LogicDecisions:
        neurons = neuron_boundaries(
            context.head, context.source_features, context.n_boundaries, context.seed
        )
        return LogicDecisions(neurons, self.gamma, context.seed)

    def load(self, manifest: dict[str, Any], tensors: dict[str, Tensor]) -> LogicDecisions:
        gamma = manifest.get("gamma") if self.gamma is None else self.gamma
        if isinstance(gamma, bool) or not isinstance(gamma, int | float) or not -1 <= gamma <= 1:
            raise ValueError(f"its gamma {gamma!r} is not a number in [-1, 1]")
        if "logic" not in tensors:
            raise ValueError("its logic vectors are missing")
        return LogicDecisions(None, float(gamma), int(manifest.get("seed", 0)))

    def describe(self) -> str:
        return _describe(self.gamma)
