"""timm models by name, with random weights: a ResNet and an EfficientNet are split after their
last activation and explained; a ConvNeXt's LayerNorm head is refused by name."""

from __future__ import annotations

import pytest
import torch

from repinterp import FitConfig, RepresentativeInterpreter
from repinterp.models import zoo
from repinterp.models.split import NonlinearHeadError

pytest.importorskip("timm")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]  # timm models

SIDE = 64


def _images(n: int) -> torch.Tensor:
    return torch.randn(n, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(("arch", "layer"), [("resnet18", "layer4"), ("efficientnet_b0", "bn2")])
def test_split_after_the_last_activation_and_explained(arch: str, layer: str) -> None:
    model = zoo.build_model(f"timm:{arch}", num_classes=3)
    assert zoo.default_target_layer(f"timm:{arch}") == layer
    ri = RepresentativeInterpreter(model, None, n_boundaries=6, batch_size=16, progress=False)
    images = _images(24)
    ri.fit(images)
    assert ri.target_layer == layer
    with torch.no_grad():
        t = ri.split.psi(images[:4])
        assert t.ndim == 4 and t.shape[-1] > 1
        assert torch.allclose(ri.split.head(t), model(images[:4]), atol=1e-5)
        if arch == "efficientnet_b0":  # bn2 ends in SiLU: the head starts after it
            assert torch.equal(
                t, model.bn2(model.conv_head(model.blocks(model.bn1(model.conv_stem(images[:4])))))
            )
    e = ri.explain(images[0])
    assert torch.equal(e.covers(images), torch.isin(torch.arange(24), e.covered))


def test_convnext_layernorm_head_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"'head.norm' \(LayerNorm2d\)"):
        zoo.default_target_layer("timm:convnext_atto")
    model = zoo.build_model("timm:convnext_atto", num_classes=3)
    with pytest.raises(NonlinearHeadError, match=r"layer_norm in 'head.norm' \(LayerNorm2d\)"):
        RepresentativeInterpreter(model, "stages.3")
    with pytest.raises(NonlinearHeadError, match=r"'head.norm' \(LayerNorm2d\)"):
        RepresentativeInterpreter(model, None, config=FitConfig(input_shape=(3, SIDE, SIDE)))


def test_timm_weights_come_from_a_local_file(tmp_path) -> None:
    model = zoo.build_model("timm:resnet18", num_classes=3, seed=1)
    path = tmp_path / "resnet18.safetensors"
    zoo.save_weights(model, path)
    loaded = zoo.build_model("timm:resnet18", num_classes=3, weights=path, seed=2)
    assert all(
        torch.equal(a, b)
        for a, b in zip(model.state_dict().values(), loaded.state_dict().values(), strict=True)
    )
    gray = zoo.build_model("timm:resnet18", num_classes=3, in_channels=1)
    assert gray.conv1.in_channels == 1
    with pytest.raises(ValueError, match="unknown timm model 'resnet_nope'"):
        zoo.build_model("timm:resnet_nope", 3)
