"""Lint, format and types run in the suite, so CI checks them with the README's test command.

ruff's rules and mypy's options live in pyproject.toml. mypy must pass on every room; the
installed namespace maps the repository's folders to `engram.*` through an import hook
mypy does not run, so the check builds that tree from symbolic links in a temporary
folder and checks it there.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("models", "ranking", "service", "index_data", "eval")


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    pytest.importorskip("ruff")
    result = _run("ruff", "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_applied():
    pytest.importorskip("ruff")
    result = _run("ruff", "format", "--check", "--no-cache", ".")
    assert result.returncode == 0, "run `ruff format .`:\n" + result.stdout + result.stderr


def test_mypy_is_clean_on_every_room(tmp_path):
    pytest.importorskip("mypy")
    namespace = tmp_path / "engram"
    namespace.mkdir()
    for room in ROOMS:
        (namespace / room).symlink_to(ROOT / room, target_is_directory=True)
    packages = [arg for room in ROOMS for arg in ("-p", f"engram.{room}")]
    result = _run(
        "mypy",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--cache-dir",
        str(tmp_path / "cache"),
        *packages,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
