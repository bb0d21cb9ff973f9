"""The semantic channel's compact label map, and meta.json written a slice at a time."""

from __future__ import annotations

import json
from pathlib import Path

import ranking.semantic as semantic
from ranking.passage_labels import PassageLabels


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
    assert list(labels.records()) == [("mem_a", [4, 5], 333), ("mem_b", [3], 222)]


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


def test_meta_written_in_slices_is_the_json_of_the_whole(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(semantic, "META_SLICE", 3)
    header = {"scope_key": 'a "records":[] scope', "generation": 4, "sha256": "ab", "graph": {"m": 16},
              "next_label": 9}
    for n in (0, 1, 3, 7):
        rows = [(f"mem_{i}", [i, i + 1], 1_700_000_000_000 + i) for i in range(n)]
        path = tmp_path / f"meta-{n}.json"
        semantic._write_meta(path, header, iter(rows))  # noqa: SLF001
        whole = {**header, "records": [list(r) for r in rows]}
        assert path.read_bytes() == json.dumps(whole, sort_keys=True, separators=(",", ":")).encode()


def test_restored_ids_are_the_maps_own_copies():
    """A restored id is a fresh string (the parser's objects around it can then be freed
    as whole arenas), equal to the one read."""
    parsed = json.loads('[["mem_' + "q" * 52 + '", [0], 1]]')[0][0]
    labels = PassageLabels()
    labels.restore(parsed, [0], 1)
    assert labels.owner(0) == parsed and labels.owner(0) is not parsed
