"""The documentation site builds with `mkdocs build --strict`: every page in the navigation,
every link between pages and every #anchor resolves, and the results pages' links to the
files a run wrote under eval/ are links in the site.

Runs `python -m mkdocs` of the interpreter running the tests (the `test` extra brings
mkdocs-material); skipped, saying so, where it is not installed.
"""

from __future__ import annotations

import importlib.util
import os
import re
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


def _copy_repo(tmp_path: Path) -> Path:
    """The site's sources (docs/, mkdocs.yml and the run files under eval/) in a scratch folder."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    for kept in ("bench-results", "results"):
        shutil.copytree(ROOT / "eval" / kept, copy / "eval" / kept)
    return copy


def test_site_builds_strict(tmp_path):
    result = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    site = tmp_path / "site"
    for page in ("index.html", "reference/cli/index.html", "reference/configuration/index.html"):
        assert (site / page).is_file(), page
    assert (site / "reference" / "error-codes" / "index.html").is_file()
    topics = sorted(p.stem for p in (ROOT / "docs" / "results").glob("*.md") if p.stem != "index")
    assert topics, "the results are one page a topic under docs/results/"
    for topic in topics:
        assert (site / "results" / topic / "index.html").is_file(), topic


def test_results_links_to_run_files_are_links_in_the_site(tmp_path):
    """A results page's link to a report or plot under eval/ leads to that file in the site."""
    result = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    site = tmp_path / "site"
    linked = 0
    for page in (ROOT / "docs" / "results").glob("*.md"):
        html = (site / "results" / (page.stem if page.stem != "index" else "")).joinpath("index.html")
        text = html.read_text(encoding="utf-8")
        for href in re.findall(r'href="([^"#]*eval/[^"#]*)"', text):
            target = (html.parent / href).resolve()
            assert target.is_file() or (target / "index.html").is_file(), f"{page.name}: {href} leads nowhere"
            linked += 1
    assert linked, "the results pages link to the files their runs wrote"


def test_a_results_link_to_a_missing_run_file_fails_the_build(tmp_path):
    """A link into eval/ that names no file is an error, never shown quietly as text."""
    copy = _copy_repo(tmp_path)
    page = copy / "docs" / "results" / "capacity.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n[gone](../../eval/bench-results/no-such-run/report.md)\n")
    result = _build(copy / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-run" in result.stdout + result.stderr


def test_a_broken_anchor_fails_the_build(tmp_path):
    """The validation settings make a link to a missing heading an error, not a warning."""
    copy = _copy_repo(tmp_path)
    page = copy / "docs" / "index.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n[nowhere](ranking.md#no-such-heading)\n", encoding="utf-8")
    result = _build(copy / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-heading" in result.stdout + result.stderr
