"""``FitConfig``: one-line errors for bad settings, and one config passed whole gives the index
the keywords give."""

import dataclasses
import warnings

import pytest
import torch

from repinterp import FitConfig, RepresentativeInterpreter
from repinterp.data.reference import as_reference
from repinterp.store.index_build import build_index

from ..networks import random_setup

pytestmark = pytest.mark.usefixtures("one_thread")

BAD = [
    ({"n_boundaries": 0}, "n_boundaries must be >= 1, got 0"),
    ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
    ({"num_workers": -1}, "num_workers must be >= 0, got -1"),
    ({"sampling": "near"}, "unknown sampling 'near'; choose one of uniform, balanced, pairs"),
]


@pytest.mark.parametrize(("settings", "message"), BAD)
def test_bad_settings_give_one_line(settings, message) -> None:
    with pytest.raises(ValueError) as error:
        FitConfig(**settings)
    assert str(error.value) == message
    model, _ = random_setup(n=10)
    with pytest.raises(ValueError) as error, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the keywords that moved
        RepresentativeInterpreter(model, "relu2", **settings)  # say the same
    assert str(error.value) == message


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        FitConfig().seed = 1  # type: ignore[misc]


def test_keywords_and_config_together_are_refused() -> None:
    model, _ = random_setup(n=10)
    with pytest.raises(ValueError, match="either as keywords or as config=, not both"):
        RepresentativeInterpreter(model, "relu2", n_boundaries=5, config=FitConfig())


def test_a_config_gives_the_index_the_keywords_give() -> None:
    model, images = random_setup(n=150)
    settings = {"n_boundaries": 12, "seed": 3, "sampling": "pairs", "batch_size": 16}
    with pytest.warns(DeprecationWarning, match=r"pass config=FitConfig\(sampling=...\)"):
        by_keywords = RepresentativeInterpreter(model, "relu2", progress=False, **settings)
    config = FitConfig(progress=False, **settings)
    by_config = RepresentativeInterpreter(model, "relu2", config=config)
    assert by_config.config == by_keywords.config == config
    assert not hasattr(by_config, "seed")  # the settings are read off config, not forwarded
    a, b = by_keywords.fit(images).index, by_config.fit(images).index
    assert a.meta == b.meta and a.meta["sampling"] == "pairs"
    tensors_a, tensors_b = a.tensors(), b.tensors()
    assert tensors_a.keys() == tensors_b.keys()
    for name, tensor in tensors_a.items():
        assert torch.equal(tensor, tensors_b[name]), name
    # build_index reads the whole config: another |Q| or sampling gives another Q
    reference = as_reference(images)
    for change in ({"n_boundaries": 5}, {"sampling": "uniform"}):
        other = dataclasses.replace(config, **change)
        sources = build_index(by_config.split, reference, other, torch.device("cpu")).sources
        assert len(sources) == other.n_boundaries and not torch.equal(sources[:5], a.sources[:5])
    again = build_index(by_config.split, reference, config, torch.device("cpu"))
    assert torch.equal(again.sources, a.sources)


@pytest.mark.parametrize(
    ("moved", "field"),
    [
        ({"sampling": "pairs"}, "sampling"),
        ({"time_limit": 2.0}, "time_limit"),
        ({"allow_nonlinear_head": True}, "allow_nonlinear_head"),
    ],
)
def test_a_moved_keyword_still_works_and_names_its_new_spelling(moved, field) -> None:
    model, _ = random_setup(n=10)
    with pytest.warns(DeprecationWarning) as caught:
        ri = RepresentativeInterpreter(model, "relu2", n_boundaries=7, **moved)
    assert str(caught[0].message) == (
        f"RepresentativeInterpreter({field}=...) is deprecated and will be removed in 0.7: "
        f"pass config=FitConfig({field}=...) (with the fit's other settings)"
    )
    assert getattr(ri.config, field) == moved[field] and ri.config.n_boundaries == 7


def test_an_unknown_keyword_is_refused() -> None:
    with pytest.raises(TypeError) as error:
        RepresentativeInterpreter(random_setup(n=10)[0], "relu2", gamma=0.5)
    assert str(error.value) == "RepresentativeInterpreter got unexpected keyword arguments: gamma"
