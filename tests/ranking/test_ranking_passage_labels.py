"""The semantic channel's compact label map, and meta.json written a slice at a time and streamed back."""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path

import pytest

import engram.ranking.scope_meta as scope_meta
from engram.ranking.passage_labels import PassageLabels


def test_labels_are_handed_out_in_runs_and_retired_for_good():
    labels = PassageLabels()
    assert list(labels.add("mem_a", 111, 3)) == [0, 1, 2]
    assert list(labels.add("mem_b", 222, 1)) == [3]
    assert (labels.live_count, labels.record_count, labels.next_label) == (4, 2, 4)
    assert [labels.owner(n) for n in (0, 2, 3, 4, -1)] == ["mem_a", "mem_a", "mem_b", None, None]
    assert labels.valid_time("mem_a") == 111 and labels.valid_time("mem_b") == 222
    assert "mem_a" in labels and "mem_c" not in labels and labels.labels("mem_c") is None
    assert list(labels.remove("mem_a") or []) == [0, 1, 2] and labels.remove("mem_a") is None
    assert (labels.live_count, labels.record_count, labels.live_labels().tolist()) == (1, 1, [3])
    assert labels.owner(1) is None
    assert list(labels.add("mem_a", 333, 2)) == [4, 5]  # a re-upsert gets new labels
    assert sorted(labels.records()) == [("mem_a", [4, 5], 333), ("mem_b", [3], 222)]


def test_a_copy_keeps_the_map_as_it_was_while_the_original_changes():
    """What a save writes beside the scope's changes: a copy taken before them."""
    labels = PassageLabels()
    labels.add("mem_a", 111, 2)
    labels.restore("mem_s", [5, 3], 555)  # not one run: kept as its own list
    copy = labels.copy()
    labels.remove("mem_a")
    labels.remove("mem_s")
    labels.add("mem_b", 222, 1)
    assert sorted(copy.records()) == [("mem_a", [0, 1], 111), ("mem_s", [5, 3], 555)]
    assert (copy.live_count, copy.next_label, copy.live_labels().tolist()) == (4, 6, [0, 1, 3, 5])
    assert sorted(labels.records()) == [("mem_b", [6], 222)]


def test_restored_labels_keep_their_shape_and_the_counter():
    labels = PassageLabels()
    labels.restore("mem_run", [5, 6], 10)
    labels.restore("mem_odd", [9, 2], 20)  # not one run: kept as given
    labels.reserve(12)
    assert list(labels.labels("mem_run") or []) == [5, 6] and labels.labels("mem_odd") == [9, 2]
    assert labels.valid_time("mem_odd") == 20 and labels.owner(2) == labels.owner(9) == "mem_odd"
    assert labels.live_labels().tolist() == [2, 5, 6, 9] and labels.next_label == 12
    assert list(labels.add("mem_new", 30, 1)) == [12]  # labels below the saved counter stay retired
    assert list(labels.remove("mem_odd") or []) == [9, 2] and labels.live_labels().tolist() == [5, 6, 12]


def test_meta_written_in_slices_reads_back_header_first(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(scope_meta, "META_SLICE", 3)
    header = {"scope_key": 'a "records":[] scope', "generation": 4, "sha256": "ab", "graph": {"m": 16}, "next_label": 9}
    for n in (0, 1, 3, 7):
        rows = [(f"mem_{i}", [i, i + 1], 1_700_000_000_000 + i) for i in range(n)]
        path = tmp_path / f"meta-{n}.json"
        scope_meta.write_meta(path, header, iter(rows))
        whole = json.loads(path.read_bytes())  # still one JSON object
        assert whole == {**header, "format": scope_meta.FORMAT, "records": [list(r) for r in rows]}
        assert list(whole)[-1] == "records" and list(whole)[:-1] == sorted(list(whole)[:-1])
        saved = scope_meta.read_meta(path)
        assert saved is not None and saved.current
        assert saved.header == {**header, "format": scope_meta.FORMAT}
        assert [tuple(r) for r in saved.rows] == rows
    assert scope_meta.read_meta(tmp_path / "absent.json") is None


def test_meta_of_an_earlier_release_is_still_read(tmp_path: Path):
    """The earlier layout: every key sorted (rows before scope_key and sha256), no format."""
    header = {"scope_key": "s", "generation": 2, "sha256": "cd", "graph": {"m": 16}, "next_label": 3}
    rows = [["mem_a", [0, 1], 5], ["mem_b", [2], 6]]
    path = tmp_path / "meta.json"
    path.write_text(json.dumps({**header, "records": rows}, sort_keys=True, separators=(",", ":")))
    saved = scope_meta.read_meta(path)
    assert saved is not None and not saved.current
    assert saved.header == header and [list(r) for r in saved.rows] == rows


def test_meta_that_is_not_one_raises_value_error(tmp_path: Path):
    path = tmp_path / "meta.json"
    for text in ("", "[1, 2]", '{"format": 2, "records": [["mem_a", [0], 1], ["mem_b"'):
        path.write_text(text)
        with pytest.raises(ValueError):
            saved = scope_meta.read_meta(path)
            assert saved is not None
            list(saved.rows)


def test_reading_meta_streams_the_rows(tmp_path: Path):
    """Restoring a label map from meta.json holds one row at a time beside the map, not
    the parsed file (a json.load of it allocates several times the file)."""
    n = 20_000
    rows = ((f"mem_{i:052d}", [i], 1_700_000_000_000 + i) for i in range(n))
    path = tmp_path / "meta.json"
    scope_meta.write_meta(path, {"scope_key": "s", "generation": 1, "sha256": "x", "next_label": n}, rows)

    def transient(read) -> int:
        gc.collect()
        tracemalloc.start()
        try:
            kept = read()
            after, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert kept.record_count == n
        return peak - after

    def streamed() -> PassageLabels:
        labels = PassageLabels()
        saved = scope_meta.read_meta(path)
        assert saved is not None and saved.current
        for record_id, labels_of, valid_time in saved.rows:
            labels.restore(record_id, labels_of, valid_time)
        return labels

    def parsed_whole() -> PassageLabels:
        labels = PassageLabels()
        for record_id, labels_of, valid_time in json.loads(path.read_bytes())["records"]:
            labels.restore(record_id, labels_of, valid_time)
        return labels

    whole, stream = transient(parsed_whole), transient(streamed)
    assert stream * 10 < whole, (stream, whole)


def test_restored_ids_are_the_maps_own_copies():
    """A restored id is a fresh string (the parser's objects around it can then be freed
    as whole arenas), equal to the one read."""
    parsed = json.loads('[["mem_' + "q" * 52 + '", [0], 1]]')[0][0]
    labels = PassageLabels()
    labels.restore(parsed, [0], 1)
    assert labels.owner(0) == parsed and labels.owner(0) is not parsed
