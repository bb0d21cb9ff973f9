"""Crypto-shredding: once a body's data key is destroyed, its sealed bytes can never be
opened again and the wrapped key bytes are gone from every file; a forgotten record's
text is gone from every file too (projection invalidation is physical)."""

from __future__ import annotations

import pytest
from engine_support import (
    accept,
    admit,
    capture,
    context,
    files_containing,
    forget,
    open_engine,
    search_ids,
    withdraw,
)

from engram.service.engine.records import candidate_aad, record_aad
from engram.service.engine.sealing import SealBroken


def candidate_secret(engine, ctx, candidate_id):
    """(key_id, sealed bytes, wrapped key bytes) of a candidate, read before an operation."""
    with engine.deps.store.reader() as tx:
        row = tx.candidate(ctx.scope, candidate_id)
    wrapped, _ = engine.deps.store.wrapped_key(row.key_id)
    return row.key_id, row.sealed, wrapped


def record_secret(engine, ctx, record_id):
    with engine.deps.store.reader() as tx:
        row = tx.record(ctx.scope, record_id)
    wrapped, _ = engine.deps.store.wrapped_key(row.key_id)
    return row.key_id, row.sealed, wrapped


def assert_shredded(engine, data_dir, key_id, sealed, wrapped, aad) -> None:
    assert engine.deps.store.wrapped_key(key_id) is None
    with pytest.raises(SealBroken):
        engine.deps.vault.open_json(key_id, sealed, aad)
    assert files_containing(data_dir, wrapped) == []
    assert files_containing(data_dir, sealed) == []
    assert files_containing(data_dir, key_id.encode()) == []


def db_files(data_dir) -> set[str]:
    return {p.name for p in data_dir.iterdir() if p.name.startswith("engram.db")}


@pytest.mark.sqlite_only("scans the SQLite database and WAL files for the destroyed bytes")
def test_withdraw_destroys_the_candidate_key(engine, data_dir) -> None:
    ctx = context()
    _, cap = capture(engine, ctx, "A draft about the pelican exporter.")
    aad = candidate_aad(ctx.scope, cap["candidate_id"])
    key_id, sealed, wrapped = candidate_secret(engine, ctx, cap["candidate_id"])
    # control: before the withdrawal the bytes are on disk and the body opens
    assert files_containing(data_dir, wrapped) and files_containing(data_dir, sealed)
    assert engine.deps.vault.open_json(key_id, sealed, aad)["payload"]["purpose_ref"]
    out = withdraw(engine, ctx, cap["candidate_id"])
    assert out["key_destruction"] == "complete"
    assert {"engram.db", "engram.db-wal"} <= db_files(data_dir)
    assert_shredded(engine, data_dir, key_id, sealed, wrapped, aad)


def test_acceptance_destroys_the_candidate_key(engine, data_dir) -> None:
    ctx = context()
    _, cap = capture(engine, ctx, "An accepted note about the pelican exporter.")
    aad = candidate_aad(ctx.scope, cap["candidate_id"])
    key_id, sealed, wrapped = candidate_secret(engine, ctx, cap["candidate_id"])
    rid = admit(engine, ctx, cap["candidate_id"])["outcome"]["record_id"]
    assert_shredded(engine, data_dir, key_id, sealed, wrapped, aad)
    # the record lives under a key of its own
    r_key, r_sealed, _ = record_secret(engine, ctx, rid)
    assert r_key != key_id
    assert engine.deps.vault.open_json(r_key, r_sealed, record_aad(ctx.scope, rid))["payload"]


def test_rejection_destroys_the_candidate_key(make_engine, tmp_path) -> None:
    engine = make_engine(admission_policy={"allowed_locator_schemes": ["doc"]}, name="rejecting")
    ctx = context()
    _, cap = capture(engine, ctx, "A refused note about the pelican exporter.")
    aad = candidate_aad(ctx.scope, cap["candidate_id"])
    key_id, sealed, wrapped = candidate_secret(engine, ctx, cap["candidate_id"])
    assert admit(engine, ctx, cap["candidate_id"])["outcome"]["status"] == "rejected"
    assert_shredded(engine, tmp_path / "rejecting", key_id, sealed, wrapped, aad)


def test_duplicate_admission_destroys_the_candidate_key(engine, data_dir) -> None:
    ctx = context()
    accept(engine, ctx, "A twice-captured note about the pelican exporter.")
    _, cap = capture(engine, ctx, "A twice-captured note about the pelican exporter.")
    aad = candidate_aad(ctx.scope, cap["candidate_id"])
    key_id, sealed, wrapped = candidate_secret(engine, ctx, cap["candidate_id"])
    assert admit(engine, ctx, cap["candidate_id"])["outcome"]["status"] == "duplicate_exact"
    assert_shredded(engine, data_dir, key_id, sealed, wrapped, aad)


def test_forget_destroys_the_record_key_and_every_trace(engine, data_dir) -> None:
    ctx = context()
    token = b"xylophonequagmire"
    rid = accept(engine, ctx, "The xylophonequagmire migration finished on the ledger cluster.")
    keep = accept(engine, ctx, "The ledger cluster keeps its other records.")
    aad = record_aad(ctx.scope, rid)
    key_id, sealed, wrapped = record_secret(engine, ctx, rid)
    assert files_containing(data_dir, token), "control: the live record's text is indexed on disk"
    assert search_ids(engine, ctx, "xylophonequagmire")[0] == rid
    out = forget(engine, ctx, rid)
    assert out["projection_invalidation"] == "complete"
    assert_shredded(engine, data_dir, key_id, sealed, wrapped, aad)
    assert files_containing(data_dir, token) == []
    # the record id itself stays only in the store (journal and tombstone), never in an index
    assert all(name.startswith("engram.db") for name in files_containing(data_dir, rid.encode()))
    assert rid not in search_ids(engine, ctx, "xylophonequagmire")
    assert search_ids(engine, ctx, "ledger cluster") == [keep]


def test_shredding_survives_a_reopen(data_dir) -> None:
    ctx = context()
    engine = open_engine(data_dir)
    rid = accept(engine, ctx, "The zanzibarquokka flag was removed.")
    key_id, sealed, wrapped = record_secret(engine, ctx, rid)
    forget(engine, ctx, rid)
    engine.close()
    engine = open_engine(data_dir)
    try:
        assert_shredded(engine, data_dir, key_id, sealed, wrapped, record_aad(ctx.scope, rid))
        assert files_containing(data_dir, b"zanzibarquokka") == []
        assert search_ids(engine, ctx, "zanzibarquokka") == []
    finally:
        engine.close()


@pytest.mark.sqlite_only("scans the SQLite database and WAL files for the destroyed bytes")
def test_shredding_with_many_keys_and_large_bodies(engine, data_dir) -> None:
    """Keys spread over many b-tree pages and bodies in overflow pages: page splits and
    freed overflow chains must not leave copies of destroyed material behind."""
    ctx = context()
    filler = "The pelican exporter writes partition manifests in batches. " * 120  # ~7 KB
    caps = [capture(engine, ctx, f"{filler} draft {i}")[1] for i in range(120)]
    doomed = caps[::7]
    secrets = [candidate_secret(engine, ctx, c["candidate_id"]) for c in doomed]
    for c in doomed[: len(doomed) // 2]:
        assert withdraw(engine, ctx, c["candidate_id"])["key_destruction"] == "complete"
    for c in doomed[len(doomed) // 2 :]:
        admit(engine, ctx, c["candidate_id"])
    blobs = [p.read_bytes() for p in sorted(data_dir.rglob("*")) if p.is_file()]
    for (key_id, sealed, wrapped), cap in zip(secrets, doomed):
        assert engine.deps.store.wrapped_key(key_id) is None
        assert not any(wrapped in blob for blob in blobs), cap["candidate_id"]
        assert not any(sealed[:64] in blob for blob in blobs), cap["candidate_id"]
    # the survivors are intact
    survivor = caps[1]
    key_id, sealed, wrapped = candidate_secret(engine, ctx, survivor["candidate_id"])
    assert any(wrapped in blob for blob in blobs), "control: a live key is found by the scan"
    assert engine.deps.vault.open_json(key_id, sealed, candidate_aad(ctx.scope, survivor["candidate_id"]))


def test_forget_purges_a_record_that_shares_an_index_segment(engine, data_dir) -> None:
    """After a rebuild every record sits in one index segment, so a merely deleted
    document would keep its stored text there: forget must rewrite it away."""
    ctx = context()
    others = [accept(engine, ctx, f"The heron ledger entry {i} stays.") for i in range(5)]
    rid = accept(engine, ctx, "The heron quetzalcoatlus entry must vanish.")
    engine.operator.rebuild_projections()
    assert files_containing(data_dir / "index", b"quetzalcoatlus"), "control: indexed on disk"
    out = forget(engine, ctx, rid)
    assert out["projection_invalidation"] == "complete"
    assert files_containing(data_dir, b"quetzalcoatlus") == []
    assert set(search_ids(engine, ctx, "heron ledger", limit=10)) == set(others)
