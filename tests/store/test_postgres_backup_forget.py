"""Backups keep forget's promise on PostgreSQL: two replicas share a database; the
database is dumped (pg_dump) and its key directory copied; a record is forgotten (and
a draft withdrawn) after the dump; the dump is restored into a fresh cluster (initdb,
pg_restore) and new replicas, with empty data directories, project it from the
journal. The restored database still holds the record's wrapped key and its journal
events from before the forget: only the shred ledger beside the KEKs remembers the
forget, and opening a store re-applies the committed entries whose ending event the
restored journal lacks, before anything is projected or served. The forgotten record
is NOT_FOUND on every new replica, absent from search, and its text is in no
replica's files.

Also: entries without journal positions are applied by the operator command; a
forget that did not commit is not re-applied; SQLite copied back by hand gets the
same check at open."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from engine_support import (
    FORGET,
    ErrorCode,
    accept,
    assert_only_kept,
    capture,
    confirmed,
    context,
    copied_back,
    error_of,
    files_containing,
    forget,
    forget_args,
    get,
    open_engine,
    search_ids,
    withdraw,
)
from postgres_support import PostgresCluster
from typer.testing import CliRunner

from engram.service.cli import app
from engram.service.engine.engine import Engine
from engram.service.engine.sealing import SHRED_LEDGER, copy_key_dir, record_shred, shred_entries
from engram.service.operator.commands import run

MARKER = "quokkamarmalade"  # lower case, unstemmed: the form the lexical index keeps too
DRAFT_MARKER = "wombatchutney"


@pytest.fixture
def restored_cluster():
    """A second, fresh PostgreSQL cluster (its own initdb) to restore the dump into."""
    cluster = PostgresCluster().start()
    yield cluster
    cluster.stop()


def _pg(cluster: PostgresCluster, tool: str, *args: str) -> None:
    subprocess.run([str(cluster.bindir / tool), *args], check=True, capture_output=True)


def _export_kek(key_dir: Path, dest: Path) -> Path:
    """`engram admin --key-dir KEYS export-kek DEST`, as an operator runs it."""
    result = CliRunner().invoke(app, ["admin", "--key-dir", str(key_dir), "export-kek", str(dest)])
    assert (result.exit_code, result.stdout.strip()) == (0, str(dest)), result.output
    return dest


@dataclass(frozen=True)
class Restored:
    url: str
    keys: Path
    kept: str
    doomed: str
    draft: str


def _dump_forget_restore(
    tmp_path: Path, source: PostgresCluster, database_url: str, target: PostgresCluster
) -> Restored:
    """Two replicas admit records; pg_dump and a key-dir copy; a forget and a withdrawal;
    pg_restore into `target`, with the live keys merged with the dump-time copy."""
    ctx = context()
    keys = tmp_path / "keys"
    a = open_engine(tmp_path / "replica-a", database_url=database_url, key_dir=keys)
    b = open_engine(tmp_path / "replica-b", database_url=database_url, key_dir=keys)
    try:
        a.operator.set_tenant_enabled("acme", True)
        kept = accept(a, ctx, "The kept record about harbour pilots and their tides.")
        doomed = accept(b, ctx, f"{MARKER} is the forgotten record about harbour pilots.")
        _, draft = capture(a, ctx, f"{DRAFT_MARKER} is a pending draft about harbour pilots.")
        for replica in (a, b):
            assert set(search_ids(replica, ctx, "harbour pilots")) == {kept, doomed}
        # The scan below can see the record's text in a replica's index files: in
        # Tantivy's stored fields, where LZ4 keeps a word literal unless an earlier run
        # of 4 bytes (a random record id's) matches part of it, about one block in 2,000.
        assert any(files_containing(replica.deps.data_dir, MARKER.encode()) for replica in (a, b))

        dump = tmp_path / "engram.dump"
        _pg(source, "pg_dump", "--format=custom", f"--file={dump}", database_url)
        at_dump = _export_kek(keys, tmp_path / "keys-at-dump")

        assert forget(a, ctx, doomed)["projection_invalidation"] == "complete"
        withdraw(b, ctx, draft["candidate_id"])
    finally:
        a.close()
        b.close()

    url = target.create_database("restored")
    _pg(target, "pg_restore", "--no-owner", f"--dbname={url}", str(dump))
    # The restore's keys: the live key directory (its ledger holds every forget since the
    # dump) with any KEK of the dump-time copy it no longer has.
    restore_keys = _export_kek(keys, tmp_path / "keys-restored")
    copy_key_dir(at_dump, restore_keys)
    return Restored(url, restore_keys, kept, doomed, draft["candidate_id"])


def _assert_forgotten(replica: Engine, restored: Restored) -> None:
    ctx = context()
    assert get(replica, ctx, restored.kept)["record"]["record_id"] == restored.kept
    assert error_of(get, replica, ctx, restored.doomed).code is ErrorCode.NOT_FOUND
    assert search_ids(replica, ctx, "harbour pilots") == [restored.kept]
    assert search_ids(replica, ctx, MARKER) == []
    for needle in (MARKER, DRAFT_MARKER):
        assert files_containing(replica.deps.data_dir, needle.encode()) == []
    with replica.deps.store.reader() as tx:
        assert tx.record(ctx.scope, restored.doomed).state == "tombstoned"
        assert tx.candidate(ctx.scope, restored.draft).state == "withdrawn"


def test_a_record_forgotten_after_a_pg_dump_stays_forgotten_after_the_restore(
    tmp_path: Path,
    postgres_cluster: PostgresCluster,
    database_url: str,
    restored_cluster: PostgresCluster,
) -> None:
    ctx = context()
    restored = _dump_forget_restore(tmp_path, postgres_cluster, database_url, restored_cluster)
    written = shred_entries(restored.keys)
    c = open_engine(tmp_path / "replica-c", database_url=restored.url, key_dir=restored.keys)
    d = open_engine(tmp_path / "replica-d", database_url=restored.url, key_dir=restored.keys, serve_replica=True)
    try:
        for replica in (c, d):
            assert replica.wait_ready(60)
            _assert_forgotten(replica, restored)
        # nor in the restored cluster's files (bodies reach the database sealed only)
        assert files_containing(restored_cluster.data, MARKER.encode()) == []
        # the forget and the withdrawal, each written before its commit and after it
        assert [("made" in e, "ended" in e) for e in written] == [(False, False), (True, True)] * 2
        store = c.deps.store
        events = [e for e in store.events(ctx.scope) if e.subject == restored.doomed]
        assert events[-1].kind == "record_tombstoned"
        assert events[-1].body["reason_ref"] == "restore:shred-ledger"
        # Applied once: a later open finds nothing left to re-apply.
        ledger = shred_entries(restored.keys)
        c.close()
        c = open_engine(tmp_path / "replica-c", database_url=restored.url, key_dir=restored.keys)
        assert [e.kind for e in c.deps.store.events(ctx.scope) if e.subject == restored.doomed] == [
            e.kind for e in events
        ]
        assert shred_entries(restored.keys) == ledger
    finally:
        c.close()
        d.close()


def test_ledger_entries_without_positions_are_applied_by_the_operator_command(
    tmp_path: Path,
    postgres_cluster: PostgresCluster,
    database_url: str,
    restored_cluster: PostgresCluster,
) -> None:
    """Entries written before entries carried journal positions are not checked at
    open: a replica serves the record again until `engram admin apply-shred-ledger`
    runs (then the replica's own sweep, as its follower runs it, purges its index)."""
    restored = _dump_forget_restore(tmp_path, postgres_cluster, database_url, restored_cluster)
    ledger = restored.keys / SHRED_LEDGER
    ledger.write_text(
        "".join(
            json.dumps({k: v for k, v in e.items() if k not in ("made", "ended")}) + "\n"
            for e in shred_entries(restored.keys)
        )
    )
    replica = open_engine(
        tmp_path / "replica-c", database_url=restored.url, key_dir=restored.keys, serve_replica=True
    )  # registered: the purge waits for its acknowledgement
    try:
        assert get(replica, context(), restored.doomed)["record"]["record_id"] == restored.doomed
        (tmp_path / "operator").mkdir()
        admin = [
            "admin",
            "--database-url",
            restored.url,
            "--key-dir",
            str(restored.keys),
            "apply-shred-ledger",
            "--data-dir",
            str(tmp_path / "operator"),
        ]
        result = CliRunner().invoke(app, admin)
        assert (result.exit_code, result.output.strip()) == (0, "re-applied 2 forget(s) and withdrawal(s)")
        replica.operator.sweep_invalidations()
        _assert_forgotten(replica, restored)
        assert run(replica, "apply-shred-ledger", {}) == 0
    finally:
        replica.close()


def test_a_forget_that_did_not_commit_is_not_re_applied_at_open(tmp_path: Path, database_url: str) -> None:
    """Opening re-applies only committed ledger entries: a forget the gate refused
    writes none, and one killed between its entry and its commit (its entry written
    here as it would have) leaves the record live across a reopen, for the call's
    retry to decide."""
    ctx = context()
    keys = tmp_path / "keys"
    engine = open_engine(tmp_path / "replica", database_url=database_url, key_dir=keys)
    try:
        engine.operator.set_tenant_enabled("acme", True)
        refused, interrupted = (
            accept(engine, ctx, f"A record whose forget does not commit ({n}).") for n in ("gate", "crash")
        )
        args = forget_args(refused)
        approved_for = confirmed(ctx, FORGET, refused, {**args, "reason_ref": "reason:other"})
        assert error_of(engine.execute, FORGET, approved_for, args).code is ErrorCode.GATE_FAILED
        assert shred_entries(keys) == []
        record_shred(keys, "record", ctx.scope, interrupted)
    finally:
        engine.close()
    engine = open_engine(tmp_path / "replica", database_url=database_url, key_dir=keys)
    try:
        for rid in (refused, interrupted):
            assert get(engine, ctx, rid)["record"]["record_id"] == rid
        out = forget(engine, ctx, interrupted)  # the retry runs now and answers a receipt
        assert out["receipt"]["to_state"] == "tombstoned"
        assert out["receipt"]["from_state"] == "accepted_current"
    finally:
        engine.close()


def test_sqlite_copied_back_by_hand_re_applies_the_forget_at_open(tmp_path: Path) -> None:
    """The embedded store gets the same check: a database file copied back without
    `engram admin restore` (which applies the whole ledger itself) is caught at open."""
    ctx = context()
    keys = tmp_path / "keys"
    live = open_engine(tmp_path / "live", key_dir=keys)
    try:
        kept = accept(live, ctx, "The kept record about harbour pilots and their tides.")
        doomed = accept(live, ctx, f"{MARKER} is the forgotten record about harbour pilots.")
        backup = live.operator.backup(tmp_path / "backup")
        forget(live, ctx, doomed)
    finally:
        live.close()
    copied = copied_back(backup, tmp_path / "copied", keys)
    try:
        assert_only_kept(copied, ctx, kept, doomed, MARKER)
    finally:
        copied.close()
