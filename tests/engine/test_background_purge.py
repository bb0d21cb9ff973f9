"""A forget in a scope too large to rewrite inline answers `pending`, and the background
sweeper then completes the physical purge (the pending list lives in the store)."""

from __future__ import annotations

from engine_support import accept, context, forget, search_ids

import engram.service.engine.transitions as transitions


def _files_hold(data_dir, needle: bytes) -> bool:
    return any(needle in p.read_bytes() for p in data_dir.rglob("*") if p.is_file())


def test_large_scope_forget_is_pending_then_swept(engine, monkeypatch) -> None:
    ctx = context()
    keep = accept(engine, ctx, "the lighthouse keeper logs tide tables nightly")
    gone = accept(engine, ctx, "the quorvexan ledger migrates on thursdays")
    data_dir = engine.deps.data_dir
    assert _files_hold(data_dir, b"quorvexan")  # positive control

    monkeypatch.setattr(transitions, "INLINE_PURGE_LIMIT", 0)  # 1 live record left
    monkeypatch.setattr(engine.deps.sweeper, "schedule", lambda sweep: None)  # hold it back
    result = forget(engine, ctx, gone)
    assert result["projection_invalidation"] == "pending"
    assert "coverage_receipt_digest" not in result
    assert gone not in search_ids(engine, ctx, "quorvexan ledger")  # logically gone at once
    assert engine.deps.store.pending_purges() == {ctx.scope: [gone]}

    assert engine.sweep_invalidations() == 1
    assert engine.deps.store.pending_purges() == {}
    assert not _files_hold(data_dir, b"quorvexan")
    assert keep in search_ids(engine, ctx, "lighthouse keeper")
    assert engine.sweep_invalidations() == 0  # nothing left: no needless rewrite


def test_scheduled_sweep_runs_in_the_background(engine, monkeypatch) -> None:
    ctx = context()
    gone = accept(engine, ctx, "the zentrabique archive closes at dusk")
    monkeypatch.setattr(transitions, "INLINE_PURGE_LIMIT", -1)
    assert forget(engine, ctx, gone)["projection_invalidation"] == "pending"
    assert engine.deps.sweeper.wait_idle(timeout=30)
    assert engine.deps.store.pending_purges() == {}
    assert not _files_hold(engine.deps.data_dir, b"zentrabique")
