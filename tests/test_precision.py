"""exact_float32: TF32 off inside, the user's settings back afterwards, through either API."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from repinterp.precision import _new_api, exact_float32, tf32_allowed

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
