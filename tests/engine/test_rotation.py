"""Key rotation is online and crash-safe: the new KEK is active at once, older KEKs stay
until no data key needs them, and a rotation cut short at any point loses nothing and
is finished by the next open."""

from __future__ import annotations

import threading

import pytest
from engine_support import accept, capture, context, get, open_engine

from engram.service.engine import sealing


class Died(BaseException):
    """Stands for kill -9 at one point of a rotation (nothing after it runs)."""


def _kek_files(data_dir):
    return sorted(p.name for p in (data_dir / "keys").glob("kek-*.key"))


def _all_readable(engine, ctx, rids) -> None:
    for rid in rids:
        assert get(engine, ctx, rid)["record"]["record_id"] == rid


@pytest.mark.parametrize("point", ["after-new-kek", "after-first-batch", "before-old-removed"])
def test_a_rotation_cut_short_loses_nothing(data_dir, monkeypatch, point: str) -> None:
    engine = open_engine(data_dir)
    ctx = context()
    rids = [accept(engine, ctx, f"Rotation record {i} about the lighthouse.") for i in range(7)]
    monkeypatch.setattr(sealing, "REWRAP_BATCH", 3)
    if point == "after-new-kek":
        monkeypatch.setattr(sealing.KeyRing, "finish_rotation", lambda self, store: (_ for _ in ()).throw(Died()))
    elif point == "after-first-batch":
        real = engine.deps.store.rewrap_keys
        calls = []

        def rewrap_then_die(rows):
            real(rows)
            calls.append(1)
            raise Died()

        monkeypatch.setattr(engine.deps.store, "rewrap_keys", rewrap_then_die)
    else:
        monkeypatch.setattr(engine.deps.store, "transaction", _dying_transaction(engine.deps.store.transaction))
    with pytest.raises(Died):
        engine.operator.rotate_kek()
    # the process is gone: nothing of it is closed cleanly beyond the store's files
    monkeypatch.undo()
    engine.close()
    assert len(_kek_files(data_dir)) == 2  # the old KEK is kept
    again = open_engine(data_dir)
    try:
        _all_readable(again, ctx, rids)
        assert len(_kek_files(data_dir)) == 1  # the next open finished the rotation
        assert {kek for _, _, kek in again.deps.store.all_wrapped_keys()} == {again.deps.vault.ring.active_id}
    finally:
        again.close()


def _dying_transaction(real):
    """The rotation's final transaction (the one that removes old KEKs) dies on entry."""
    from contextlib import contextmanager

    @contextmanager
    def transaction():
        import traceback

        if any(f.name == "finish_rotation" for f in traceback.extract_stack()):
            raise Died()
        with real() as tx:
            yield tx

    return transaction


def test_captures_during_a_rotation_stay_readable(data_dir) -> None:
    engine = open_engine(data_dir)
    ctx = context()
    rids = [accept(engine, ctx, f"Before rotation {i}.") for i in range(20)]
    stop = threading.Event()
    made: list[str] = []
    errors: list[BaseException] = []

    def storm(worker: int) -> None:
        i = 0
        while not stop.is_set():
            try:
                made.append(accept(engine, ctx, f"During rotation {worker}-{i}."))
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return
            i += 1

    workers = [threading.Thread(target=storm, args=(n,)) for n in range(2)]
    for w in workers:
        w.start()
    try:
        for _ in range(3):
            engine.operator.rotate_kek()
    finally:
        stop.set()
        for w in workers:
            w.join(30)
    assert errors == []
    assert made  # the storm really ran beside the rotations
    _all_readable(engine, ctx, rids + made)
    engine.close()
    again = open_engine(data_dir)  # and after a restart, under the KEK files left on disk
    try:
        _all_readable(again, ctx, rids + made)
        assert len(_kek_files(data_dir)) == 1
    finally:
        again.close()


def test_a_pending_candidate_survives_rotation(data_dir) -> None:
    engine = open_engine(data_dir)
    ctx = context()
    _, cap = capture(engine, ctx, "A pending draft sealed under the old KEK.")
    engine.operator.rotate_kek()
    engine.close()
    again = open_engine(data_dir)
    try:
        from engine_support import admit

        assert admit(again, ctx, cap["candidate_id"])["outcome"]["status"] == "accepted"
    finally:
        again.close()


def test_a_torn_kek_write_leaves_no_kek(data_dir, monkeypatch) -> None:
    engine = open_engine(data_dir)
    ctx = context()
    rid = accept(engine, ctx, "A record before a torn KEK write.")
    monkeypatch.setattr(sealing.os, "rename", lambda a, b: (_ for _ in ()).throw(Died()))
    with pytest.raises(Died):
        engine.operator.rotate_kek()
    monkeypatch.undo()
    engine.close()
    assert len(_kek_files(data_dir)) == 1  # the partial file is not a KEK
    again = open_engine(data_dir)
    try:
        _all_readable(again, ctx, [rid])
    finally:
        again.close()


def test_replicas_sharing_a_key_dir_follow_a_rotation_and_lose_nothing(tmp_path) -> None:
    """Two replicas of one database share the key directory. A rotation on one is seen by
    the other's next wrap; on a shared store the older KEK outlives its successor by the
    grace, so a key the other replica wrapped just before the rotation, and committed
    after the rotating replica's rewrap, stays openable; once the grace is over, the
    older KEK is retired and both replicas forget it."""
    from engram.service.engine.sealing import BodyVault, KeyRing
    from engram.service.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "engram.db")
    try:
        rotating = BodyVault(KeyRing(tmp_path / "keys", retire_grace_s=900.0), store)
        other = BodyVault(KeyRing(tmp_path / "keys", retire_grace_s=900.0), store)
        old = other.ring.active_id
        # the other replica wraps a key under the old KEK; its transaction commits late
        key_id, data_key = sealing.new_data_key()
        wrapped_late, kek_late = other.ring.wrap(data_key, key_id)
        new = rotating.ring.rotate(store)
        assert new != old and kek_late == old
        with store.transaction() as tx:
            tx.put_key(key_id, wrapped_late, kek_late)
        assert (tmp_path / "keys" / f"{old}.key").is_file()  # inside the grace: kept
        assert other.ring.unwrap(wrapped_late, kek_late, key_id) == data_key
        assert other.ring.wrap(data_key, "key_next")[1] == new  # the other replica follows
        rotating.ring.retire_grace_s = 0.0  # the grace is over
        rotating.ring.finish_rotation(store)
        assert not (tmp_path / "keys" / f"{old}.key").exists()
        wrapped, kek_id = store.wrapped_key(key_id)
        assert kek_id == new and other.ring.unwrap(wrapped, kek_id, key_id) == data_key
        assert not other.ring.pending_rotation()
    finally:
        store.close()
