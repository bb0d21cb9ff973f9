"""Backups keep forget's promise: a backup holds no KEK unless asked, a record forgotten
after the backup is NOT_FOUND after the restore and its text is nowhere on disk, and a
restore does not re-embed what the backup carried (vectors), and a forget answered only
by its retry binds a database copied back from before it as the first answer does."""

from __future__ import annotations

import json

import pytest
from engine_support import (
    ErrorCode,
    HashingTestEncoder,
    accept,
    assert_only_kept,
    capture,
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
    withdraw_args,
)

from engram.service.engine.engine import Engine, export_keys, restore
from engram.service.engine.sealing import SHRED_LEDGER, shred_entries

pytestmark = pytest.mark.sqlite_only(
    "engram admin backup/restore copy the SQLite file; PostgreSQL is backed up with pg_dump"
)


class CountingEncoder(HashingTestEncoder):
    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def encode(self, texts, *args, **kwargs):  # type: ignore[override]
        self.texts += len(texts)
        return super().encode(texts, *args, **kwargs)


def _restore(backup, target, key_source, encoder=None) -> Engine:
    return restore(backup, target, key_source=key_source, encoder=encoder or HashingTestEncoder(), load_model=False)


def test_a_default_backup_holds_no_kek(engine, tmp_path) -> None:
    accept(engine, context(), "A record in a keyless backup.")
    backup = engine.operator.backup(tmp_path / "backup")
    assert not (backup / "keys").exists()
    assert list(backup.rglob("kek-*")) == []
    with_keys = engine.operator.backup(tmp_path / "with-keys", include_keys=True)
    assert len(list((with_keys / "keys").glob("kek-*.key"))) == 1


@pytest.mark.parametrize("include_keys", [False, True])
def test_forgotten_after_the_backup_stays_forgotten(engine, tmp_path, include_keys: bool) -> None:
    ctx = context()
    marker = "Quokkamarmalade"
    kept = accept(engine, ctx, "The kept record about harbour pilots.")
    doomed = accept(engine, ctx, f"{marker} is the forgotten record about harbour pilots.")
    _, cap = capture(engine, ctx, f"{marker} pending draft that is withdrawn later.")
    backup = engine.operator.backup(tmp_path / "backup", include_keys=include_keys)
    forget(engine, ctx, doomed)
    withdraw(engine, ctx, cap["candidate_id"])
    # the live keys (with the shred ledger written since the backup) travel to the restore
    keys = export_keys(engine.deps.vault.ring.key_dir, tmp_path / "exported")
    restored = _restore(backup, tmp_path / "restored", keys)
    try:
        assert get(restored, ctx, kept)["record"]["record_id"] == kept
        assert error_of(get, restored, ctx, doomed).code is ErrorCode.NOT_FOUND
        assert doomed not in search_ids(restored, ctx, "harbour pilots forgotten")
        with restored.deps.store.reader() as tx:
            assert tx.candidate(ctx.scope, cap["candidate_id"]).state == "withdrawn"
        restored.deps.store.purge_freed_pages()
        assert files_containing(tmp_path / "restored", marker.encode()) == []
        events = [e.kind for e in restored.deps.store.events(ctx.scope) if e.subject == doomed]
        assert events[-1] == "record_tombstoned"
    finally:
        restored.close()


def test_a_restore_with_a_kek_missing_is_refused(engine, tmp_path) -> None:
    ctx = context()
    accept(engine, ctx, "A record wrapped by the first KEK.")
    backup = engine.operator.backup(tmp_path / "backup")
    old = export_keys(engine.deps.vault.ring.key_dir, tmp_path / "old-keys")
    engine.operator.rotate_kek()  # the live keys no longer hold the KEK the backup's keys need
    with pytest.raises(Exception) as err:
        _restore(backup, tmp_path / "restored", engine.deps.vault.ring.key_dir)
    assert getattr(err.value, "code", None) is ErrorCode.BACKUP_INVALID
    restored = _restore(backup, tmp_path / "restored-2", old)  # the export made then works
    restored.close()


def test_restore_does_not_re_embed_carried_vectors(engine, tmp_path) -> None:
    ctx = context()
    rids = [accept(engine, ctx, f"Lighthouse log {i}: the lamp was trimmed at dusk.") for i in range(6)]
    backup = engine.operator.backup(tmp_path / "backup")
    assert (backup / "index" / "semantic").is_dir()
    encoder = CountingEncoder()
    restored = _restore(backup, tmp_path / "restored", engine.deps.vault.ring.key_dir, encoder)
    try:
        assert encoder.texts == 0  # warm-up caught the lexical channel up only
        assert set(search_ids(restored, ctx, "lighthouse lamp trimmed", limit=10)) == set(rids)
        assert encoder.texts == 1  # the query itself: the counter does see the encoder's work
    finally:
        restored.close()


def test_a_forget_acknowledged_only_by_its_retry_binds_a_copied_back_database(tmp_path) -> None:
    """A forget and a withdrawal cut between their commit and their positioned ledger
    entry (the ledger as a kill -9 there leaves it: the entry written before the commit
    only), then answered by their retries from the stored result: the retries write the
    positioned entries, so opening a database copied back from before them re-applies
    both (before, only `apply-shred-ledger` did)."""
    ctx = context()
    keys = tmp_path / "keys"
    marker = "quokkamarmalade"
    live = open_engine(tmp_path / "live", key_dir=keys)
    try:
        kept = accept(live, ctx, "The kept record about harbour pilots and their tides.")
        doomed = accept(live, ctx, f"{marker} is the forgotten record about harbour pilots.")
        _, draft = capture(live, ctx, f"{marker} is a pending draft about harbour pilots.")
        backup = live.operator.backup(tmp_path / "backup")
        calls = [
            (forget, doomed, forget_args(doomed)),
            (withdraw, draft["candidate_id"], withdraw_args(draft["candidate_id"])),
        ]
        ends = []
        for call, subject, args in calls:
            first = call(live, ctx, subject, args)
            *cut, last = shred_entries(keys)
            assert "ended" in last and "ended" not in cut[-1]
            (keys / SHRED_LEDGER).write_text("".join(json.dumps(e) + "\n" for e in cut))
            retry = call(live, ctx, subject, args)
            assert (retry["replayed"], retry["receipt"]) == (True, first["receipt"])
            ends.append([int(first["receipt"]["cursor"]), first["receipt"]["event_digest"]])
        assert [(e["kind"], e["ended"]) for e in shred_entries(keys) if "ended" in e] == [
            ("record", ends[0]),
            ("candidate", ends[1]),
        ]
        # A further retry finds the positions written: no entry is added.
        ledger = shred_entries(keys)
        forget(live, ctx, doomed, calls[0][2])
        assert shred_entries(keys) == ledger
    finally:
        live.close()
    copied = copied_back(backup, tmp_path / "copied", keys)
    try:
        assert_only_kept(copied, ctx, kept, doomed, marker)
        with copied.deps.store.reader() as tx:
            assert tx.candidate(ctx.scope, draft["candidate_id"]).state == "withdrawn"
    finally:
        copied.close()
