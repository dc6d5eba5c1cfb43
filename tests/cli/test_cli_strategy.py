"""What the command line says of a strategy index (cli/strategy_notes.py): at ``fit``, the layer
and why; at ``explain``, each input's strategy and its flag; the strategies found once, at fit."""

import json

import pytest

from repinterp.cli.strategy_notes import FEW_INSIDE, explain_note

from ..commandline import FIT, run


def test_fit_explain_and_audit_of_a_strategy_index(
    tmp_path, capsys, one_thread, strategy_searches
) -> None:
    index, out = tmp_path / "index", tmp_path / "explained"
    code, stdout, err = run([*FIT, "--granularity", "strategy", "--out", str(index)], capsys)
    assert code == 0, err
    manifest = json.loads((index / "manifest.json").read_text())
    layer = manifest["target_layer"]
    assert f"maps at layer {layer!r}: digits_cnn's default layer" in stdout
    assert f"kept with the index: repinterp audit --index {index} --out DIR" in stdout
    few = [s for s in manifest["strategy_summary"] if s["inside"] < FEW_INSIDE]
    assert stdout.count("warning: strategy") == len(few)
    code, stdout, err = run(
        ["explain", "reference:0", "--index", str(index), "--out", str(out), "--quiet"], capsys
    )
    assert code == 0, err
    summary = json.loads((out / "reference-0.json").read_text())
    kept = {s["id"]: s for s in manifest["strategy_summary"]}
    strategy = summary["strategy"]
    assert kept[strategy]["predicted_class"] == summary["predicted_class"]
    assert summary["strategy_flagged"] == kept[strategy]["audit"]["flagged"]
    assert summary["strategy_rank"] == kept[strategy]["audit"]["rank"]
    name = summary["class_name"] or summary["predicted_class"]
    assert f"reference-0: strategy {strategy} of class {name}, " in stdout
    code, _, err = run(["audit", "--index", str(index), "--out", str(tmp_path / "a")], capsys)
    assert code == 0, err
    report = tmp_path / "report"
    code, _, err = run(["report", "--index", str(index), "--out", str(report)], capsys)
    assert code == 0, err
    page = (report / "index.html").read_text()
    assert page.count("on an index of granularity strategy: the strategy the input") > 0
    assert len(strategy_searches) == 1  # found at fit, read back by explain, audit and report


@pytest.mark.parametrize(
    ("flagged", "kept", "words"),
    [
        (True, "current", "FLAGGED by the audit"),
        (False, "current", "not flagged by the audit"),
        (None, "none", "not audited: the index keeps no audit"),
        (None, "another version's", "the audit kept with the index is another version's"),
    ],
)
def test_explain_note_says_the_flag(flagged, kept, words) -> None:
    summary = {"strategy": 3, "strategy_flagged": flagged, "strategy_audit_kept": kept}
    note = explain_note("a", summary | {"class_name": "cat"})
    assert note.startswith("a: strategy 3 of class cat, ") and words in note
    assert explain_note("a", {"strategy": None}) is None
