"""Fail closed: a missing model, a damaged vector file, a locked store and a full disk
each give the contract's retriable error (never a 500, an empty success or lost data),
and the service recovers once the fault is gone."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from rel_support import (
    MODES,
    PURPOSE,
    Live,
    call,
    capture_args,
    code,
    ctx_token,
    key,
    unique_token,
    value,
)

from engram.models.tools import CAPTURE, GET, REQUEST_ADMISSION, SEARCH

pytestmark = pytest.mark.anyio
HYBRID = {"minimum_channels": "lexical_and_semantic", "network": "forbid"}


async def admitted(url: str, marker: str) -> str:
    tok = ctx_token()
    cid = value(await call(url, tok, "auto", CAPTURE, capture_args(f"fail closed note {marker}")))["candidate_id"]
    out = value(await call(url, tok, "auto", REQUEST_ADMISSION, {"candidate_id": cid, "idempotency_key": key("a")}))
    return out["outcome"]["record_id"]


async def search(url: str, marker: str, policy: dict | None = None, mode: str = "auto") -> dict[str, Any]:
    args: dict[str, Any] = {"query": marker, "purpose_ref": PURPOSE}
    if policy:
        args["capability_policy"] = policy
    return await call(url, ctx_token(), mode, SEARCH, args)


def assert_retriable(env: dict[str, Any], expected: str | tuple[str, ...]) -> None:
    expected = (expected,) if isinstance(expected, str) else expected
    assert code(env) in expected and env["error"]["retriable"] is True, env


async def test_model_missing_semantic_required_is_ranking_unavailable(tmp_path: Path):
    with Live(tmp_path / "data", encoder=None) as live:
        marker = unique_token()
        rid = await admitted(live.url, marker)
        for mode in MODES:
            assert_retriable(await search(live.url, marker, HYBRID, mode), "RANKING_UNAVAILABLE")
            found = value(await search(live.url, marker, mode=mode))
            assert [p["record"]["record_id"] for p in found["records"]] == [rid]
            assert found["rank_receipt"]["channels"] == ["lexical"]


async def test_corrupt_vector_file_then_rebuild(tmp_path: Path):
    data = tmp_path / "data"
    marker = unique_token()
    with Live(data) as live:
        rid = await admitted(live.url, marker)
        assert value(await search(live.url, marker, HYBRID))["records"][0]["record"]["record_id"] == rid
    vector_files = list((data / "index" / "semantic").rglob("vectors-*.bin"))
    assert vector_files
    for path in vector_files:  # flip bytes in the middle: checksum no longer matches
        raw = bytearray(path.read_bytes())
        mid = len(raw) // 2
        raw[mid : mid + 64] = bytes(b ^ 0xFF for b in raw[mid : mid + 64])
        path.write_bytes(bytes(raw))
    with Live(data) as live:  # a restart over the damaged file
        for mode in MODES:
            assert_retriable(await search(live.url, marker, HYBRID, mode), "RANKING_UNAVAILABLE")
            found = value(await search(live.url, marker, mode=mode))  # lexical still serves
            assert [p["record"]["record_id"] for p in found["records"]] == [rid]
        # New writes while the vector file is damaged: acknowledged, or a clear retriable answer.
        later = unique_token()
        tok = ctx_token()
        cid = value(await call(live.url, tok, "auto", CAPTURE, capture_args(f"fail closed note {later}")))[
            "candidate_id"
        ]
        adm_args = {"candidate_id": cid, "idempotency_key": key("a")}
        env = await call(live.url, tok, "auto", REQUEST_ADMISSION, adm_args)
        if not env["ok"]:
            assert_retriable(env, "MUTATION_OUTCOME_UNKNOWN")
            env = await call(live.url, tok, "auto", REQUEST_ADMISSION, adm_args)
        later_rid = value(env)["outcome"]["record_id"]
        live.engine.operator.rebuild_projections()
        for m, r in ((marker, rid), (later, later_rid)):
            found = value(await search(live.url, m, HYBRID))
            assert found["records"][0]["record"]["record_id"] == r
            assert "semantic" in found["rank_receipt"]["channels"]


async def test_store_locked_by_another_process_then_released(fresh):
    marker = unique_token()
    rid = await admitted(fresh.url, marker)
    holder = sqlite3.connect(fresh.data_dir / "engram.db", isolation_level=None, timeout=0)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        args = capture_args(f"written while locked {unique_token()}")
        env = await call(fresh.url, ctx_token(), "auto", CAPTURE, args)
        assert_retriable(env, "STORE_UNAVAILABLE")
        # Reads of acknowledged data: served (WAL readers), or a clear retriable error.
        got = await call(fresh.url, ctx_token(), "legacy", GET, {"record_id": rid, "purpose_ref": PURPOSE})
        assert got["ok"] or code(got) == "STORE_UNAVAILABLE"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    out = value(await call(fresh.url, ctx_token(), "auto", CAPTURE, args))
    assert out["status"] == "committed_pending"  # nothing was committed while locked
    assert all(fresh.engine.operator.verify_journal().values())


class _FullDisk:
    """Proxy of the writer connection: statements fail with SQLITE_FULL as configured."""

    def __init__(self, conn: sqlite3.Connection, fail_on: str, after_commit: bool = False) -> None:
        self._conn, self._fail_on, self._after = conn, fail_on, after_commit
        self.armed = threading.Event()
        self.armed.set()

    def execute(self, sql: str, *params: Any) -> Any:
        if self.armed.is_set() and sql.lstrip().upper().startswith(self._fail_on):
            if self._after:
                self._conn.execute(sql, *params)  # the commit lands, its acknowledgement fails
                self.armed.clear()
            raise sqlite3.OperationalError("database or disk is full")
        return self._conn.execute(sql, *params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.mark.parametrize(
    "fail_on,after,expected",
    [
        ("INSERT", False, ("STORE_UNAVAILABLE",)),
        ("COMMIT", False, ("STORE_UNAVAILABLE", "MUTATION_OUTCOME_UNKNOWN")),
        ("COMMIT", True, ("MUTATION_OUTCOME_UNKNOWN",)),
    ],
)
async def test_disk_full(fresh, fail_on, after, expected):
    marker = unique_token()
    rid = await admitted(fresh.url, marker)
    store = fresh.engine.deps.store
    real = store._writer
    proxy = _FullDisk(real, fail_on, after)
    store._writer = proxy
    args = capture_args(f"written on a full disk {unique_token()}")
    try:
        for mode in MODES:
            env = await call(fresh.url, ctx_token(), mode, CAPTURE, args)
            if env["ok"]:  # only possible on the second try of a commit that landed
                assert after and value(env)["status"] == "duplicate_exact"
                continue
            assert_retriable(env, expected)
    finally:
        store._writer = real
    # Retry with the same key: one clear outcome, and earlier acknowledged data intact.
    out = value(await call(fresh.url, ctx_token(), "auto", CAPTURE, args))
    assert out["status"] == ("duplicate_exact" if after else "committed_pending")
    got = await call(fresh.url, ctx_token(), "auto", GET, {"record_id": rid, "purpose_ref": PURPOSE})
    assert value(got)["record"]["record_id"] == rid
    assert all(fresh.engine.operator.verify_journal().values())
