"""Fixtures of the reliability suite: a real engine behind a real uvicorn on loopback
(`rel_support.Live`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rel_support import FIGURES, Live  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory):
    with Live(tmp_path_factory.mktemp("rel-data")) as running:
        yield running


@pytest.fixture
def fresh(tmp_path: Path):
    """A server of its own, for tests that scan or damage the data directory."""
    with Live(tmp_path / "data") as running:
        yield running


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    if FIGURES:
        terminalreporter.section("engram reliability figures")
        for name, count in sorted(FIGURES.items()):
            terminalreporter.write_line(f"{name}: {count}")
