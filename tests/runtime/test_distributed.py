"""``torchrun -m repinterp fit`` with two processes (gloo) writes the one-process index, also
when it resumes a one-process fit that was killed."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from repinterp.cli.parser import main
from repinterp.core.reference_index import FEATURE_FILE
from repinterp.runtime.distributed import broadcast, gather, init_from_env, rank_and_world

from ..store.test_shards import interrupt_after_shards

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.slow,
]  # torchrun with two processes


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


@pytest.fixture(scope="module")
def one_process(weights, tmp_path_factory) -> tuple[list[str], Path]:
    """The fit command line (1,400 images in 6 shards of 256) and its one-process index."""
    fit = ["fit", "--model", "digits_cnn", "--weights", str(weights), "--reference", "digits"]
    fit += ["--boundaries", "20", "--shard-size", "256", "--quiet"]
    out = tmp_path_factory.mktemp("one") / "index"
    main([*fit, "--out", str(out)])
    return fit, out


def torchrun(argv: list[str]) -> str:
    """Run ``repinterp ARGV`` in two processes (gloo); its stdout."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    command += ["--master-port", str(free_port()), "-m", "repinterp", *argv]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def assert_same_index(one: Path, two: Path) -> None:
    tensors_one, tensors_two = (load_file(str(p / "index.safetensors")) for p in (one, two))
    assert tensors_one.keys() == tensors_two.keys()
    for name, tensor in tensors_one.items():
        assert tensor.dtype == tensors_two[name].dtype, name
        assert torch.equal(tensor, tensors_two[name]), name
    assert (one / FEATURE_FILE).read_bytes() == (two / FEATURE_FILE).read_bytes()
    manifests = [json.loads((p / "manifest.json").read_text()) for p in (one, two)]
    assert manifests[0] == manifests[1]
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())


def test_torchrun_two_processes_write_the_one_process_index(one_process, tmp_path) -> None:
    fit, one = one_process  # shards 0, 2, 4 on rank 0 and 1, 3, 5 on rank 1
    stdout = torchrun([*fit, "--workers", "1", "--out", str(tmp_path / "two")])
    assert "with 2 process(es)" in stdout
    assert stdout.count("indexed") == 1  # only rank 0 writes and reports
    assert_same_index(one, tmp_path / "two")


def test_torchrun_resumes_a_one_process_fit(one_process, tmp_path, monkeypatch) -> None:
    fit, one = one_process
    out = tmp_path / "index"
    interrupt_after_shards(monkeypatch, 2)
    with pytest.raises(SystemExit):
        main([*fit, "--out", str(out)])
    monkeypatch.undo()
    torchrun([*fit, "--resume", "--out", str(out)])  # shards 2, 4 on rank 0; 3, 5 on rank 1
    assert_same_index(one, out)
    assert not (out / ".partial").exists()
