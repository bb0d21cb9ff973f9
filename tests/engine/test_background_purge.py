"""A forget in a scope larger than the inline purge limit answers `pending` once the
record is out of every search, and the background sweeper then completes the physical
purge (the pending list lives in the store) after the schedule's delay, one rewrite for
the forgets that came within it."""

from __future__ import annotations

from engine_support import accept, context, forget, open_engine, search, search_ids

from engram.service.engine import PurgeSchedule

GUARD_S = 60  # deadlock guard only: each wait ends as soon as the sweep is done


def _files_hold(data_dir, needle: bytes) -> bool:
    return any(needle in p.read_bytes() for p in data_dir.rglob("*") if p.is_file())


def test_large_scope_forget_is_pending_then_swept(data_dir, backend, monkeypatch) -> None:
    engine = open_engine(data_dir, purge=PurgeSchedule(inline_records=1, delay_s=0))
    try:
        ctx = context()
        keep = accept(engine, ctx, "the lighthouse keeper logs tide tables nightly")
        spare = accept(engine, ctx, "the harbour pilot boards at the outer buoy")
        gone = accept(engine, ctx, "the quorvexan ledger migrates on thursdays")
        assert _files_hold(data_dir, b"quorvexan")  # positive control

        monkeypatch.setattr(engine.deps.sweeper, "schedule", lambda sweep: None)  # hold it back
        result = forget(engine, ctx, gone)  # 2 live records left: more than the limit
        assert result["projection_invalidation"] == "pending"
        assert "coverage_receipt_digest" not in result
        for channels in ("lexical", "lexical_and_semantic"):  # out of every search at once
            policy = {"minimum_channels": channels, "network": "forbid"}
            assert search_ids(engine, ctx, "quorvexan ledger thursdays", capability_policy=policy) == []
        assert engine.deps.store.pending_purges() == {ctx.scope: [gone]}

        assert engine.operator.sweep_invalidations() == 1
        assert engine.deps.store.pending_purges() == {}
        assert not _files_hold(data_dir, b"quorvexan")
        assert keep in search_ids(engine, ctx, "lighthouse keeper")
        assert engine.operator.sweep_invalidations() == 0  # nothing left: no needless rewrite

        # At the limit the purge is done before the answer.
        assert forget(engine, ctx, spare)["projection_invalidation"] == "complete"
    finally:
        engine.close()


def test_forgets_within_the_delay_share_one_background_rewrite(data_dir, backend) -> None:
    engine = open_engine(data_dir, purge=PurgeSchedule(inline_records=0, delay_s=5.0))
    try:
        ctx = context()
        first = accept(engine, ctx, "the zentrabique archive closes at dusk")
        second = accept(engine, ctx, "the vulmorphic gauge reads low at dawn")
        keep = accept(engine, ctx, "the tide gauge is calibrated every spring")
        rewrites: list[list[str]] = []
        purge = engine.deps.ranker.purge

        def counted(scope_key: str, record_ids: list[str]) -> bool:
            rewrites.append(sorted(record_ids))
            return purge(scope_key, record_ids)

        engine.deps.ranker.purge = counted  # type: ignore[method-assign]
        assert forget(engine, ctx, first)["projection_invalidation"] == "pending"
        assert forget(engine, ctx, second)["projection_invalidation"] == "pending"
        assert engine.deps.sweeper.wait_idle(timeout=GUARD_S)  # no restart, no operator call
        assert rewrites == [sorted([first, second])]
        assert engine.deps.store.pending_purges() == {}
        assert not _files_hold(data_dir, b"zentrabique") and not _files_hold(data_dir, b"vulmorphic")
        assert search_ids(engine, ctx, "gauge calibrated spring") == [keep]
    finally:
        engine.close()


def test_pending_purge_hides_the_record_from_every_search_and_page(data_dir, backend) -> None:
    engine = open_engine(data_dir, purge=PurgeSchedule(inline_records=0, delay_s=300))  # purge held off
    try:
        ctx = context()
        ids = [accept(engine, ctx, f"The vole report {i} lists open incidents.") for i in range(12)]
        for channels in ("lexical", "lexical_and_semantic"):
            policy = {"minimum_channels": channels, "network": "forbid"}
            first = search(engine, ctx, "vole report incidents", limit=4, capability_policy=policy)
            seen = [p["record"]["record_id"] for p in first["records"]]
            rest = [rid for rid in ids if rid not in seen]
            gone = rest[0]
            assert forget(engine, ctx, gone)["projection_invalidation"] == "pending"
            ids.remove(gone)
            later, cursor = [], first["next_page_cursor"]
            while cursor:  # the pages pinned before the forget
                page = search(
                    engine, ctx, "vole report incidents", limit=4, page_cursor=cursor, capability_policy=policy
                )
                later += [p["record"]["record_id"] for p in page["records"]]
                cursor = page.get("next_page_cursor")
            assert gone not in later and sorted(later) == sorted(set(rest) - {gone})
            fresh = search_ids(engine, ctx, f"vole report {gone}", limit=20, capability_policy=policy)
            assert gone not in fresh and len(fresh) == len(ids)
        assert len(engine.deps.store.pending_purges()[ctx.scope]) == 2  # still owed: nothing purged yet
    finally:
        engine.close()
