"""The exact rows on disk: read back by label, verified and cut back to the checkpoint
on open, rewritten without hidden rows, and reported corrupt when damaged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import engram.ranking.vector_rows as vector_rows
from engram.ranking.semantic import CorruptIndex, SemanticIndex
from engram.ranking.vector_rows import VectorRows


def _unit(n: int, dim: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_rows_read_back_by_label_in_any_order(tmp_path: Path):
    v = _unit(50, 8, 1)
    rows = VectorRows.create(tmp_path / "rows-1.f16", 8, np.dtype(np.float16))
    rows.write(0, v[:20])
    rows.write(20, v[20:])
    labels = [7, 8, 9, 3, 49, 0, 1, 30]  # runs and single rows, out of order
    assert np.array_equal(rows.read(labels), v[labels].astype(np.float16).astype(np.float32))
    assert rows.read([]).shape == (0, 8)
    with pytest.raises(ValueError):
        rows.read([50])  # past the file
    rows.close()


def test_a_small_file_read_through_its_map_sees_every_later_write(tmp_path: Path, monkeypatch):
    """Reads through the memory map of a small file give what positioned reads give,
    after rows are appended past the map, rewritten within it, or added as zeros; a file
    grown past MAP_BYTES is read with positioned reads from then on."""
    v = _unit(40, 8, 5)
    rows = VectorRows.create(tmp_path / "rows-1.f32", 8, np.dtype(np.float32))

    def both(labels: list[int]) -> np.ndarray:
        mapped = rows.read(labels)
        monkeypatch.setattr(vector_rows, "MAP_BYTES", 0)
        positioned = rows.read(labels)
        monkeypatch.undo()
        assert np.array_equal(mapped, positioned)
        return mapped

    rows.write(0, v[:10])
    assert np.array_equal(both([3, 0, 9]), v[[3, 0, 9]])
    rows.write(10, v[10:20])  # appended past the map
    assert np.array_equal(both([19, 2]), v[[19, 2]])
    rows.write(5, v[30:31])  # rewritten within it
    assert np.array_equal(both([5]), v[30:31])
    rows.extend_to(25)  # rows of labels never written: zero
    assert np.array_equal(both([24, 19]), np.vstack([np.zeros((1, 8), np.float32), v[19:20]]))
    with pytest.raises(ValueError):
        rows.read([25])  # past the file
    monkeypatch.setattr(vector_rows, "MAP_BYTES", 25 * 8 * 4)  # exactly the file: still mapped
    rows.read([0])
    rows.write(25, v[25:26])  # one row past MAP_BYTES
    assert np.array_equal(rows.read([25, 1]), v[[25, 1]])
    assert rows._mapped is None  # noqa: SLF001 - the map is dropped
    rows.close()


def test_open_cuts_rows_past_the_checkpoint_and_checks_every_block(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(vector_rows, "BLOCK_ROWS", 16)
    v = _unit(60, 8, 2)
    path = tmp_path / "rows-1.f32"
    rows = VectorRows.create(path, 8, np.dtype(np.float32))
    rows.write(0, v[:40])
    hashes = rows.sync()
    assert len(hashes) == 3  # 16 + 16 + 8 rows
    rows.write(40, v[40:])  # appended after the checkpoint, then a crash
    rows.close()
    reopened = VectorRows.open_saved(path, 8, np.dtype(np.float32), 40, hashes)
    assert reopened.count == 40 and path.stat().st_size == 40 * 8 * 4
    assert np.array_equal(reopened.read(range(40)), v[:40])
    reopened.write(40, v[40:45])
    assert reopened.sync()[:2] == hashes[:2]  # untouched blocks keep their hash
    reopened.close()
    data = bytearray(path.read_bytes())
    data[20 * 32] ^= 0xFF  # one byte of row 20, in the second block
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError):
        VectorRows.open_saved(path, 8, np.dtype(np.float32), 40, hashes)


def test_a_rewrite_keeps_live_rows_and_zeroes_every_other(tmp_path: Path):
    v = _unit(20, 8, 3)
    rows = VectorRows.create(tmp_path / "rows-1.f16", 8, np.dtype(np.float16))
    rows.write(0, v)
    fresh = rows.rewritten(tmp_path / "rows-2.f16", np.array([1, 2, 5, 19]))
    fresh.sync()
    assert fresh.count == 20
    kept = fresh.read(range(20))
    assert np.array_equal(kept[[1, 2, 5, 19]], v[[1, 2, 5, 19]].astype(np.float16).astype(np.float32))
    assert not kept[[0, 3, 4, 6, 18]].any()
    gone = v[0].astype(np.float16).tobytes()
    assert gone in (tmp_path / "rows-1.f16").read_bytes() and gone not in (tmp_path / "rows-2.f16").read_bytes()
    rows.close()
    fresh.close()


def test_a_scope_reopens_at_its_checkpoint_with_later_rows_cut_off(tmp_path: Path):
    v = _unit(30, 8, 4)
    index = SemanticIndex(tmp_path, 8, checkpoint_records=10_000, checkpoint_seconds=3600)
    index.apply("s", upserts=[(f"r{i}", i, v[i : i + 1]) for i in range(20)], removals=[], through_cursor=2)
    index.checkpoint()
    # The first apply made a save due, queued on the background thread; a crash would
    # end that thread too, so it must be done before the rows below are written.
    assert index.settle(60)
    index.apply(
        "s", upserts=[(f"r{i}", i, v[i : i + 1]) for i in range(20, 30)], removals=[], through_cursor=3
    )  # rows written, not saved
    (directory,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    (rows_file,) = directory.glob("rows-*")
    assert rows_file.stat().st_size == 30 * 8 * 2
    del index  # a crash: nothing more saved

    reopened = SemanticIndex(tmp_path, 8)
    reopened.check("s")  # opens the scope
    assert reopened.cursor("s") == 2
    assert rows_file.stat().st_size == 20 * 8 * 2
    assert reopened.passage_vectors("s", "r25") is None
    reopened.apply(
        "s", upserts=[(f"r{i}", i, v[i : i + 1]) for i in range(20, 30)], removals=[], through_cursor=3
    )  # the projector re-applies
    assert [h.record_id for h in reopened.search("s", v[25], 1)] == ["r25"]
    assert np.allclose(reopened.passage_vectors("s", "r25"), v[25:26], atol=1e-3)


def test_a_damaged_rows_file_is_reported_corrupt(tmp_path: Path):
    v = _unit(10, 8, 5)
    index = SemanticIndex(tmp_path, 8)
    index.apply("s", upserts=[(f"r{i}", i, v[i : i + 1]) for i in range(10)], removals=[], through_cursor=1)
    index.close()
    (directory,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    (rows_file,) = directory.glob("rows-*")
    assert json.loads((directory / "meta.json").read_text())["rows"]["count"] == 10
    data = bytearray(rows_file.read_bytes())
    data[5] ^= 0x01
    rows_file.write_bytes(bytes(data))
    with pytest.raises(CorruptIndex):
        SemanticIndex(tmp_path, 8).check("s")
    rows_file.write_bytes(bytes(data[: 5 * 16]))  # cut short
    with pytest.raises(CorruptIndex):
        SemanticIndex(tmp_path, 8).check("s")
