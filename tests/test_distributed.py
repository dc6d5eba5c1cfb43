"""``torchrun -m repinterp fit`` with two processes (gloo) writes the one-process index."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from repinterp.cli import main
from repinterp.distributed import broadcast, gather, init_from_env, rank_and_world
from repinterp.index import FEATURE_FILE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    """The digits CNN after one epoch on sklearn's digits."""
    out = tmp_path_factory.mktemp("weights") / "digits.safetensors"
    argv = ["train", "--dataset", "digits", "--arch", "digits_cnn", "--epochs", "1"]
    main([*argv, "--out", str(out), "--quiet"])
    return out


def test_one_process_helpers_are_identities(monkeypatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert init_from_env("cpu") == "cpu"
    assert rank_and_world() == (0, 1)
    obj = {"q": torch.arange(3)}
    assert broadcast(obj) is obj
    assert gather(obj) == [obj]


def test_torchrun_two_processes_write_the_one_process_index(weights, tmp_path) -> None:
    # 1,400 reference images in shards of 256: shards 0, 2, 4 on rank 0 and 1, 3, 5 on rank 1
    fit = ["fit", "--model", "digits_cnn", "--weights", str(weights), "--reference", "digits"]
    fit += ["--boundaries", "20", "--shard-size", "256", "--quiet"]
    main([*fit, "--out", str(tmp_path / "one")])

    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    torchrun += ["--master-port", str(free_port()), "-m", "repinterp"]
    result = subprocess.run(
        [*torchrun, *fit, "--workers", "1", "--out", str(tmp_path / "two")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "with 2 process(es)" in result.stdout
    assert result.stdout.count("indexed") == 1  # only rank 0 writes and reports

    one, two = tmp_path / "one", tmp_path / "two"
    tensors_one, tensors_two = (load_file(str(p / "index.safetensors")) for p in (one, two))
    assert tensors_one.keys() == tensors_two.keys()
    for name, tensor in tensors_one.items():
        assert tensor.dtype == tensors_two[name].dtype, name
        assert torch.equal(tensor, tensors_two[name]), name
    assert (one / FEATURE_FILE).read_bytes() == (two / FEATURE_FILE).read_bytes()
    assert json.loads((one / "manifest.json").read_text()) == json.loads(
        (two / "manifest.json").read_text()
    )
    assert sorted(p.name for p in two.iterdir()) == [
        FEATURE_FILE,
        "index.safetensors",
        "manifest.json",
    ]
