"""Issue 30: numbers and files the command line refuses in one line before it computes."""

import math

import pytest

from repinterp.data.image_files import MAX_PIXELS

from ..commandline import FIT, assert_one_line_error, run

pytestmark = pytest.mark.usefixtures("one_thread")


def test_image_size_has_an_upper_bound(tmp_path, capsys) -> None:
    from repinterp.cli.options import MAX_IMAGE_SIZE

    assert MAX_IMAGE_SIZE == math.isqrt(MAX_PIXELS)  # the largest square image that is read
    fit = ["fit", "--model", "shapes_cnn", "--reference", f"imagefolder:{tmp_path}", "--quiet"]
    evaluate = ["evaluate", "--dataset", f"imagefolder:{tmp_path}", "--protocol", "unseen"]
    for command in (
        [*fit, "--out", str(tmp_path / "index"), "--image-size", "999999"],
        [*evaluate, "--image-size", "8193"],
    ):
        code, _, err = run(command, capsys)
        assert_one_line_error(code, err, f"--image-size: must be at most {MAX_IMAGE_SIZE}, got")
    assert not (tmp_path / "index").exists()


@pytest.mark.parametrize("value", ["nan", "0", "-1"])
def test_time_limit_must_be_a_number_of_seconds(tmp_path, capsys, value: str) -> None:
    out = tmp_path / "eval"
    command = ["evaluate", "--dataset", "digits", "--protocol", "unseen", "--quick"]
    code, _, err = run([*command, "--time-limit", value, "--out", str(out)], capsys)
    assert_one_line_error(code, err, f"time_limit must be a number of seconds > 0, got {value}")
    assert not out.exists()


def test_a_file_that_is_no_weights_file_is_said_to_be_so(tmp_path, capsys) -> None:
    (tmp_path / "notes.txt").write_text("experiment 3: lr 0.1\n")
    weights = ["--weights", str(tmp_path / "notes.txt")]
    code, _, err = run([*FIT, *weights, "--out", str(tmp_path / "index")], capsys)
    assert_one_line_error(code, err, "notes.txt: it is not a weights file (a PyTorch checkpoint")
    assert not (tmp_path / "index").exists()
