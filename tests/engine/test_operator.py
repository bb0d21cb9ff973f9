"""Operator surface: KEK rotation, backup and restore, projection rebuild."""

from __future__ import annotations

import sqlite3

import pytest
from engine_support import (
    CAPTURE,
    ContractError,
    ErrorCode,
    HashingTestEncoder,
    accept,
    admit,
    capture,
    context,
    forget,
    get,
    open_engine,
    search,
    search_ids,
    tamper,
    withdraw,
)

from engram.service.engine import Engine, restore
from engram.service.engine.records import candidate_aad
from engram.service.store.journal import read_body, stored_body

CTX = context(workspace="ops")
OTHER = context(tenant="beta", workspace="ops")


def populate(engine) -> dict:
    live = [accept(engine, CTX, f"The osprey service {i} handles region {i} billing.") for i in range(4)]
    live.append(accept(engine, OTHER, "The osprey service of beta handles its own billing."))
    gone = accept(engine, CTX, "The osprey legacyzebrafinch service was retired.")
    forget(engine, CTX, gone)
    cap_args, pending = capture(engine, CTX, "The osprey draft waits for admission.")
    _, withdrawn = capture(engine, CTX, "The osprey draft that was withdrawn.")
    withdraw(engine, CTX, withdrawn["candidate_id"])
    return {
        "live": live,
        "gone": gone,
        "pending": pending["candidate_id"],
        "capture_args": cap_args,
        "capture_result": pending,
    }


def ctx_of(rid: str, state: dict):
    return OTHER if rid == state["live"][-1] else CTX


def stable_get(engine, ctx, rid) -> dict:
    out = get(engine, ctx, rid)
    return {
        "record": out["record"],
        "redacted_fields": out["redacted_fields"],
        "redaction_receipt_digest": out["redaction_receipt_digest"],
        "record_digest": out["read_receipt"]["record_digest"],
    }


def ranked(engine, ctx, query: str) -> list[tuple[str, float]]:
    return [(p["record"]["record_id"], round(p["score"], 9)) for p in search(engine, ctx, query, limit=50)["records"]]


def test_rotate_kek_keeps_every_live_body(engine, data_dir) -> None:
    state = populate(engine)
    before = {rid: stable_get(engine, ctx_of(rid, state), rid) for rid in state["live"]}
    old_keks = sorted(p.name for p in (data_dir / "keys").glob("kek-*.key"))
    assert len(old_keks) == 1
    new_id = engine.operator.rotate_kek()
    keks = sorted(p.name for p in (data_dir / "keys").glob("kek-*.key"))
    if engine.deps.vault.ring.retire_grace_s:  # a shared store: the older KEK waits out the grace
        assert keks == sorted([*old_keks, f"{new_id}.key"])
    else:
        assert keks == [f"{new_id}.key"]
    assert {kek for _, _, kek in engine.deps.store.all_wrapped_keys()} == {new_id}
    for rid, expected in before.items():
        assert stable_get(engine, ctx_of(rid, state), rid) == expected
    with engine.deps.store.reader() as tx:
        row = tx.candidate(CTX.scope, state["pending"])
    assert engine.deps.vault.open_json(row.key_id, row.sealed, candidate_aad(CTX.scope, state["pending"]))
    assert admit(engine, CTX, state["pending"])["outcome"]["status"] == "accepted"
    # a second rotation and a reopen still open everything
    engine.operator.rotate_kek()
    engine.close()
    reopened = open_engine(data_dir)
    try:
        for rid, expected in before.items():
            assert stable_get(reopened, ctx_of(rid, state), rid) == expected
    finally:
        reopened.close()


@pytest.mark.sqlite_only("engram admin backup/restore copy the SQLite file; PostgreSQL is backed up with pg_dump")
def test_backup_and_restore_keep_every_digest(engine, tmp_path) -> None:
    state = populate(engine)
    before_get = {rid: stable_get(engine, ctx_of(rid, state), rid) for rid in state["live"]}
    before_search = ranked(engine, CTX, "osprey billing")
    journal = engine.operator.verify_journal()
    heads = {s: engine.deps.store.scope_cursor(s) for s in engine.deps.store.scopes()}
    backup = engine.operator.backup(tmp_path / "backup")
    restored = restore(
        backup,
        tmp_path / "restored",
        key_source=engine.deps.vault.ring.key_dir,
        encoder=HashingTestEncoder(),
        load_model=False,
    )
    try:
        assert restored.operator.verify_journal() == journal and all(journal.values()) and len(journal) == 2
        assert {s: restored.deps.store.scope_cursor(s) for s in restored.deps.store.scopes()} == heads
        for rid, expected in before_get.items():
            assert stable_get(restored, ctx_of(rid, state), rid) == expected
        assert [r for r, _ in ranked(restored, CTX, "osprey billing")] == [r for r, _ in before_search]
        assert state["gone"] not in search_ids(restored, CTX, "legacyzebrafinch osprey", limit=50)
        with pytest.raises(ContractError) as err:
            get(restored, CTX, state["gone"])
        assert err.value.code is ErrorCode.NOT_FOUND
        # idempotency reservations came along: the capture replays
        again = restored.execute(CAPTURE, CTX, state["capture_args"])
        assert again == {**state["capture_result"], "status": "duplicate_exact"}
        # the pending body is still sealed and openable
        assert admit(restored, CTX, state["pending"])["outcome"]["status"] == "accepted"
    finally:
        restored.close()


@pytest.mark.sqlite_only("engram admin backup/restore copy the SQLite file; PostgreSQL is backed up with pg_dump")
def test_restore_into_a_non_empty_dir_is_refused(engine, tmp_path) -> None:
    populate(engine)
    backup = engine.operator.backup(tmp_path / "backup")
    target = tmp_path / "occupied"
    target.mkdir()
    (target / "something").write_text("x")
    with pytest.raises(ContractError) as err:
        restore(
            backup, target, key_source=engine.deps.vault.ring.key_dir, encoder=HashingTestEncoder(), load_model=False
        )
    assert err.value.code is ErrorCode.RESTORE_REFUSED
    assert sorted(p.name for p in target.iterdir()) == ["something"]


@pytest.mark.sqlite_only("engram admin backup/restore copy the SQLite file; PostgreSQL is backed up with pg_dump")
def test_restore_of_an_incomplete_backup_is_invalid(engine, tmp_path) -> None:
    populate(engine)
    backup = engine.operator.backup(tmp_path / "backup")  # holds no KEK by default
    assert not (backup / "keys").exists()
    with pytest.raises(ContractError) as err:
        restore(backup, tmp_path / "restored", encoder=HashingTestEncoder(), load_model=False)
    assert err.value.code is ErrorCode.BACKUP_INVALID


@pytest.mark.sqlite_only("engram admin backup/restore copy the SQLite file; PostgreSQL is backed up with pg_dump")
def test_restore_of_a_tampered_journal_is_invalid(engine, tmp_path) -> None:
    populate(engine)
    backup = engine.operator.backup(tmp_path / "backup")
    conn = sqlite3.connect(backup / "engram.db")
    rows = conn.execute("SELECT rowid, body FROM journal WHERE kind = 'record_tombstoned'").fetchall()
    for rowid, body in rows:  # an edit that still decodes: only the digests can tell
        edited = read_body(body)
        assert edited["reason_ref"] == "reason:obsolete"
        edited["reason_ref"] = "reason:other"
        conn.execute("UPDATE journal SET body = ? WHERE rowid = ?", (stored_body(edited), rowid))
    conn.commit()
    assert rows
    conn.close()
    with pytest.raises(ContractError) as err:
        restore(
            backup,
            tmp_path / "restored",
            key_source=engine.deps.vault.ring.key_dir,
            encoder=HashingTestEncoder(),
            load_model=False,
        )
    assert err.value.code is ErrorCode.BACKUP_INVALID


def test_verify_journal_detects_tampering(engine) -> None:
    populate(engine)
    assert all(engine.operator.verify_journal().values())
    tamper(
        engine,
        "UPDATE journal SET recorded_at = '2000-01-01T00:00:00.000Z' WHERE cursor = 2"
        " AND workspace = 'ops' AND tenant = 'acme'",
    )
    result = engine.operator.verify_journal()
    assert result["acme/ops"] is False and result["beta/ops"] is True


def test_rebuild_projections_gives_the_same_results(engine, data_dir) -> None:
    state = populate(engine)
    queries = ["osprey billing", "osprey region 2", "osprey draft", "legacyzebrafinch"]
    before = {q: ranked(engine, CTX, q) for q in queries}
    before_other = ranked(engine, OTHER, "osprey billing")
    engine.operator.rebuild_projections()
    assert {q: ranked(engine, CTX, q) for q in queries} == before
    assert ranked(engine, OTHER, "osprey billing") == before_other
    assert before["osprey billing"], "control: the query matches"
    assert state["gone"] not in [r for r, _ in before["legacyzebrafinch"]]
    assert not [p for p in (data_dir / "index").rglob("*") if p.is_file() and b"legacyzebrafinch" in p.read_bytes()]


def test_rebuild_after_losing_the_index_directory(engine, data_dir) -> None:
    import shutil

    state = populate(engine)
    before = ranked(engine, CTX, "osprey billing")
    engine.close()
    shutil.rmtree(data_dir / "index")
    reopened = open_engine(data_dir)
    try:
        assert ranked(reopened, CTX, "osprey billing") == before
        assert set(search_ids(reopened, OTHER, "osprey billing")) == {state["live"][-1]}
    finally:
        reopened.close()


def test_store_files_are_owner_only(tmp_path) -> None:
    """The database holds sealed bodies and wrapped keys: no one else may read it."""

    (tmp_path / "fresh").mkdir(mode=0o755)  # as a caller with a loose umask would
    (tmp_path / "fresh").chmod(0o755)
    engine = Engine.open(tmp_path / "fresh", load_model=False)
    try:
        for name in ("", "engram.db", "engram.db-wal"):
            path = tmp_path / "fresh" / name
            assert path.stat().st_mode & 0o077 == 0, name or "the data directory"
    finally:
        engine.close()


def test_store_footprint_counts_each_table(engine) -> None:
    before = engine.operator.store_footprint()
    for i in range(20):
        accept(engine, CTX, f"The footprint heron {i} counts the bytes of table {i} " * 8)
    after = engine.operator.store_footprint()
    assert {"journal", "records", "keys", "candidates"} <= set(after)
    assert sum(after.values()) > sum(before.values())
    assert all(size >= 0 for size in after.values())


def test_tenants_holding_memory_without_opt_in_are_named(engine) -> None:
    """Writing a scope (bulk ingest does it through the same path) never opts its tenant
    in; `engram ingest` and `engram serve` name the tenants left out, from this list."""
    assert engine.operator.tenants_not_opted_in() == []
    accept(engine, CTX, "The heron service keeps its billing in region one.")
    accept(engine, OTHER, "The heron service of beta keeps its own billing.")
    assert engine.operator.tenants_not_opted_in() == sorted({CTX.tenant, OTHER.tenant})
    engine.operator.set_tenant_enabled(CTX.tenant, True)
    assert engine.operator.tenants_not_opted_in() == [OTHER.tenant]
    engine.operator.set_tenant_enabled(CTX.tenant, False)
    assert engine.operator.tenants_not_opted_in() == sorted({CTX.tenant, OTHER.tenant})
