"""Running the ``repinterp`` command in tests, and looking at the folders it writes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from repinterp.cli import main
from repinterp.store.index_folder import manifest_sha256

FIT = ["fit", "--model", "digits_cnn", "--reference", "digits", "--boundaries", "5"]
FIT += ["--shard-size", "700", "--quiet"]  # the bundled digits weights; 2 shards of 700 images


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_one_line_error(code: int, err: str, pattern: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("repinterp: error: "), err
    assert pattern in lines[0], lines[0]
    assert "Traceback" not in err


def listing(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path: bytes)."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def edit_manifest(index: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    """Edit the manifest of the index folder ``index`` in place and seal it again with the
    checksum of its new content: an edit made on purpose, which only the checks of the
    fields themselves (not the manifest's checksum) can refuse."""
    manifest = json.loads((index / "manifest.json").read_text())
    edit(manifest)
    manifest["manifest_sha256"] = manifest_sha256(manifest)
    (index / "manifest.json").write_text(json.dumps(manifest))


def user_folder(path: Path) -> dict[str, bytes]:
    (path / "sub").mkdir(parents=True)
    (path / "t.txt").write_text("x")
    (path / "sub" / "notes.txt").write_text("mine")
    return listing(path)
