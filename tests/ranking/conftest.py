"""Shared fixtures: a cheap deterministic encoder for unit tests, the real model once."""

from __future__ import annotations

from pathlib import Path

import pytest
from ranking_support import HashingTestEncoder, doc  # noqa: E402,F401 - re-exported

from engram.ranking import MiniLMEncoder, Ranker  # noqa: E402


@pytest.fixture
def ranker(tmp_path: Path):
    r = Ranker(tmp_path / "idx", HashingTestEncoder())
    yield r
    r.close()


@pytest.fixture(scope="session")
def minilm(model_files: Path) -> MiniLMEncoder:
    encoder = MiniLMEncoder(model_files)
    encoder.load()
    return encoder
