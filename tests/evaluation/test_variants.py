"""RI's knobs measured by the evaluation: interpreters with each sampling of Q, the canonical
exact cover, the polytope Score-CAM weights."""

import itertools
from dataclasses import replace

import numpy as np
import pytest
import torch

from repinterp import FitConfig, RepresentativeInterpreter
from repinterp.core.boundaries import sample_sources
from repinterp.core.cover import exact_cover, fewest_boundaries, greedy_cover
from repinterp.core.heatmap import heatmaps
from repinterp.evaluation.baselines import cam_weights
from repinterp.evaluation.methods import METHODS
from repinterp.evaluation.metrics import coverage_metrics
from repinterp.evaluation.options import Options
from repinterp.evaluation.protocols import evaluate, results_markdown
from repinterp.evaluation.protocols import similar as similar_protocol
from repinterp.evaluation.run import Run
from repinterp.evaluation.setup import load_setup
from repinterp.maps.polytope_weights import covered_sample, score_weights, with_score_weights

from ..networks import images, tiny_gap_cnn

pytestmark = pytest.mark.usefixtures("one_thread")


def test_interpreters_fit_and_reload_with_their_sampling(tmp_path):
    model = tiny_gap_cnn().eval()
    x = images(40, seed=1)
    config = FitConfig(n_boundaries=6, progress=False, sampling="pairs")
    ri = RepresentativeInterpreter(model, "3", config=config)
    ri.fit(x)
    with torch.no_grad():
        logits = model(x)
    assert torch.equal(ri.boundary_sources.cpu(), sample_sources(40, 6, 0, "pairs", logits))
    ri.save(tmp_path / "index")
    assert RepresentativeInterpreter.load(tmp_path / "index", model).config.sampling == "pairs"
    with pytest.raises(ValueError, match="unknown sampling"):
        RepresentativeInterpreter(model, "3", config=FitConfig(sampling="near"))


def _brute_force(sep: np.ndarray, other: np.ndarray, delta: int) -> tuple[int, int, int]:
    """(coverage, |P|, sum of indices) of the lexicographic best P, by enumeration."""
    best = None
    for size in range(sep.shape[1] + 1):
        for p in itertools.combinations(range(sep.shape[1]), size):
            covered = ~sep[:, list(p)].any(1)
            if (covered & other).sum() <= delta:
                key = (-int(covered.sum()), size, sum(p))
                best = key if best is None or key < best else best
    return -best[0], best[1], best[2]


def test_fewest_boundaries_is_the_lexicographic_optimum():
    rng = np.random.default_rng(0)
    for trial in range(12):
        n_ref, n_q = 24, 7
        ref = torch.from_numpy(rng.choice([-1, 1], size=(n_ref, n_q)).astype(np.int8))
        ref[:3] = ref[3]  # duplicates make equal optima
        x = torch.from_numpy(rng.choice([-1, 1], size=(2, n_q)).astype(np.int8))
        other = torch.from_numpy(rng.random((2, n_ref)) < 0.4)
        result = exact_cover(ref, x, other, greedy=greedy_cover(ref, x, other))
        canonical = fewest_boundaries(ref, x, other, result)
        for b in range(2):
            sep = (ref != x[b]).numpy()
            coverage, size, index_sum = _brute_force(sep, other[b].numpy(), int(result.delta[b]))
            p = canonical.boundaries(b)
            assert int(canonical.covered[b].sum()) == coverage, trial
            assert (len(p), int(p.sum())) == (size, index_sum), trial
            assert torch.equal(canonical.covered[b], torch.from_numpy(~sep[:, p.numpy()].any(1)))
            assert int(canonical.conflicts[b]) == int((canonical.covered[b] & other[b]).sum())


def test_score_weights_are_pytorch_grad_cams_and_average_over_images():
    model = tiny_gap_cnn().eval()
    x = images(12, seed=2)
    ri = RepresentativeInterpreter(model, "3", n_boundaries=5, progress=False).fit(x)
    library = cam_weights("Score-CAM", model, "3", x[:3], target_classes=[1, 1, 1])
    ours = torch.stack([score_weights(ri, x[i : i + 1], 1) for i in range(3)])
    torch.testing.assert_close(ours, library, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(score_weights(ri, x[:3], 1), library.mean(0), atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="non-empty"):
        score_weights(ri, x[:0], 1)


def test_with_score_weights_keeps_the_polytope_and_draws_one_map():
    model = tiny_gap_cnn().eval()
    x = images(30, seed=3)
    ri = RepresentativeInterpreter(model, "3", n_boundaries=8, progress=False).fit(x)
    e = next(e for e in ri.explain_reference(range(30)) if e.has_heatmap)
    sample = covered_sample(e, 4, seed=1)
    assert len(sample) == min(4, e.representativeness)
    assert set(sample.tolist()) <= set(e.covered.tolist()) and bool((sample.diff() > 0).all())
    assert torch.equal(covered_sample(e, 4, seed=1), sample)
    weighted = with_score_weights(e, x[sample])
    assert torch.equal(weighted.boundary_ids, e.boundary_ids) and torch.equal(
        weighted.covered, e.covered
    )
    w = score_weights(ri, x[sample], e.predicted_class)
    torch.testing.assert_close(weighted.channel_weights, w.unsqueeze(0))
    expected = heatmaps(ri.features(x[:5]), w.unsqueeze(0), (16, 16))
    torch.testing.assert_close(weighted.heatmap(x[:5]), expected)


def test_ri_strategy_runs_in_coverage_similar_and_q_sweep_on_mnist_super():
    """RI+strategy among the methods: ``coverage`` reports its own regions beside the paper's
    RI's, ``similar`` ranks by its own P(x), ``q-sweep`` sweeps |Q| at granularity strategy too;
    without it the protocols are as before."""
    setup = load_setup("mnist-super", n_reference=300, n_unseen=60)
    small = Options(runs=1, n_regions=10, n_inputs=3, q_values=(5,), purity_ks=(2,))
    small = replace(small, progress=False, split="fixed", methods=("RI", "RI+strategy"))
    coverage = evaluate(setup, "coverage", small)
    strategy = coverage["methods"]["RI+strategy"]
    assert list(coverage["methods"]) == ["RI+strategy"]
    regions = METHODS["RI+strategy"].regions(Run(setup, 0, small))  # its own regions
    assert regions.interpreter.granularity == "strategy"
    part = (setup.chunks("reference"), setup.predictions["reference"], setup.labels("reference"))
    for key, value in coverage_metrics(regions, *part).items():
        assert strategy["reference"][key] == pytest.approx(value), key
    assert strategy["reference"] != coverage["reference"]
    assert 0 <= strategy["unseen"]["ami"] <= 1 and strategy["unseen"]["distinct_polytopes"] >= 1
    assert "RI+strategy's regions:" in results_markdown(coverage)
    assert "methods" not in evaluate(setup, "coverage", replace(small, methods=("RI",)))
    similar = evaluate(setup, "similar", small)
    ranked = similar["rankings"]["semantic (RI+strategy)"]
    assert {"class purity@2", "sub-concept purity@2", "mAD@2"} <= set(ranked)
    run_ = Run(setup, 0, small)
    strategy_ri = run_.interpreter_for(run_.fit_config("uniform", "strategy"))
    assert strategy_ri.granularity == "strategy" and strategy_ri is not run_.interpreter
    for index in run_.inputs.tolist():  # the ranking is RI+strategy's own P(x)'s
        explanations, rankings = similar_protocol._rankings(run_, index)
        own = strategy_ri.explain_reference([index])[0]
        assert (
            explanations["semantic (RI+strategy)"].boundary_ids.tolist()
            == own.boundary_ids.tolist()
        )
        expected = own.similar(metric="semantic").cpu()
        assert torch.equal(rankings["semantic (RI+strategy)"], expected[expected != index])
    assert "semantic (RI+strategy)" in results_markdown(similar)
    sweep = evaluate(setup, "q-sweep", small)
    assert list(sweep["samplings"]) == ["uniform", "uniform+strategy"]
    assert sweep["samplings"]["uniform+strategy"] != sweep["samplings"]["uniform"]
    assert "`uniform+strategy`" in results_markdown(sweep)
