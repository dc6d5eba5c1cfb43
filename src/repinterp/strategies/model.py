"""The model's strategies as a user meets them (``RepresentativeInterpreter.strategies()``): for
an index fitted at ``granularity="strategy"`` ([`strategy_set`][repinterp.strategies.granularity]),
each strategy with its polytope, members, mean heat map, "why" map and audit.

A strategy's polytope is ``P(x)`` of its *input*, the member nearest its centre (as a k-means
region's is its centre's nearest image, §6.4), cut to the strategy's k-means cell: ``P(x)`` and
every bisector between the strategy and another of its class (`cut_to_cell`), so that it holds
no image assigned to another strategy of its class and loses a member only to a boundary of
Eq. 2. A new image it covers belongs to the strategy and gets the input's channel weights. Its
heat maps are that polytope's, reused on every member. The audit
([`audit_strategies`][repinterp.strategies.audit.audit_strategies]) reads the model's
predictions on its members with their most relevant pixels pasted elsewhere or removed
([`causal_checks`][repinterp.strategies.causal_checks.causal_checks]), never a label. Its "why"
map is what sets its members apart from the class they are closest to: gradient x input of their
class's logit minus their runner-up class's."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, is_dataclass, replace
from typing import Any, get_type_hints

import torch
from torch import Tensor

from ..core.granularity import project_blocks
from ..core.heatmap import input_side_weights, normalize_maps
from ..core.interpretation import Explainer, Interpretation
from ..core.views import HtmlView, render
from .audit import StrategyAudit, audit_strategies, kept_audit_is_current
from .causal_checks import causal_checks
from .discovery import strategy_pairs
from .granularity import StrategyDecisions, strategy_vectors

__all__ = [
    "Strategy",
    "audit_ranking",
    "cut_to_cell",
    "kept_strategies",
    "model_strategies",
    "polytope_fidelity",
    "strategies_from_state",
    "strategies_state",
    "strategy_fields",
]


@dataclass(eq=False)
class Strategy:
    """One strategy of the model: a group of reference images of one predicted class, and the
    polytope that holds it.

    Attributes:
        id: its id (the index's ``"strategy"`` column).
        predicted_class: the class its members are predicted.
        members: reference indices of its members (CPU long), nearest its centre first.
        input: the member whose ``P(x)`` is its polytope (the nearest its centre).
        interpretation: that ``P(x)``.
        mean_heatmap: H x W, the polytope's heat map averaged over the members (CPU).
        why_map: H x W, what sets it apart: its members' gradient x input maps of their
            class's logit minus the strategy's runner-up class's (`Explainer.input_relevance`),
            each min-max scaled, averaged (CPU).
        audit: why (and how much) a user should look at it.
        inside: share of its members inside its polytope.
        others_inside: share of the members of its class's other strategies inside it (0 when
            the class has one strategy).
        error_rate: share of its members whose label is not the predicted class, when the
            index has labels (shown, never read by the audit); else None.
        explainer: the interpreter it came from (to draw its members).
    """

    id: int
    predicted_class: int
    members: Tensor
    input: int
    interpretation: Interpretation
    mean_heatmap: Tensor
    why_map: Tensor
    audit: StrategyAudit
    inside: float
    others_inside: float
    error_rate: float | None
    explainer: Explainer

    def __repr__(self) -> str:
        flag = ", flagged" if self.audit.flagged else ""
        return (
            f"Strategy({self.id} of class {self.predicted_class}, {len(self.members)} members, "
            f"rank {self.audit.rank}, score {self.audit.score:.3f}{flag})"
        )

    def covers(self, images: Tensor) -> Tensor:
        """N booleans: whether each image (N x C x H x W) lies in the strategy's polytope."""
        return self.interpretation.covers(images)

    def heatmap(self, images: Tensor) -> Tensor:
        """The strategy's heat maps of N images (N x H x W in [0, 1]), its channel weights
        reused."""
        return self.interpretation.heatmap(images)

    def why_heatmap(self, images: Tensor) -> Tensor:
        """What sets N images (N x C x H x W) apart as this strategy's: gradient x input of
        their predicted class's logit minus the strategy's runner-up class's, ReLU, each
        min-max scaled (N x H x W in [0, 1], CPU)."""
        contrast = torch.full((len(images),), self.audit.runner_up, dtype=torch.long)
        return normalize_maps(self.explainer.input_relevance(images, contrast)[1])

    def show(self, reference: Any = None, **options: Any) -> HtmlView:
        """The strategy as self-contained HTML, what a notebook shows; drawn by
        [`show_strategy`][repinterp.display.strategy.show_strategy], whose arguments it
        takes."""
        return render(self, reference, **options)

    def _repr_html_(self) -> str:
        return self.show().html

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (the members as reference indices)."""
        return {
            "id": self.id,
            "predicted_class": self.predicted_class,
            "size": len(self.members),
            "members": self.members.tolist(),
            "input": self.input,
            "boundaries": self.interpretation.boundaries.tolist(),
            "representativeness": self.interpretation.representativeness,
            "inside": self.inside,
            "others_inside": self.others_inside,
            "error_rate": self.error_rate,
            **{k: v for k, v in self.audit.to_dict().items() if k not in ("id", "size")},
        }


def cut_to_cell(e: Interpretation, strategy: int) -> Interpretation:
    """``e`` (the ``P(x)`` of a member of ``strategy``, on a strategy index) with the bisectors
    of ``strategy``'s cell added (those ``P(x)`` lacks, in ``Q``'s order): the images it covers
    are those of ``e`` on ``x``'s side of each; its conflicts recounted on ``D(x)`` (another
    class, or another strategy of ``x``'s).

    Raises:
        ValueError: ``e`` is not of a strategy index.
    """
    index = e.index
    decisions = index.granularity
    if not isinstance(decisions, StrategyDecisions):
        raise ValueError(
            f"cut_to_cell needs a strategy index, got granularity {index.granularity!r}"
        )
    pairs = strategy_pairs(decisions.strategies.classes)
    first = len(index.boundaries) - index.n_extra
    cell = (first + ((pairs == strategy).any(1)).nonzero().flatten()).to(e.boundary_ids.device)
    added = cell[~torch.isin(cell, e.boundary_ids)]
    if not len(added):
        return e
    chosen = torch.cat([e.boundary_ids, added])
    input_sides = torch.sign(e.projections[chosen]).to(torch.int8)
    covered = e.covered[
        (index.sides[e.covered][:, added] == input_sides[len(e.boundary_ids) :]).all(1)
    ]
    column = index.columns["strategy"].to(covered.device)
    other = (index.predictions[covered] != e.predicted_class) | (column[covered] != strategy)
    return replace(
        e,
        solved_on=e.index,
        boundary_ids=chosen,
        covered=covered,
        conflicts=int(other.sum()),
        channel_weights=input_side_weights(index.channel_means[chosen], input_sides),
    )


def _unlike(projections: Tensor, recorded: Tensor) -> Tensor:
    """N booleans: whether each image's projections on ``Q`` (N x |Q|) differ from those the
    index records for its row by more than the rounding of another batch size."""
    tolerance = max(1e-3, 16 * torch.finfo(recorded.dtype).eps)
    scale = recorded.abs().amax(1) + torch.finfo(recorded.dtype).tiny
    return ((projections - recorded).abs().amax(1) > tolerance * scale).cpu()


def _check_same_set(moved: Tensor, n: int) -> None:
    """Refuse a reference set whose images ``moved`` (reference indices) are not those the
    index was fitted on."""
    if len(moved):
        raise ValueError(
            f"the reference set given is not the one the index was fitted on: {len(moved)} of "
            f"{n} images give other projections than the index records (the first: image "
            f"{int(moved[0])}); pass the set it was fitted on, in its order"
        )


def model_strategies(
    explainer: Explainer, reference: Any = None, batch_size: int = 64
) -> list[Strategy]:
    """Every strategy of an index fitted at ``granularity="strategy"``, class by class
    (ascending), each class's in the audit's order (the one to look at first, first).

    Args:
        explainer: the fitted interpreter.
        reference: the reference set the index was fitted on (anything ``fit`` takes); None:
            the one the interpreter holds.
        batch_size: images per forward pass.

    Returns:
        One `Strategy` per strategy that holds a reference image.

    Raises:
        ValueError: the index is of another granularity, no reference set is known, or
            ``reference`` is not the set the index was fitted on (other images, or the same in
            another order: their projections on ``Q`` are not the index's).
    """
    index = explainer.index
    decisions = index.granularity
    if not isinstance(decisions, StrategyDecisions):
        raise ValueError(
            f"the index was fitted at granularity {decisions.name!r}: strategies need "
            "granularity='strategy' (repinterp fit --granularity strategy)"
        )
    column = index.columns["strategy"].cpu()
    rows = (column >= 0).nonzero().flatten()
    if explainer.reference_images(rows[:1], reference) is None:
        raise ValueError(
            "the interpreter does not hold its reference set (it was loaded): pass the set it "
            "was fitted on, strategies(reference)"
        )
    ids = column[rows].unique().tolist()
    centres = decisions.strategies.centres
    distances, moved = [], []
    for part in rows.split(batch_size):
        t = explainer.features(explainer.reference_images(part, reference))
        projections = project_blocks(t, index.boundaries, index.n_extra)
        moved.append(part[_unlike(projections, index.projections[part.to(projections.device)])])
        z = decisions.strategies.standardised(strategy_vectors(t.float(), decisions.vectors))
        distances.append((z - centres[column[part]]).norm(dim=1))
    _check_same_set(torch.cat(moved), len(rows))
    distance = torch.cat(distances)
    ranked = {}
    for s in ids:
        own = (column[rows] == s).nonzero().flatten()
        order = sorted(own.tolist(), key=lambda j: (float(distance[j]), int(rows[j])))
        ranked[s] = rows[torch.tensor(order, dtype=torch.long)]
    inputs = [int(ranked[s][0]) for s in ids]
    explained = explainer.explain_reference(inputs)
    polytopes = {s: cut_to_cell(e, s) for s, e in zip(ids, explained, strict=True)}
    logits = index.logits.cpu()[rows]
    checks = causal_checks(
        column[rows],
        logits.argmax(1),
        lambda picked: explainer.reference_images(rows[picked], reference),
        lambda images: explainer.logits_and_projections(images)[0],
        lambda images: explainer.input_relevance(images)[1],
        seed=int(index.meta.get("seed", 0)),
    )
    audits = audit_strategies(column[rows], logits, checks)
    runner_up = {a.id: a.runner_up for a in audits}
    sums, why = {}, {}
    for part in rows.split(batch_size):
        images = explainer.reference_images(part, reference)
        strategy_of = column[part]
        contrast = torch.tensor([runner_up[s] for s in strategy_of.tolist()], dtype=torch.long)
        relevance = normalize_maps(explainer.input_relevance(images, contrast)[1])
        for s in strategy_of.unique().tolist():
            own = (strategy_of == s).nonzero().flatten()
            why[s] = why.get(s, 0) + relevance[own].sum(0)
            if polytopes[s].has_heatmap:
                block = polytopes[s].heatmap(images[own.to(images.device)]).float().cpu()
                sums[s] = sums.get(s, 0) + block.sum(0)
    out = []
    for audit in sorted(audits, key=lambda a: (a.predicted_class, a.rank)):
        s = audit.id
        members = ranked[s]
        same_class = rows[(index.predictions[rows].cpu() == audit.predicted_class)]
        others = same_class[column[same_class] != s]
        covered = torch.zeros(len(index), dtype=torch.bool)
        covered[polytopes[s].covered.cpu()] = True
        errors = None
        if index.labels is not None:
            errors = float((index.labels.cpu()[members] != audit.predicted_class).double().mean())
        out.append(
            Strategy(
                id=s,
                predicted_class=audit.predicted_class,
                members=members,
                input=int(members[0]),
                interpretation=polytopes[s],
                mean_heatmap=sums.get(s, torch.zeros(index.input_shape[-2:])) / len(members),
                why_map=why[s] / len(members),
                audit=audit,
                inside=float(covered[members].float().mean()),
                others_inside=float(covered[others].float().mean()) if len(others) else 0.0,
                error_rate=errors,
                explainer=explainer,
            )
        )
    return out


def audit_ranking(strategies: list[Strategy]) -> list[dict[str, Any]]:
    """The audit's model-wide ranking, what a report or a protocol reads: one row per strategy,
    ``model_rank`` 1 first, with its ``id``, ``predicted_class``, ``size``, ``main``,
    ``model_rank``, ``rank`` (within its class), ``score``, ``flagged``, ``reasons`` and
    ``checks`` (see [`StrategyAudit`][repinterp.strategies.audit.StrategyAudit])."""
    keys = ("main", "model_rank", "rank", "score", "flagged", "reasons", "checks")
    return [
        {"id": s.id, "predicted_class": s.predicted_class, "size": len(s.members)}
        | {k: getattr(s.audit, k) for k in keys}
        for s in sorted(strategies, key=lambda s: s.audit.model_rank)
    ]


def polytope_fidelity(
    strategies: list[Strategy], images: Tensor, assigned: Tensor, classes: Tensor
) -> tuple[float, float]:
    """How well the strategies' polytopes follow them on N images: the share of the images of a
    strategy inside its polytope, and of the images of its class's other strategies, each
    averaged over the strategies that have such images (NaN where none has).

    Args:
        strategies: from `model_strategies`.
        images: N x C x H x W, as the model takes them.
        assigned: N strategy ids (`FittedGranularity.columns`'s ``"strategy"`` of the images).
        classes: N predicted classes.

    Returns:
        (inside, others), each in [0, 1] or NaN.
    """
    assigned, classes = assigned.cpu(), classes.cpu()
    inside, others = [], []
    for strategy in strategies:
        covered = strategy.covers(images).cpu()
        own = assigned == strategy.id
        rest = (classes == strategy.predicted_class) & ~own
        if own.any():
            inside.append(float(covered[own].double().mean()))
        if rest.any():
            others.append(float(covered[rest].double().mean()))
    return _mean(inside), _mean(others)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


_REBUILT = ("interpretation", "explainer")
"""The fields of a `Strategy` that `strategies_from_state` makes again rather than reads."""


def strategies_state(
    strategies: list[Strategy],
) -> tuple[dict[str, Tensor], list[dict[str, Any]]]:
    """What `strategies_from_state` needs to give ``strategies`` again without a forward pass:
    the tensor fields by ``"I.field"`` (``I`` the strategy's place in the list), and one
    JSON-able entry per strategy of its other fields (a dataclass field as a dict) but its
    polytope and interpreter."""
    tensors, entries = {}, []
    for i, strategy in enumerate(strategies):
        entry: dict[str, Any] = {}
        for field in fields(Strategy):
            value = getattr(strategy, field.name)
            if field.name in _REBUILT:
                continue
            if isinstance(value, Tensor):
                tensors[f"{i}.{field.name}"] = value.cpu().contiguous()
            elif is_dataclass(value):
                entry[field.name] = asdict(value)
            else:
                entry[field.name] = value
        entries.append(entry)
    return tensors, entries


def strategies_from_state(
    explainer: Explainer, tensors: dict[str, Tensor], entries: list[dict[str, Any]]
) -> list[Strategy]:
    """The strategies `strategies_state` kept, each polytope solved again from the index alone
    (`cut_to_cell` of its input's ``P(x)``, as `model_strategies` made it).

    Raises:
        ValueError: a field missing or of other fields, or an audit of other reasons or
            scored by another rule (the state was kept by another version).
    """
    if not kept_audit_is_current([entry.get("audit", {}) for entry in entries]):
        raise ValueError("the saved strategies' audit read other reasons or another rule")
    hints = get_type_hints(Strategy)
    polytopes = explainer.explain_reference([int(entry["input"]) for entry in entries])
    out = []
    for i, (entry, e) in enumerate(zip(entries, polytopes, strict=True)):
        values: dict[str, Any] = {
            "interpretation": cut_to_cell(e, int(entry["id"])),
            "explainer": explainer,
        }
        for field in fields(Strategy):
            name, kind = field.name, hints[field.name]
            if name in values:
                continue
            if f"{i}.{name}" in tensors:
                values[name] = tensors[f"{i}.{name}"]
            elif name not in entry:
                raise ValueError(f"the saved strategies lack the field {name!r}: find them again")
            elif is_dataclass(kind):
                try:
                    values[name] = kind(**entry[name])
                except TypeError as exc:  # its fields changed since
                    raise ValueError(f"the saved strategies' {name} is another version's") from exc
            else:
                values[name] = entry[name]
        out.append(Strategy(**values))
    return out


def strategy_fields(explainer: Explainer, strategy: int | None) -> dict[str, Any]:
    """The fields an explanation's summary (the command line's JSON, the viewer's) adds for
    an input of strategy ``strategy`` (`Interpretation.strategy`; None: an index of another
    granularity, no field): ``strategy_flagged`` and ``strategy_rank`` as the audit kept with
    the index gave them (None when it keeps none, or an audit of another version's reasons or
    rule: `kept_audit_is_current`), and ``strategy_audit_kept``: ``"current"``, ``"another
    version's"`` or ``"none"``; read without solving a polytope."""
    if strategy is None:
        return {}
    decisions = explainer.index.granularity
    audit: dict[str, Any] = {}
    kept_as = "none"
    if isinstance(decisions, StrategyDecisions) and decisions.summary is not None:
        kept = {int(entry["id"]): entry["audit"] for entry in decisions.summary[1]}
        kept_as = "another version's"
        if kept_audit_is_current(list(kept.values())):
            audit, kept_as = kept.get(strategy, {}), "current"
    return {
        "strategy_flagged": audit.get("flagged"),
        "strategy_rank": audit.get("rank"),
        "strategy_audit_kept": kept_as,
    }


def kept_strategies(explainer: Explainer, reference: Any, batch_size: int) -> list[Strategy]:
    """The strategies of ``explainer``'s index (see
    [`model_strategies`][repinterp.strategies.model.model_strategies]), found once per fit and
    kept in its granularity (``save`` writes them): later calls solve only each strategy's
    polytope again."""
    decisions = explainer.index.granularity
    if isinstance(decisions, StrategyDecisions) and decisions.summary is not None:
        try:
            return strategies_from_state(explainer, *decisions.summary)
        except ValueError:  # kept by another version: found again
            decisions.summary = None
    found = model_strategies(explainer, reference, batch_size)
    decisions.summary = strategies_state(found)
    return found
