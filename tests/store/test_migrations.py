"""Versioned schema: a fresh database is at the latest step, an old one is adopted, and
a database a newer release migrated is refused with a clear error (store and CLI)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from service.store.migrations import Migration, SchemaTooNew, pending
from service.store.sqlite import SQLITE_MIGRATIONS, SqliteStore


def test_fresh_database_is_at_latest_step(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "engram.db")
    try:
        assert store.schema_version() == len(SQLITE_MIGRATIONS)
    finally:
        store.close()
    # reopening applies nothing twice
    store = SqliteStore(tmp_path / "engram.db")
    try:
        assert store.schema_version() == len(SQLITE_MIGRATIONS)
    finally:
        store.close()


def test_pre_versioning_database_is_adopted(tmp_path: Path) -> None:
    path = tmp_path / "engram.db"
    conn = sqlite3.connect(path)
    for statement in SQLITE_MIGRATIONS[0].statements:
        conn.execute(statement)
    conn.execute("INSERT INTO tenants VALUES ('acme', 1, 'then')")
    conn.commit()
    conn.close()
    store = SqliteStore(path)
    try:
        assert store.schema_version() == len(SQLITE_MIGRATIONS)
        assert store.tenant_enabled("acme")
    finally:
        store.close()


def _newer(path: Path) -> None:
    SqliteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_migrations VALUES (?, 'from the future', 'later')",
                 (len(SQLITE_MIGRATIONS) + 1,))
    conn.commit()
    conn.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "engram.db"
    _newer(path)
    with pytest.raises(SchemaTooNew) as info:
        SqliteStore(path)
    assert "newer than this release" in str(info.value)


def test_cli_refuses_newer_schema_with_reason(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _newer(data / "engram.db")
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(Path.cwd()))}
    env.pop("ENGRAM_DATABASE_URL", None)
    proc = subprocess.run(
        [sys.executable, "-m", "service.cli", "admin", "tenant", "status", "acme", "--data-dir", str(data)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 2
    assert "newer than this release" in proc.stderr


def test_steps_must_be_ordered() -> None:
    steps = (Migration(1, "a", ()), Migration(3, "c", ()))
    with pytest.raises(ValueError):
        pending(0, steps)
    assert [m.version for m in pending(1, (Migration(1, "a", ()), Migration(2, "b", ())))] == [2]
