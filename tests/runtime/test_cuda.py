"""CUDA gives the same explanations as the CPU (issue 12 §1), whatever the user's TF32 flags.

A random-weight VGG-11 at 64 px, 400 reference images balanced over 4 classes, |Q| = 50, 50
inputs: the index's sides, every P(x), covered set and class are identical on both devices, and
the projections agree to float32 rounding (the largest difference is printed: run with ``-s``).
Skipped without CUDA, except the seed test, which holds on any machine.

    pytest tests/test_cuda.py -q -s
"""

from __future__ import annotations

import copy

import pytest
import torch

from repinterp import RepresentativeInterpreter
from repinterp.core.boundaries import sample_sources
from repinterp.models.zoo import build_model
from repinterp.runtime.precision import tf32_allowed

from .test_precision import TF32_ON, _restore_flags, _state  # noqa: F401 (the fixture)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

N_REFERENCE, N_INPUTS, SIDE, N_Q = 400, 50, 64, 50
USERS = {"defaults": lambda: None, **TF32_ON}


def test_seed_means_the_same_q_on_every_device() -> None:
    """Q's sources are drawn on a CPU generator: neither the global RNG nor the device (nor
    the data) changes them."""
    expected = torch.randperm(1000, generator=torch.Generator().manual_seed(7))[:50].sort().values
    torch.manual_seed(123)
    assert torch.equal(sample_sources(1000, 50, seed=7), expected)
    assert sample_sources(1000, 50, seed=7).device.type == "cpu"


@pytest.fixture(scope="module")
def setup():
    model = build_model("vgg11", num_classes=4, seed=0)
    generator = torch.Generator().manual_seed(0)
    reference = torch.randn(N_REFERENCE, 3, SIDE, SIDE, generator=generator)
    inputs = torch.randn(N_INPUTS, 3, SIDE, SIDE, generator=generator)
    with torch.no_grad():  # random weights: shift the last bias so that all 4 classes occur
        model.classifier[-1].bias -= model(reference).mean(0)
    cpu = _interpreter(model, "cpu").fit(reference)
    assert len(cpu.index.predictions.unique()) == 4
    return model, reference, inputs, cpu


def _interpreter(model: torch.nn.Module, device: str) -> RepresentativeInterpreter:
    return RepresentativeInterpreter(
        copy.deepcopy(model),
        "features.19",
        n_boundaries=N_Q,
        seed=0,
        device=device,
        batch_size=50,
        progress=False,
    )


@cuda
@pytest.mark.parametrize("user", USERS)
def test_cuda_and_cpu_give_the_same_explanations(setup, user: str) -> None:
    model, reference, inputs, cpu = setup
    USERS[user]()
    flags = _state()
    gpu = _interpreter(model, "cuda").fit(reference)
    assert _state() == flags, "the user's flags were not restored"
    if user != "defaults":
        assert tf32_allowed()["cublas"] and tf32_allowed()["cudnn"]

    a, b = cpu.index, gpu.index.to("cpu")
    assert torch.equal(a.sources, b.sources)
    differing = int((a.sides != b.sides).sum())
    assert differing == 0, f"{differing} of {a.sides.numel()} (image, boundary) sides differ"
    assert torch.equal(a.predictions, b.predictions)
    diff = float((a.projections - b.projections).abs().max())
    scale = float(a.projections.abs().max())
    print(f"\n[{user}] index: max |projection CPU - CUDA| = {diff:.3g} (largest {scale:.3g})")
    # Full float32 on both, but cuDNN's convolution algorithms (e.g. Winograd) round otherwise
    # than the CPU's: measured on an H100 (torch 2.11), 3.7e-4 where the projections' terms
    # |b| + |<W, t>| reach 0.37, in all three flag settings alike, with no side flipped. TF32
    # would move them by about 1e-3 of the terms' size and flip sides.
    terms = float(a.boundary_ids.bias.abs().max()) + float(
        (a.projections - a.boundary_ids.bias.unsqueeze(0)).abs().max()
    )
    print(f"[{user}] largest term |b| + |<W, t>| = {terms:.3g}")
    assert diff <= 2e-3 * max(terms, 1.0)

    on_cpu, on_gpu = cpu.explain_batch(inputs), gpu.explain_batch(inputs)  # CPU tensors, moved
    for i, (x, y) in enumerate(zip(on_cpu, on_gpu, strict=True)):
        assert x.predicted_class == y.predicted_class, i
        assert torch.equal(x.boundary_ids, y.boundary_ids.cpu()), i
        assert torch.equal(x.covered, y.covered.cpu()), i
        assert x.delta == y.delta, i
    diff = max(
        float((x.projections - y.projections.cpu()).abs().max())
        for x, y in zip(on_cpu, on_gpu, strict=True)
    )
    print(
        f"[{user}] {N_INPUTS} inputs: identical P(x), covers, classes; max |projection "
        f"difference| = {diff:.3g}"
    )
    shown = next(x for x in on_cpu if x.has_heatmap)
    index = on_cpu.index(shown)
    maps_cpu = shown.heatmap(reference[:8])
    maps_gpu = on_gpu[index].heatmap(reference[:8].cuda())
    assert maps_gpu.device.type == "cuda"
    assert torch.allclose(maps_cpu, maps_gpu.cpu(), atol=1e-4)
    assert _state() == flags


@cuda
def test_inputs_on_either_device_and_missing_devices() -> None:
    model = build_model("vgg11", num_classes=4, seed=0).cuda()
    reference = torch.randn(20, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(1))
    ri = RepresentativeInterpreter(model, "features.19", n_boundaries=5, progress=False)
    assert ri.device.type == "cuda"
    ri.fit(reference)  # CPU images, CUDA model
    e = ri.explain(reference[0])
    assert e.projections.device.type == "cuda"
    back = RepresentativeInterpreter(
        model, "features.19", n_boundaries=5, device="cpu", progress=False
    )
    assert next(model.parameters()).device.type == "cpu"  # device= moves the user's model
    back.fit(reference.cuda())  # CUDA images, CPU model
    count = torch.cuda.device_count()
    with pytest.raises(ValueError, match=f"device 'cuda:{count}': this machine has {count}"):
        RepresentativeInterpreter(model, "features.19", device=f"cuda:{count}")
