"""Backups keep forget's promise: a backup holds no KEK unless asked, a record forgotten
after the backup is NOT_FOUND after the restore and its text is nowhere on disk, and a
restore does not re-embed what the backup carried (vectors)."""

from __future__ import annotations

import pytest
from engine_support import (
    ErrorCode,
    HashingTestEncoder,
    accept,
    capture,
    context,
    error_of,
    files_containing,
    forget,
    get,
    search_ids,
    withdraw,
)

from engram.service.engine.engine import Engine, export_keys, restore

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
