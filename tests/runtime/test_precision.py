"""exact_float32: TF32 off inside, the user's settings back afterwards, through either API."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from repinterp.runtime.precision import _new_api, exact_float32, tf32_allowed

backends = torch.backends


def _state() -> dict[str, Any]:
    """Everything a user can read back, with "error" where PyTorch refuses a read."""
    out: dict[str, Any] = {}
    for name, read in {
        "matmul.allow_tf32": lambda: backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": lambda: backends.cudnn.allow_tf32,
        "matmul_precision": torch.get_float32_matmul_precision,
    }.items():
        try:
            out[name] = read()
        except RuntimeError:
            out[name] = "error"
    out.update(_new_api())
    return out


@pytest.fixture(autouse=True)
def _restore_flags() -> Iterator[None]:
    # Undo each scenario the way exact_float32 restores: legacy setters, then fp32_precision.
    matmul, cudnn, new = (
        torch.get_float32_matmul_precision(),
        backends.cudnn.allow_tf32,
        _new_api(),
    )
    yield
    torch.set_float32_matmul_precision(matmul)
    backends.cudnn.allow_tf32 = cudnn
    for path, value in new.items():
        node = backends
        for part in path.split(".") if path else ():
            node = getattr(node, part)
        node.fp32_precision = value


def _set(path: str, value: str) -> Callable[[], None]:
    def apply() -> None:
        node = backends
        for part in path.split(".") if path else ():
            node = getattr(node, part)
        node.fp32_precision = value

    return apply


def _legacy_matmul_on() -> None:
    backends.cuda.matmul.allow_tf32 = True


def _legacy_cudnn_off() -> None:
    backends.cudnn.allow_tf32 = False


SCENARIOS = {
    "defaults": lambda: None,
    "legacy matmul on": _legacy_matmul_on,
    "legacy cudnn off": _legacy_cudnn_off,
    "set_float32_matmul_precision medium": lambda: torch.set_float32_matmul_precision("medium"),
    "new cuda.matmul tf32": _set("cuda.matmul", "tf32"),
    "new global tf32": _set("", "tf32"),
    "new mkldnn.matmul bf16": _set("mkldnn.matmul", "bf16"),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_off_inside_and_restored_after(scenario: str) -> None:
    SCENARIOS[scenario]()
    before = _state()
    with exact_float32():
        inside = _state()
        assert not any(tf32_allowed().values()), tf32_allowed()
        assert "error" not in inside.values(), inside  # a consistent state: nothing refuses
    assert _state() == before
    with pytest.raises(KeyError), exact_float32():
        raise KeyError("boom")
    assert _state() == before


def test_new_api_tf32_is_seen_as_allowed() -> None:
    _set("", "tf32")()
    assert all(tf32_allowed().values())


# ------------------------------------------------------------------ the engine computes inside it
def _legacy_tf32_on() -> None:
    backends.cuda.matmul.allow_tf32 = True
    backends.cudnn.allow_tf32 = True


TF32_ON = {"legacy flags": _legacy_tf32_on, "fp32_precision API": _set("", "tf32")}


def _recording_interpreter(seen: list[dict[str, bool]]) -> tuple[Any, torch.Tensor]:
    from repinterp import RepresentativeInterpreter

    from ..networks import random_setup

    model, images = random_setup(n=60)
    for module in (model.conv1, model.fc3):  # one in psi, one in G (also Eq. 2's gradients)
        module.register_forward_hook(lambda *_: seen.append(tf32_allowed()))
    ri = RepresentativeInterpreter(model, "relu2", n_boundaries=8, progress=False)
    return ri, images


@pytest.mark.parametrize("user", TF32_ON)
def test_the_engine_computes_without_tf32_and_restores_the_user_s_flags(user: str) -> None:
    TF32_ON[user]()
    before = _state()
    assert tf32_allowed()["cublas"] and tf32_allowed()["cudnn"]
    seen: list[dict[str, bool]] = []
    ri, images = _recording_interpreter(seen)
    steps = {
        "fit": lambda: ri.fit(images, keep_features=True),
        "explain": lambda: ri.explain(images[0]),
        "explain_batch": lambda: ri.explain_batch(images[:3]),
        "logits_and_projections": lambda: ri.logits_and_projections(images[:3]),
        "features": lambda: ri.features(images[:3]),
        "heatmap": lambda: ri.explain(images[1]).heatmap(images[:4]),
        "covers": lambda: ri.explain(images[1]).covers(images[:4]),
        "regions.assign": lambda: ri.regions(n_regions=3).assign(images[:4]),
        "regions.predict": lambda: ri.regions(n_regions=3).predict(images[:4]),
        "regions.heatmap": lambda: ri.regions(n_regions=3).heatmap(images[:4]),
    }
    for name, step in steps.items():
        seen.clear()
        step()
        assert seen and not any(any(flags.values()) for flags in seen), name
        assert _state() == before, f"{name} did not restore the user's flags"


@pytest.mark.parametrize("user", TF32_ON)
def test_flags_are_restored_after_an_exception_inside(user: str) -> None:
    TF32_ON[user]()
    before = _state()
    seen: list[dict[str, bool]] = []
    ri, images = _recording_interpreter(seen)
    ri.fit(images)

    def boom(*_: Any) -> None:
        raise KeyError("inside the engine")

    handle = ri.model.fc3.register_forward_hook(boom)
    for call in (lambda: ri.fit(images), lambda: ri.explain(images[0])):
        seen.clear()
        with pytest.raises(KeyError, match="inside the engine"):
            call()
        assert seen and not any(any(flags.values()) for flags in seen)
        assert _state() == before
    handle.remove()
    with pytest.raises(ValueError, match="NaN or Inf"):
        ri.explain(torch.full_like(images[0], float("nan")))
    assert _state() == before


def test_autocast_of_the_caller_is_off_inside() -> None:
    seen: list[torch.dtype] = []
    ri, images = _recording_interpreter([])
    ri.model.fc3.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    ri.fit(images)
    plain = ri.explain(images[0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = ri.explain(images[0])
    assert set(seen) == {torch.float32}
    assert torch.equal(plain.projections, inside.projections)
    assert torch.equal(plain.boundary_ids, inside.boundary_ids)


def test_one_thread_leaving_does_not_turn_tf32_back_on_under_another() -> None:
    _set("", "tf32")()
    before = _state()
    entered, leave_a, a_left = threading.Event(), threading.Event(), threading.Event()
    seen: list[dict[str, bool]] = []

    def a() -> None:
        with exact_float32():
            entered.set()
            leave_a.wait(5)
        a_left.set()

    thread = threading.Thread(target=a)
    thread.start()
    entered.wait(5)
    with exact_float32():
        leave_a.set()
        a_left.wait(5)
        seen.append(tf32_allowed())  # A has left; this block is still running
    thread.join()
    assert not any(seen[0].values())
    assert _state() == before
    with exact_float32(), exact_float32():  # nested: restored when the outer one ends
        pass
    assert _state() == before
