"""The documentation site builds with `mkdocs build --strict`: every page in the navigation,
every link between pages and every #anchor resolves, and eval/RESULTS.md is included.

Runs `python -m mkdocs` of the interpreter running the tests (the `test` extra brings
mkdocs-material); skipped, saying so, where it is not installed.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="mkdocs-material is not installed in this interpreter (pip install -e '.[test]' brings it)",
)


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def test_site_builds_strict(tmp_path):
    result = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    for page in (
        "index.html",
        "reference/cli/index.html",
        "reference/configuration/index.html",
        "reference/error-codes/index.html",
        "results/index.html",
    ):
        assert (tmp_path / "site" / page).is_file(), page
    results = (tmp_path / "site" / "results" / "index.html").read_text(encoding="utf-8")
    first_heading = next(
        line
        for line in (ROOT / "eval" / "RESULTS.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("# ")
    )
    assert first_heading[2:].split()[0] in results, "the results page includes eval/RESULTS.md"


def test_a_broken_anchor_fails_the_build(tmp_path):
    """The validation settings make a link to a missing heading an error, not a warning."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "eval").mkdir()
    shutil.copy(ROOT / "eval" / "RESULTS.md", copy / "eval" / "RESULTS.md")
    page = copy / "docs" / "index.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n[nowhere](ranking.md#no-such-heading)\n", encoding="utf-8")
    result = _build(copy / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-heading" in result.stdout + result.stderr
