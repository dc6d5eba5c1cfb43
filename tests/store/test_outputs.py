"""Nothing saved is ever lost: output folders are refused unless new, empty or the project's own;
a second writer fails at once; a save or fit that fails (or is killed) at any write leaves the
old index or the new one, never neither, and no stray files; checksums are those of the bytes
as written."""

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from hashlib import sha256
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from repinterp import workspace
from repinterp.cli.parser import main
from repinterp.store import files
from repinterp.store.index_folder import IndexLoadError, load_index, save_index
from repinterp.store.outputs import (
    LOCK_FILE,
    MARKER_FILE,
    OutputError,
    claim,
    folder_kind,
    remove_listed,
    write_outputs,
)

from ..commandline import FIT, assert_one_line_error, edit_manifest, listing, run, user_folder

pytestmark = pytest.mark.usefixtures("one_thread")

INDEX_FILES = {"manifest.json", "index.safetensors", "features.npy", "regions.safetensors"}
INDEX_FILES |= {MARKER_FILE, LOCK_FILE}  # a fit keeps the viewer's regions (regions_file)


def test_folder_kinds(tmp_path) -> None:
    """Only the project's marker (or, for an index saved without one, its checksums) makes a
    folder the project's: the names of its outputs are not enough (issue 22, item 3)."""
    assert folder_kind(tmp_path / "missing") is None
    assert folder_kind(tmp_path) is None
    (tmp_path / LOCK_FILE).touch()
    assert folder_kind(tmp_path) is None  # bookkeeping alone: still empty
    afile = tmp_path / "afile.txt"
    afile.write_text("x")
    with pytest.raises(OutputError, match=r"afile\.txt is a file, not a folder"):
        folder_kind(afile)
    assert folder_kind(tmp_path) == "foreign"
    explained = tmp_path / "explained"
    explained.mkdir()
    (explained / "x.png").write_bytes(b"png")
    (explained / "x.json").write_text(json.dumps({"representativeness": 3}))
    assert folder_kind(explained) == "foreign"  # named and shaped like explanations
    marker = explained / MARKER_FILE
    marker.write_text(json.dumps({"kind": "explain", "files": ["x.json", "x.png"]}))
    assert folder_kind(explained) == "explain"
    marker.write_text(json.dumps({"kind": "explain"}))  # an earlier marker: no files listed
    assert folder_kind(explained) == "foreign"
    results = tmp_path / "results"
    results.mkdir()
    (results / "results.json").write_text(json.dumps({"protocol": "mine"}))
    (results / "fig1.png").write_bytes(b"png")
    assert folder_kind(results) == "foreign"
    index = tmp_path / "index"  # as repinterp 0.2 saved one, without a marker
    index.mkdir()
    (index / "index.safetensors").write_bytes(b"tensors")
    (index / "manifest.json").write_text(
        json.dumps(
            {"format_version": 1, "sha256": {"index.safetensors": sha256(b"tensors").hexdigest()}}
        )
    )
    assert folder_kind(index) == "index"  # its checksums hold
    (index / "notes.txt").write_text("mine")
    assert folder_kind(index) == "foreign"  # and a user's file beside it
    (index / "notes.txt").unlink()
    (index / "index.safetensors").write_bytes(b"another tool's")
    assert folder_kind(index) == "foreign"  # a manifest whose checksums do not hold
    site = tmp_path / "site"
    site.mkdir()
    (site / "manifest.json").write_text('{"name": "my web app"}')  # not an index manifest
    assert folder_kind(site) == "foreign"


def test_claim_refuses_foreign_folders_and_indexes_and_writes_nothing_there(tmp_path) -> None:
    mine = tmp_path / "mydocs"
    before = user_folder(mine)
    with pytest.raises(OutputError, match="mydocs holds files that repinterp did not write"):
        with claim(mine, "index"):
            pass
    assert listing(mine) == before  # not even a lock file
    with claim(mine, "explain", overwrite=True):
        (mine / "x.json").write_text("{}")
    assert {k: v for k, v in listing(mine).items() if k in before} == before
    assert not (mine / MARKER_FILE).exists() and folder_kind(mine) == "foreign"  # still a user's

    index = tmp_path / "index"
    (index).mkdir()
    (index / "manifest.json").write_text(json.dumps({"format_version": 1, "sha256": {}}))
    for kind in ("explain", "report", "demo", "partial", "evaluation"):
        for overwrite in (False, True):
            with pytest.raises(
                OutputError, match=r"is a repinterp index: .* need a folder of their own"
            ):
                with claim(index, kind, overwrite):
                    pass
    assert sorted(p.name for p in index.iterdir()) == ["manifest.json"]
    with pytest.raises(OutputError, match="index holds files that repinterp did not write"):
        with claim(index, "index"):  # its manifest vouches for no index file
            pass


def test_a_failing_command_leaves_the_folder_as_it_found_it(tmp_path) -> None:
    """Issue 22, items 4 and 16: a command that fails before it wrote anything leaves no
    marker, and removes every folder it made (n1/n2/n3: all three); the marker lists what a
    command wrote (issue 30, item 1: not a file someone else saved there meanwhile), and one
    of another kind that fails leaves it as it was."""
    out = tmp_path / "n1" / "n2" / "n3"
    with pytest.raises(RuntimeError), claim(out, "report"):
        assert json.loads((out / MARKER_FILE).read_text()) == {"kind": "report", "files": []}
        raise RuntimeError("the command failed")
    assert list(tmp_path.iterdir()) == []
    with claim(out, "report"):
        write_outputs({out / "index.html": b"<html>"})
        (out / "notes.md").write_text("the user's, saved meanwhile")
    (out / "notes.md").unlink()
    assert json.loads((out / MARKER_FILE).read_text()) == {
        "kind": "report",
        "files": ["index.html"],
    }
    with claim(out, "report"):  # its own kind: accepted again
        pass
    with pytest.raises(OutputError, match="holds a report: give a new or empty folder"):
        with claim(out, "explain"):
            pass
    before = listing(out)
    with pytest.raises(RuntimeError), claim(out, "explain", overwrite=True):
        assert folder_kind(out) == "explain"
        raise RuntimeError("the command failed")
    assert listing(out) == before and folder_kind(out) == "report"


def test_what_a_killed_command_left_is_removed_by_the_next(tmp_path) -> None:
    """Issue 30, item 3: the temporary files of the project's files that a command killed while
    writing left (``.NAME.tmp-TOKEN``) are removed by the next command that claims the folder;
    a temporary-looking file of a name the project never wrote is the user's, and kept."""
    out = tmp_path / "report"
    with claim(out, "report"):
        write_outputs({out / "index.html": b"<html>"})
    left = out / ".index.html.tmp-0123abcd"  # what a kill -9 between write and rename leaves
    left.write_bytes(b"<ht")
    mine = out / ".notes.md.tmp-0123abcd"
    mine.write_text("mine")
    with claim(out, "report"):
        assert not left.exists() and mine.read_text() == "mine"


def test_a_second_fit_fails_at_once(tmp_path, capsys, monkeypatch) -> None:
    """Two fits to one folder: the second fails at once, with a clear message, while the
    first (here a process holding the folder as a fit does) writes."""
    out = tmp_path / "index"
    holder = textwrap.dedent(
        f"""
        import sys
        from repinterp.store.outputs import claim
        with claim({str(out)!r}, "index"):
            print("held", flush=True)
            sys.stdin.readline()
        """
    )
    env = os.environ | {"PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    process = subprocess.Popen(
        [sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        assert process.stdout.readline() == b"held\n"
        fits: list[object] = []  # "at once": before any work, the model and data never read
        monkeypatch.setattr(workspace, "fit_workspace", lambda *a, **k: fits.append(a))
        code, _, err = run([*FIT, "--out", str(out)], capsys)
        assert fits == []
        assert_one_line_error(code, err, f"another repinterp command is writing to {out}")
        assert {p.name for p in out.iterdir()} == {MARKER_FILE, LOCK_FILE}  # the holder's
        with pytest.raises(OutputError, match="another repinterp command is writing"):
            with claim(out, "index"):
                pass
    finally:
        process.communicate(b"\n", timeout=30)
    assert not out.exists()  # the holder made it, wrote nothing, and removed it
    with claim(out, "index"):  # let go when the holder ended
        pass


def test_rows_changed_by_another_writer_are_refused(tmp_path, monkeypatch, capsys) -> None:
    from repinterp.store import shards

    write = shards.FeatureFile.write

    def write_then_scribble(self, start, rows):
        digest = write(self, start, rows)
        with open(self.path, "r+b") as f:  # another process writing the same partial file
            f.seek(self.offset)
            f.write(b"\0" * 16)
        return digest

    monkeypatch.setattr(shards.FeatureFile, "write", write_then_scribble)
    code, _, err = run([*FIT, "--out", str(tmp_path / "index")], capsys)
    assert_one_line_error(code, err, "changed while")
    assert not (tmp_path / "index" / "manifest.json").exists()


@pytest.fixture(scope="module")
def old_and_new(tmp_path_factory) -> tuple[Path, Path]:
    """An index fitted with seed 0 (the old one) and with seed 1 (the new one)."""
    root = tmp_path_factory.mktemp("crash")
    main([*FIT, "--seed", "0", "--out", str(root / "old")])
    main([*FIT, "--seed", "1", "--out", str(root / "new")])
    return root / "old", root / "new"


def holds_only_the_index(folder: Path) -> bool:
    """``folder`` holds its manifest, the files it lists (under their names, or under the
    names of ``files`` while a save settles) and the bookkeeping files: nothing else but the
    partial folder of a fit to resume."""
    manifest = json.loads((folder / "manifest.json").read_text())
    mapping = manifest.get("files", {})
    live = {
        mapping.get(n, n) if (folder / mapping.get(n, n)).is_file() else n
        for n in manifest["sha256"]
    }
    return {p.name for p in folder.iterdir()} - {".partial"} == live | {
        "manifest.json",
        MARKER_FILE,
        LOCK_FILE,
    }


def which(folder: Path, old: Path, new: Path) -> str:
    """``"old"`` or ``"new"``: the index that ``folder`` loads as (fails if neither)."""
    index = load_index(folder)
    features = Path(index.files["features.npy"]).read_bytes()
    for name, reference in (("old", old), ("new", new)):
        expected = load_file(str(reference / "index.safetensors"))
        if all(torch.equal(index.tensors()[k], v) for k, v in expected.items()) and (
            features == (reference / "features.npy").read_bytes()
        ):
            return name
    raise AssertionError(f"{folder} is neither the old nor the new index")


@pytest.mark.slow
def test_a_fit_failing_at_any_write_leaves_the_old_index_or_the_new(
    old_and_new, tmp_path, monkeypatch
) -> None:
    """The k-th write or rename of a fit over an existing index fails, for every k. At that
    instant the folder is what a kill would leave: it loads as the old or the new index, and
    the next save leaves no stray file. After the failure (the process cleans up) it loads as
    the old or the new index and holds nothing else."""
    old, new = old_and_new
    out = tmp_path / "index"
    outcomes = []
    for k in range(1, 200):
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(old, out)
        calls, killed = [0], tmp_path / f"killed-{k}"

        def at_the_kth(real, k=k, calls=calls, killed=killed):
            def call(*args, **kwargs):
                calls[0] += 1
                if calls[0] == k:
                    shutil.copytree(out, killed)  # what a kill right now would leave
                    raise OSError(errno.ENOSPC, "No space left on device (injected)")
                return real(*args, **kwargs)

            return call

        monkeypatch.setattr(files, "_write", at_the_kth(files._write))
        monkeypatch.setattr(os, "replace", at_the_kth(os.replace))
        try:
            main([*FIT, "--seed", "1", "--out", str(out)])
        except SystemExit as exc:  # a full disk: one line, exit status 2 (issue 30, item 17)
            assert exc.code == 2
        except OSError:  # a failed rename (not a full disk) is not the user's
            pass
        finally:
            monkeypatch.undo()
        if calls[0] < k:  # the fit made fewer than k writes: every k has been tried
            assert which(out, old, new) == "new"
            break
        outcomes.append((which(killed, old, new), which(out, old, new)))
        # what a kill leaves does not stand in the next command's way
        assert folder_kind(killed) == "index", k
        assert folder_kind(killed / ".partial") in (None, "partial"), k
        assert holds_only_the_index(out), k
        save_index(load_index(new), killed)  # the next save cleans up after a kill
        assert {p.name for p in killed.iterdir()} - {".partial"} == INDEX_FILES, k
        assert which(killed, old, new) == "new"
        shutil.rmtree(killed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]  # nothing beside it
    kinds = set(outcomes)
    assert ("old", "old") in kinds and ("new", "new") in kinds, kinds
    assert len(outcomes) > 15  # every write and rename of the shards and of the save


def test_damaged_manifests_do_not_load(old_and_new, tmp_path, capsys) -> None:
    old, _ = old_and_new
    cases = {
        "no checksums": (lambda m: m.update(sha256={}), "lists no checksum of index.safetensors"),
        "one missing": (lambda m: m["sha256"].pop("index.safetensors"), "lists no checksum"),
        "not a sha": (
            lambda m: m["sha256"].update({"features.npy": "abc"}),
            "checksum of 'features.npy' is not a SHA-256",
        ),
        "escaping name": (
            lambda m: m.update(files={"index.safetensors": "../old/index.safetensors"}),
            "'files' are not names",
        ),
        "short class names": (
            lambda m: m.update(class_names=["0", "1"]),
            "class_names lists 2 names for 10 classes",
        ),
        "recipe not a dict": (lambda m: m.update(recipe=[1]), "recipe is a list, not a mapping"),
        "recipe field": (lambda m: m["recipe"].update(num_classes="10"), "recipe's num_classes"),
        "shape": (lambda m: m.update(n_reference=7), "projections has shape (1400, 5)"),
    }
    for name, (edit, message) in cases.items():
        index = tmp_path / name.replace(" ", "-")
        shutil.copytree(old, index)
        edit_manifest(index, edit)
        if name == "no checksums":  # and flipped bytes that no checksum stands for
            data = bytearray((index / "index.safetensors").read_bytes())
            data[-3] ^= 1
            (index / "index.safetensors").write_bytes(bytes(data))
        out = tmp_path / f"out-{index.name}"
        code, _, err = run(
            ["explain", "reference:0", "--index", str(index), "--out", str(out)], capsys
        )
        assert_one_line_error(code, err, message)
        assert not out.exists()
        if name != "recipe field":
            with pytest.raises(IndexLoadError, match=message.split(" (")[0].replace("(", r"\(")):
                load_index(index)


def test_a_folder_where_a_file_goes_is_refused_before_any_file_is_written(tmp_path) -> None:
    """Issue 38, item 18: a folder named as one of the files (``results.md``) was an
    ``IsADirectoryError`` after the files before it were renamed into place; now it is refused
    before any is written, naming it, and nothing else changes."""
    (tmp_path / "results.md").mkdir()
    (tmp_path / "results.json").write_text("earlier")
    contents = {tmp_path / "results.json": b"{}", tmp_path / "results.md": b"# results"}
    with pytest.raises(IsADirectoryError) as refused:
        files.replace_files(contents)
    assert refused.value.filename == str(tmp_path / "results.md")
    assert (tmp_path / "results.json").read_text() == "earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "results.md"]


def test_temporary_names_of_long_names_fit_and_are_known(tmp_path) -> None:
    """Issue 38, item 14: a name of 242 to 255 bytes is written through a temporary name that
    fits 255 bytes, and the temporary file a kill would leave is known as that file's (the
    next command removes it, and nothing else)."""
    names = ["é" + "x" * (size - 2) for size in (240, 242, 245, 255)]
    for name in names:
        files.replace_file(tmp_path / name, b"data")
        assert (tmp_path / name).read_bytes() == b"data"
    stems = files.temporary_stems(names)
    left = [f".{stem}.tmp-0123abcd" for stem in stems]  # what a kill leaves
    assert all(len(name.encode()) <= 255 for name in left)
    for name in left:
        (tmp_path / name).write_bytes(b"half")
    (tmp_path / ".x.tmp-0123abcd").write_bytes(b"a user's")
    (tmp_path / MARKER_FILE).write_text(json.dumps({"kind": "explain", "files": names}))
    remove_listed(tmp_path, keep=names)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*names, MARKER_FILE, ".x.tmp-0123abcd"]
    )
