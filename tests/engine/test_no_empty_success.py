"""A search never answers `records: []` as a success while its projection trails the
journal (warm-up, rebuild, a dropped index) or its index is missing: it answers
PROJECTION_STALE or RANKING_UNAVAILABLE, both retriable. Readiness names the scope."""

from __future__ import annotations

import shutil
import threading

import pytest
from engine_support import ErrorCode, accept, capture, context, error_of, open_engine, search, search_ids

from engram.ranking.lexical import INDEX_DIR
from engram.service.engine.records import scope_key


def _lexical_dir(engine, scope) -> object:
    return engine.deps.ranker._lexical._dir(scope_key(scope))  # test reaches in to break it


def test_search_during_a_held_projection_is_stale_not_empty(engine) -> None:
    ctx = context()
    rid = accept(engine, ctx, "The lighthouse keeper logs every passing ship.")
    assert search_ids(engine, ctx, "lighthouse keeper") == [rid]
    # A long projection (warm-up, rebuild) holds the projector while the journal moves on.
    projector = engine.deps.projector
    with projector.running("rebuild"), projector.exclusive():
        done = threading.Event()
        result: dict = {}

        def later() -> None:
            try:
                result["rid"] = accept(engine, ctx, "The lighthouse keeper also logs the weather.")
            except Exception as exc:  # noqa: BLE001
                result["error"] = exc
            done.set()

        worker = threading.Thread(target=later)
        worker.start()
        # accept() catches up after committing, so it waits on the held projector; the
        # journal already holds the new record.
        deadline = 50
        while engine.deps.projector.lag(ctx.scope)["lexical"] == 0 and deadline:
            done.wait(0.1)
            deadline -= 1
        assert engine.deps.projector.lag(ctx.scope)["lexical"] > 0
        err = error_of(search, engine, ctx, "lighthouse keeper")
        assert err.code is ErrorCode.PROJECTION_STALE and err.retriable
    worker.join(30)
    assert "error" not in result
    assert set(search_ids(engine, ctx, "lighthouse keeper")) == {rid, result["rid"]}


def test_a_missing_lexical_index_is_unavailable_not_empty(engine) -> None:
    ctx = context()
    accept(engine, ctx, "Orchard notes: the pear trees flowered early this year.")
    engine.close()
    data_dir = engine.deps.data_dir
    eng = open_engine(data_dir)
    try:
        directory = _lexical_dir(eng, ctx.scope)
        (directory / INDEX_DIR / "meta.json").unlink()  # the index is gone, its cursor file stays
        err = error_of(search, eng, ctx, "pear trees")
        assert err.code is ErrorCode.RANKING_UNAVAILABLE and err.retriable
    finally:
        eng.close()


def test_a_short_catch_up_elsewhere_is_not_stale(engine) -> None:
    """Another call's catch-up holding the projector is ordinary concurrency: within the
    lag bound the search is served (the store re-check keeps it exact)."""
    ctx = context()
    rid = accept(engine, ctx, "The ferry leaves at noon.")
    with engine.deps.projector.exclusive():
        capture(engine, ctx, "A draft that moves the journal on.")
        assert engine.deps.projector.lag(ctx.scope)["lexical"] > 0
        assert search_ids(engine, ctx, "ferry noon") == [rid]


def test_an_index_that_applied_nothing_of_the_scope_is_stale_while_held(engine) -> None:
    """Within the lag bound a search is served from an index that trails the journal,
    but not from one that has applied nothing of the scope yet (a replica that has
    only begun to project it): that would answer an empty list for a scope that holds
    records."""
    ctx = context()
    rid = accept(engine, ctx, "The ferry leaves at noon.")
    projector = engine.deps.projector
    with projector.exclusive():
        engine.deps.ranker.reset()  # every channel back to cursor 0, as on a fresh replica
        assert projector.lag(ctx.scope)["lexical"] > 0
        err = error_of(search, engine, ctx, "ferry noon")
        assert err.code is ErrorCode.PROJECTION_STALE and err.retriable
    assert search_ids(engine, ctx, "ferry noon") == [rid]


def test_a_held_catch_up_of_an_accepted_record_is_waited_for_not_skipped(engine, monkeypatch) -> None:
    """A slow disk: another call's catch-up holds the projector while it applies a
    record the journal accepted (acknowledged, maybe, by its replay or by another
    replica). A search must not rank without it: it waits, and is PROJECTION_STALE when
    the catch-up does not end; once it ends, the record is found."""
    from engram.service.engine import search as search_module

    monkeypatch.setattr(search_module, "ADDITION_WAIT_S", 0.5)
    ctx = context()
    rid = accept(engine, ctx, "The ferry leaves at noon.")
    result: dict = {}
    with engine.deps.projector.exclusive(ctx.scope):
        worker = threading.Thread(target=lambda: result.update(rid=accept(engine, ctx, "The ferry leaves at dusk.")))
        worker.start()  # committed at once; its own catch-up waits on the held projector
        for _ in range(100):
            if engine.deps.projector.lag(ctx.scope)["lexical"] >= 2:
                break
            worker.join(0.1)
        err = error_of(search, engine, ctx, "ferry leaves")
        assert err.code is ErrorCode.PROJECTION_STALE and err.retriable
    worker.join(30)
    assert set(search_ids(engine, ctx, "ferry leaves")) == {rid, result["rid"]}


def test_an_empty_scope_is_an_honest_empty_list(engine) -> None:
    out = search(engine, context(workspace="nothing-here"), "pear trees")
    assert out["records"] == []


def test_a_dropped_index_is_re_projected_on_the_next_search(engine) -> None:
    ctx = context()
    rid = accept(engine, ctx, "The ferry timetable changes in October.")
    engine.close()
    data_dir = engine.deps.data_dir
    shutil.rmtree(data_dir / "index")
    eng = open_engine(data_dir)
    try:
        assert search_ids(eng, ctx, "ferry timetable") == [rid]
    finally:
        eng.close()


def test_readiness_names_the_scope_catching_up(engine) -> None:
    ctx = context(tenant="acme", workspace="slow")
    accept(engine, ctx, "A record in the slow workspace.")
    projector = engine.deps.projector
    with projector.running("rebuild"):
        engine.deps.ranker.reset()  # as a rebuild does: every channel back to cursor 0
        state = engine.readiness()
        assert not state["ready"]
        assert any("rebuild" in r and "acme/slow" in r for r in state["reasons"]), state
        projector.catch_up(ctx.scope)
    assert engine.readiness()["ready"]


@pytest.mark.parametrize("minimum", ["lexical"])
def test_background_warm_up_never_answers_empty(data_dir, minimum: str) -> None:
    eng = open_engine(data_dir)
    ctx = context()
    rids = {accept(eng, ctx, f"Harbour log entry {i}: the tide tables for the pier.") for i in range(5)}
    eng.close()
    shutil.rmtree(data_dir / "index")
    warm = open_engine(data_dir, background=True)
    try:
        seen_stale = 0
        for _ in range(200):
            try:
                out = search(
                    warm,
                    ctx,
                    "harbour tide tables",
                    capability_policy={"minimum_channels": minimum, "network": "forbid"},
                )
            except Exception as exc:  # noqa: BLE001
                assert getattr(exc, "code", None) is ErrorCode.PROJECTION_STALE
                seen_stale += 1
                continue
            assert {p["record"]["record_id"] for p in out["records"]} == rids
            break
        else:
            pytest.fail("never caught up")
    finally:
        warm.close()
