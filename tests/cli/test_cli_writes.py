"""Issue 30, items 1 to 6 and 17, from the command line: what a command writes never costs the
user a file. A user's file saved meanwhile, or left where an index file goes, is never taken for
the project's; outputs are replaced by a rename, never written through a link (hard or
symbolic); a full disk or a name too long leaves what was there and says so in one line."""

import builtins
import errno
import json
import os
from pathlib import Path

import pytest

from repinterp.cli.parser import main
from repinterp.store import files, shards
from repinterp.store.index_folder import load_index
from repinterp.store.outputs import LOCK_FILE, MARKER_FILE

from ..commandline import FIT, assert_one_line_error, listing, run

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    """A digits index (bundled weights)."""
    out = tmp_path_factory.mktemp("cli-writes") / "index"
    main([*FIT, "--out", str(out)])
    return out


def kept(folder: Path | dict[str, bytes]) -> dict[str, bytes]:
    """The files of an index folder (or its listing) but its bookkeeping and partial folder."""
    files = listing(folder) if isinstance(folder, Path) else folder
    return {k: v for k, v in files.items() if "/" not in k and k not in (LOCK_FILE, MARKER_FILE)}


def explain(index: Path, out: Path, *extra: str) -> list[str]:
    images = ["reference:0", "reference:1"]
    return ["explain", *images, "--index", str(index), "--out", str(out), "--quiet", *extra]


def test_a_file_saved_into_the_folder_while_fit_runs_is_never_the_projects(
    tmp_path, capsys, monkeypatch
) -> None:
    """Item 1: notes.md saved into the index folder while fit runs is not listed in the marker,
    and the next fit keeps it."""
    out = tmp_path / "index"
    save_shard = shards.PartialBuild.save_shard

    def and_the_user_saves_notes(self, *args, **kwargs):
        (out / "notes.md").write_text("my notes")
        return save_shard(self, *args, **kwargs)

    monkeypatch.setattr(shards.PartialBuild, "save_shard", and_the_user_saves_notes)
    code, _, err = run([*FIT, "--out", str(out)], capsys)
    assert code == 0, err
    monkeypatch.undo()
    assert "notes.md" not in json.loads((out / MARKER_FILE).read_text())["files"]
    code, _, err = run([*FIT, "--seed", "1", "--out", str(out)], capsys)
    assert code == 0, err
    assert (out / "notes.md").read_text() == "my notes"
    assert len(load_index(out)) == 1400


def test_explain_replaces_its_files_never_writing_through_links(index, tmp_path, capsys) -> None:
    """Item 3: rerunning explain leaves a hard-linked backup of its folder (cp -al) as it was,
    and a NAME.json that is a symbolic link to a file outside the folder leaves that file as it
    was, with --overwrite or not."""
    out = tmp_path / "ex"
    code, _, err = run(explain(index, out, "--top-k", "3"), capsys)
    assert code == 0, err
    backup = tmp_path / "backup"  # cp -al ex backup
    backup.mkdir()
    for file in out.iterdir():
        os.link(file, backup / file.name)
    saved = listing(backup)
    outside = tmp_path / "outside.json"
    outside.write_text("my own file")
    (out / "reference-1.json").unlink()
    (out / "reference-1.json").symlink_to(outside)
    for top_k, extra in (("2", []), ("1", ["--overwrite"])):
        code, _, err = run(explain(index, out, "--top-k", top_k, *extra), capsys)
        assert code == 0, err
        assert listing(backup) == saved
        assert outside.read_text() == "my own file"
        for name in ("reference-0", "reference-1"):
            assert len(json.loads((out / f"{name}.json").read_text())["similar"]) == int(top_k)
        assert (out / "reference-0.png").read_bytes() != saved["reference-0.png"]
    assert {p.name for p in out.iterdir()} == {p.name for p in backup.iterdir()}  # no stray file


class _FullDisk:
    """A file that takes ``room`` more bytes, then fails as a full disk does (what fits is
    written)."""

    def __init__(self, file, room: int) -> None:
        self.file, self.room = file, room

    def write(self, data) -> int:
        size = memoryview(data).nbytes
        if size > self.room:
            self.file.write(bytes(memoryview(data).cast("B")[: self.room]))
            self.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= size
        return self.file.write(data)

    def __getattr__(self, name: str):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


def fill_disk(monkeypatch, folder: Path, room: int = 1000) -> None:
    """Every file opened for writing in ``folder`` from now on takes ``room`` bytes, then the
    disk is full."""
    real = builtins.open

    def opened(file, mode="r", *args, **kwargs):
        f = real(file, mode, *args, **kwargs)
        writing = any(c in mode for c in "wax+")
        inside = isinstance(file, str | os.PathLike) and Path(file).parent == folder
        return _FullDisk(f, room) if writing and inside else f

    monkeypatch.setattr(builtins, "open", opened)


def test_a_failed_explain_rerun_keeps_the_earlier_pair(index, tmp_path, capsys, monkeypatch):
    """Item 4: the disk fills while explain writes again over its earlier figures: the earlier
    PNG and JSON are left as they were, with no stray file, and the error is one line."""
    out = tmp_path / "ex"
    code, _, err = run(explain(index, out, "--top-k", "3"), capsys)
    assert code == 0, err
    before = listing(out)
    fill_disk(monkeypatch, out)
    code, _, err = run(explain(index, out, "--top-k", "2"), capsys)
    monkeypatch.undo()
    assert_one_line_error(code, err, "No space left on device")
    assert listing(out) == before


def test_fit_refuses_a_users_feature_file_where_an_index_has_none(tmp_path, capsys) -> None:
    """Item 5: an index fitted with --no-features, then the user's own features.npy put there:
    a fit without --overwrite refuses to replace it, and the index is left as it was; with
    --overwrite it is replaced, as the option says."""
    out = tmp_path / "index"
    code, _, err = run([*FIT, "--out", str(out), "--no-features"], capsys)
    assert code == 0, err
    (out / "features.npy").write_bytes(b"my features")
    before = listing(out)
    code, _, err = run([*FIT, "--seed", "1", "--out", str(out)], capsys)
    assert_one_line_error(code, err, f"{out / 'features.npy'} was not written by repinterp")
    assert kept(out) == kept(before)  # and the shards of the fit, to resume
    assert "features.npy" not in json.loads((out / MARKER_FILE).read_text())["files"]
    assert len(load_index(out)) == 1400
    code, _, err = run([*FIT, "--seed", "1", "--out", str(out), "--overwrite"], capsys)
    assert code == 0, err
    assert (out / "features.npy").read_bytes() != b"my features"


def test_fit_over_an_explain_folder_keeps_the_explanations(index, tmp_path, capsys) -> None:
    """Item 6: fit --overwrite into an explain folder replaces only the files it writes: the
    explanations stay, through that fit and the next."""
    out = tmp_path / "ex"
    code, _, err = run(explain(index, out), capsys)
    assert code == 0, err
    explanations = {k: v for k, v in listing(out).items() if not k.startswith(".")}
    assert len(explanations) == 5  # two images' pairs and inputs.csv
    for argv in (
        [*FIT, "--out", str(out), "--overwrite"],
        [*FIT, "--seed", "1", "--out", str(out)],
    ):
        code, _, err = run(argv, capsys)
        assert code == 0, err
        assert {k: v for k, v in listing(out).items() if k in explanations} == explanations
        assert len(load_index(out)) == 1400


def test_a_name_too_long_or_a_full_disk_is_one_line(index, tmp_path, capsys, monkeypatch):
    """Item 17: an --out with a component of 300 characters (fit, explain), and a disk that
    fills while fit saves over an index: one line, exit 2, the old index as it was."""
    long = "a" * 300
    for out in (tmp_path / long, tmp_path / long / "sub", tmp_path / "sub" / long):
        for argv in ([*FIT, "--out", str(out)], explain(index, out)):
            code, _, err = run(argv, capsys)
            assert_one_line_error(code, err, "File name too long")
    assert list(tmp_path.iterdir()) == []
    out = tmp_path / "index"
    code, _, err = run([*FIT, "--out", str(out)], capsys)
    assert code == 0, err
    before = kept(out)
    write = files._write

    def full_at_the_index_file(f, data) -> None:
        if Path(f.name).name.startswith("index."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write(f, data)

    monkeypatch.setattr(files, "_write", full_at_the_index_file)
    code, _, err = run([*FIT, "--seed", "1", "--out", str(out)], capsys)
    monkeypatch.undo()
    assert_one_line_error(code, err, "No space left on device")
    assert kept(out) == before  # and the shards of the fit, to resume
    assert len(load_index(out)) == 1400
