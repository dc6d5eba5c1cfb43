"""Models trained by a recipe and cached by the SHA-256 of what made them
(`store.model_cache`), and the setups of ``evaluate --model-seeds`` that run each run on its own
model."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch

from repinterp.data.datasets import MARKED_SETS, load_dataset
from repinterp.evaluation.options import Options
from repinterp.evaluation.protocols import evaluate, results_markdown
from repinterp.evaluation.setup import BUNDLED, RECIPES, WEIGHTS_DIR, load_setup, recipe_for
from repinterp.models.train import Recipe
from repinterp.runtime.checksums import file_sha256
from repinterp.store import model_cache
from repinterp.store.model_cache import trained_model

from ..commandline import assert_one_line_error, listing, run

pytestmark = pytest.mark.usefixtures("one_thread")

# A recipe that trains in well under a second: one epoch of the digits CNN.
TINY = Recipe("digits_cnn", epochs=1, batch_size=128)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", seed=0)


def _train(recipe, data, seed, cache):
    return trained_model(recipe, data, "digits", 0, seed, cache, "cpu", progress=False)


def test_seeds_train_distinct_models_and_a_second_call_reads_the_cache(
    digits, tmp_path, monkeypatch
) -> None:
    first = [_train(TINY, digits, seed, tmp_path) for seed in (0, 1)]
    assert [m.cached for m in first] == [False, False]
    assert first[0].sha256 != first[1].sha256  # two seeds, two models
    for m in first:
        assert m.sha256 == file_sha256(m.path) and m.path.suffix == ".safetensors"
        card = json.loads(m.path.with_suffix(".json").read_text())
        assert card["weights_sha256"] == m.sha256 and card["recipe"] == TINY.settings()
        assert 0 < card["held_out_accuracy"] <= 100 and len(card["losses"]) == 1
        assert card["trained_on"].endswith(f"torch {torch.__version__}")  # which CPU made it
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".json"] * 2 + [".safetensors"] * 2

    def no_training(*args, **kwargs):
        raise AssertionError("trained again")

    with monkeypatch.context() as patched:
        patched.setattr(Recipe, "train", no_training)
        again = _train(TINY, digits, 1, tmp_path)
    assert again.cached and again.sha256 == first[1].sha256 and again.path == first[1].path
    x = digits.unseen.normalization(digits.unseen.images[:5])
    with torch.no_grad():
        torch.testing.assert_close(again.model(x), first[1].model(x))


def test_a_changed_recipe_setting_or_data_misses_the_cache(digits, tmp_path) -> None:
    base = _train(TINY, digits, 0, tmp_path)
    other = _train(dataclasses.replace(TINY, lr=2e-3), digits, 0, tmp_path)
    assert not other.cached and other.path != base.path and other.sha256 != base.sha256
    fewer = digits._replace(unseen=digits.unseen.subset(range(100)))
    assert not _train(TINY, fewer, 0, tmp_path).cached  # other data, other key
    assert len(list(tmp_path.glob("*.safetensors"))) == 3


def test_a_damaged_cached_model_is_trained_again(digits, tmp_path) -> None:
    base = _train(TINY, digits, 0, tmp_path)
    base.path.write_bytes(base.path.read_bytes()[:-8] + b"damaged!")
    again = _train(TINY, digits, 0, tmp_path)
    assert not again.cached and again.sha256 == base.sha256 == file_sha256(again.path)


def test_the_default_cache_is_under_the_users_cache_folder(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert model_cache.default_cache() == tmp_path / "repinterp" / "models"


def test_recipes_are_those_of_the_bundled_weights() -> None:
    for dataset in BUNDLED:
        assert (WEIGHTS_DIR / f"{RECIPES[dataset].arch}.safetensors").is_file(), dataset
    assert RECIPES["mnist5k"].epochs == 8 and RECIPES["digits"].epochs == 20
    assert set(RECIPES) - set(BUNDLED) == {"shapes-mix", "shapes:64", *MARKED_SETS}


def test_shapes_64_has_the_vgg_recipe_without_bundled_weights() -> None:
    recipe = recipe_for("shapes:64")
    assert recipe is not None and recipe.arch == "vgg11_bn" and recipe.optimizer == "sgd"
    with pytest.raises(ValueError, match="--model vgg11_bn needs --weights"):
        load_setup("shapes:64", arch="vgg11_bn")


def test_every_shapes_mix_is_trained_by_the_shapes_recipe() -> None:
    for p in ("0", "0.5", "1"):
        assert recipe_for(f"shapes-mix:{p}") == RECIPES["shapes"]
    assert recipe_for("shapes:224") is None and recipe_for("imagefolder:x") is None


def test_every_marked_set_is_trained_by_its_plain_sets_recipe() -> None:
    for name in MARKED_SETS:
        plain = RECIPES["mnist5k" if name.startswith("mnist") else "shapes"]
        assert recipe_for(f"{name}:0.3") == recipe_for(f"{name}:0") == plain


def test_each_run_uses_its_own_model_and_results_name_it(tmp_path) -> None:
    setup = load_setup(
        "digits", n_reference=120, n_unseen=40, model_seeds=2, model_cache=tmp_path, recipe=TINY
    )
    assert len(setup.models) == 2 and setup.model is setup.models[0].model
    options = Options(runs=2, n_boundaries=5, n_regions=10, progress=False, split="fixed")
    options = dataclasses.replace(options, methods=("RI",), metrics=("AD",))
    results = evaluate(setup, "coverage", options)
    records = [run["model"] for run in results["per_run"]]
    assert [r["seed"] for r in records] == [0, 1]
    assert [r["weights_sha256"] for r in records] == [m.sha256 for m in setup.models]
    assert records[0]["weights_sha256"] != records[1]["weights_sha256"]
    for record, model in zip(records, setup.models, strict=True):
        with torch.no_grad():
            predicted = model.model(setup.inputs("unseen")).argmax(1).cpu()
        expected = 100 * float((predicted == setup.labels("unseen")).double().mean())
        assert record["held_out_acc"] == pytest.approx(expected)
    assert results["setup"]["model_seeds"] == [0, 1]
    assert results["setup"]["recipe"] == TINY.settings()
    assert "Each run on its own model" in results_markdown(results)
    with pytest.raises(ValueError, match="3 runs on 2 models"):
        evaluate(setup, "coverage", dataclasses.replace(options, runs=3))


def test_model_seed_start_trains_the_seeds_from_it(tmp_path) -> None:
    """Issue 43: a pre-registered run trains seeds never used to choose a setting."""
    setup = load_setup(
        "digits",
        n_reference=120,
        n_unseen=40,
        model_seeds=2,
        model_cache=tmp_path,
        recipe=TINY,
        model_seed_start=10,
    )
    assert [m.seed for m in setup.models] == [10, 11]
    assert setup.describe()["model_seeds"] == [10, 11]
    assert setup.for_run(1).model_seed == 11


def test_without_model_seeds_every_run_names_the_bundled_weights() -> None:
    setup = load_setup("digits", n_reference=120, n_unseen=40)
    options = Options(runs=2, n_boundaries=5, n_regions=10, progress=False, split="fixed")
    results = evaluate(setup, "coverage", options)
    bundled = file_sha256(WEIGHTS_DIR / "digits_cnn.safetensors")
    for run_ in results["per_run"]:
        assert run_["model"]["weights_sha256"] == bundled and run_["model"]["seed"] is None
        assert 90 < run_["model"]["held_out_acc"] <= 100


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model-seeds", "0"], "--model-seeds must be from 1 to 100 (models trained), got 0"),
        (["--model-seeds", "101"], "--model-seeds must be from 1 to 100 (models trained), got 101"),
        (["--model-seeds", "2", "--runs", "3"], "--runs 3 with --model-seeds 2"),
        (["--model-cache", "x"], "--model-cache needs --model-seeds"),
        (["--model-seed-start", "10"], "--model-seed-start needs --model-seeds"),
        (["--model-seeds", "2", "--model-seed-start", "-1"], "--model-seed-start must be >= 0"),
        (["--model-seeds", "2", "--weights", "w.pt", "--model", "digits_cnn"], "give no --weights"),
        (["--model-seeds", "2", "--model", "mnist_cnn"], "trains digits_cnn on digits"),
    ],
)
def test_bad_model_seeds_are_one_line_errors(argv, message, tmp_path, capsys) -> None:
    if "--weights" in argv:
        (tmp_path / "w.pt").write_bytes(b"")
        argv = [str(tmp_path / a) if a == "w.pt" else a for a in argv]
    base = ["evaluate", "--dataset", "digits", "--protocol", "coverage", "--quiet"]
    code, _, err = run([*base, "--out", str(tmp_path / "out"), *argv], capsys)
    assert_one_line_error(code, err, message)


def test_swapped_cache_entries_are_refused(digits, tmp_path) -> None:
    """Issue 38, item 12: the weights and card of seed 0 under seed 1's key and back were used
    without a word; a card whose seed (or recipe, data, device) is not its key's is refused."""
    zero, one = (_train(TINY, digits, seed, tmp_path) for seed in (0, 1))
    for suffix in (".safetensors", ".json"):
        a, b = zero.path.with_suffix(suffix), one.path.with_suffix(suffix)
        data = a.read_bytes()
        a.write_bytes(b.read_bytes())
        b.write_bytes(data)
    for seed, other in ((0, 1), (1, 0)):
        card = one.path.with_suffix(".json") if seed == 1 else zero.path.with_suffix(".json")
        message = f"{card} is the card of another model than its name says "
        message += f"(seed {other}, not {seed})"
        with pytest.raises(ValueError, match=f"^--model-cache: {re.escape(message)}"):
            _train(TINY, digits, seed, tmp_path)


@pytest.mark.parametrize("card", ["[]", '"x"', "1", "null"])
def test_a_card_that_is_json_but_not_an_object_is_trained_again(card, digits, tmp_path) -> None:
    """Issue 38, item 15: a card that is JSON but not an object was an AttributeError; it is
    taken as damaged, as a card that is not JSON is: the model is trained again."""
    base = _train(TINY, digits, 0, tmp_path)
    base.path.with_suffix(".json").write_text(card)
    again = _train(TINY, digits, 0, tmp_path)
    assert not again.cached and again.sha256 == base.sha256
    assert json.loads(again.path.with_suffix(".json").read_text())["seed"] == 0


def _an_index(folder):
    folder.mkdir()
    (folder / "manifest.json").write_text('{"format_version": 3, "sha256": {}}')


def _a_partial_folder(folder):
    folder.mkdir()
    (folder / ".repinterp-output.json").write_text('{"kind": "partial", "files": []}')


@pytest.mark.parametrize(
    ("make", "sub", "message"),
    [
        (_an_index, "", "is a repinterp index: give another folder"),
        (_an_index, ".partial", "is inside the repinterp index "),
        (_a_partial_folder, "", "is a repinterp partial folder: give another folder"),
        (lambda path: path.write_text("x"), "", "is a file, not a folder"),
        (lambda path: path.write_text("x"), "sub", "cannot be made: "),
    ],
)
def test_the_model_cache_folder_is_checked_before_any_work(
    make, sub, message, tmp_path, capsys, monkeypatch
) -> None:
    """Issue 38, items 3 and 16: ``--model-cache`` an index folder (or its ``.partial``) got
    weights and cards written into it; a file (or a path through one) was a traceback after
    training. Now one line naming the option, before the data is read, nothing written."""
    from repinterp.evaluation import setup

    def unread(*args, **kwargs):
        raise AssertionError("the data set was read")

    monkeypatch.setattr(setup, "load_dataset", unread)
    cache = tmp_path / "cache"
    make(cache)
    before = listing(tmp_path)
    base = ["evaluate", "--dataset", "digits", "--protocol", "coverage", "--quiet"]
    argv = [*base, "--model-seeds", "1", "--model-cache", str(cache / sub if sub else cache)]
    code, _, err = run([*argv, "--out", str(tmp_path / "out")], capsys)
    assert_one_line_error(code, err, "--model-cache: ")
    assert message in err
    assert listing(tmp_path) == before
