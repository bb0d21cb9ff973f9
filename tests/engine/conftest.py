"""Fixtures for the memory-engine tests: an engine on a temporary data directory with
the deterministic hashing encoder of the ranking tests (no model download, no GPU).

Temporary directories live on tmpfs (/dev/shm) when it is available: the store commits
with synchronous=FULL, and an fsync per commit on a slow disk would make this suite
several times slower without testing anything more (kill -9 durability only needs the
page cache; raw byte scans read the same files). Set ENGRAM_TEST_ON_DISK=1 to use the
ordinary temporary directory instead.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from engine_support import Backend, HashingTestEncoder, open_engine  # noqa: E402

_SHM = Path("/dev/shm")
_names = itertools.count()


def _fast_root() -> Path | None:
    if os.environ.get("ENGRAM_TEST_ON_DISK") == "1":
        return None
    if _SHM.is_dir() and os.access(_SHM, os.W_OK):
        return _SHM
    return None


class FastTmp:
    """mktemp(name) under tmpfs when available, else under pytest's own base temp."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self._factory = factory
        root = _fast_root()
        self._base = Path(tempfile.mkdtemp(prefix="engram-engine-tests-", dir=root)) if root else None

    def mktemp(self, name: str) -> Path:
        if self._base is None:
            return self._factory.mktemp(name)
        path = self._base / f"{name}-{next(_names)}"
        path.mkdir()
        return path

    def cleanup(self) -> None:
        if self._base is not None:
            shutil.rmtree(self._base, ignore_errors=True)


@pytest.fixture(scope="session")
def fast_tmp(tmp_path_factory: pytest.TempPathFactory):
    tmp = FastTmp(tmp_path_factory)
    yield tmp
    tmp.cleanup()


@pytest.fixture
def tmp_path(fast_tmp: FastTmp) -> Path:
    """Overrides pytest's tmp_path for this directory (tmpfs when available)."""
    path = fast_tmp.mktemp("t")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


_TABLES_KEPT = ("schema_migrations",)


@pytest.fixture(scope="session")
def engine_database(request: pytest.FixtureRequest) -> str:
    """One PostgreSQL database for the engine suite's postgres runs (emptied per test)."""
    return request.getfixturevalue("postgres_cluster").create_database("engine")


def _empty(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
            if r[0] not in _TABLES_KEPT
        ]
        if tables:
            conn.execute("TRUNCATE " + ", ".join(f'"{t}"' for t in tables))


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest):
    """Every test using `engine` runs on both stores; engines the test opens itself
    (open_engine, make_engine) follow the same choice."""
    if request.param == "sqlite":
        yield "sqlite"
        return
    only = request.node.get_closest_marker("sqlite_only")
    if only is not None:
        pytest.skip(f"SQLite-specific: {only.args[0]}")
    url = request.getfixturevalue("engine_database")
    _empty(url)
    Backend.database_url = url
    try:
        yield "postgres"
    finally:
        Backend.database_url = None


@pytest.fixture
def engine(data_dir: Path, backend: str):
    eng = open_engine(data_dir)
    yield eng
    eng.close()


@pytest.fixture
def make_engine(tmp_path: Path):
    """Open engines with host or admission policy files written first.

    make_engine(host_policy={...}, admission_policy={...}, name="x", **open_kwargs)
    """
    opened = []

    def make(*, host_policy: dict | None = None, admission_policy: dict | None = None, name: str = "data", **kwargs):
        directory = tmp_path / name
        directory.mkdir(parents=True, exist_ok=True)
        if host_policy is not None:
            (directory / "host_policy.json").write_text(json.dumps(host_policy))
        if admission_policy is not None:
            (directory / "admission_policy.json").write_text(json.dumps(admission_policy))
        eng = open_engine(directory, **kwargs)
        opened.append(eng)
        return eng

    yield make
    for eng in opened:
        try:
            eng.close()
        except Exception:  # already closed by the test
            pass


@pytest.fixture
def encoder() -> HashingTestEncoder:
    return HashingTestEncoder()
