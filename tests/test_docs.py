"""The documentation site builds offline in strict mode: no broken link, page or API reference."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds the documentation site

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("mkdocs", reason="the `docs` extra is not installed")


def test_site_builds_strictly(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    excluded = [line for line in done.stderr.splitlines() if "excluded from the built site" in line]
    assert not excluded, "links that 404 on the site: " + "; ".join(excluded)
    for page in ("index.html", "method/index.html", "api/interpreter/index.html"):
        assert (tmp_path / page).is_file(), page
    api = (tmp_path / "api" / "interpreter" / "index.html").read_text()
    assert "explain_batch" in api  # the API reference is generated from the docstrings
