"""Rebuild on open: a scope saved by the hnswlib release, or built with other graph
parameters than the profile's, is rebuilt from its stored vectors when it opens."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
from ranking_support import HashingTestEncoder
from usearch.index import Index, ScalarKind

from engram.ranking import Ranker
from engram.ranking.profiles import SemanticConfig, VectorStorage
from engram.ranking.scope_meta import write_meta
from engram.ranking.semantic import DEFAULT_GRAPH, SemanticIndex

#: A semantic root written by the release before usearch (hnswlib files, 8-dimensional
#: vectors): r0..r3 applied, then r2 removed and r4 added and r0 replaced (labels 0 and
#: 3 are deleted but still in the hnswlib file), cursor 5.
LEGACY = Path(__file__).resolve().parents[1] / "fixtures" / "semantic_hnswlib"


def legacy_vectors() -> np.ndarray:
    rng = np.random.default_rng(20261201)
    v = rng.normal(size=(8, 8)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def scope_dir(root: Path) -> Path:
    (directory,) = [p for p in root.iterdir() if p.is_dir()]
    return directory


def test_a_scope_of_the_hnswlib_release_opens_rebuilt_without_its_deleted_vectors(tmp_path: Path):
    root = tmp_path / "semantic"
    shutil.copytree(LEGACY, root)
    v = legacy_vectors()
    index = SemanticIndex(root, 8)
    assert index.cursor("legacy-scope") == 5
    index.check("legacy-scope")  # opening rebuilds and saves before anything is asked
    meta = json.loads((scope_dir(root) / "meta.json").read_text())
    assert meta["graph"] == DEFAULT_GRAPH.graph() and meta["generation"] == 3
    files = sorted(p.name for p in scope_dir(root).iterdir())
    assert files == ["cursor.json", "meta.json", "rows-1.f16", "vectors-3.bin"]
    expected = {"r0": v[7:8], "r1": v[1:3], "r3": v[4:5], "r4": v[5:7]}
    for record_id, rows in expected.items():
        assert np.allclose(index.passage_vectors("legacy-scope", record_id), rows, atol=1e-3)
    assert index.passage_vectors("legacy-scope", "r2") is None
    assert index.search("legacy-scope", v[4], 1)[0].record_id == "r3"
    assert index.search("legacy-scope", v[0], 4)[0].record_id != "r0"  # r0's old vector is gone
    stored = b"".join((scope_dir(root) / name).read_bytes() for name in files)
    assert v[4].astype(np.float16).tobytes() in stored  # float16 rows are findable ...
    for deleted in (0, 3):  # ... and those of deleted labels are not there any more
        assert v[deleted].astype(np.float16).tobytes() not in stored
        assert v[deleted].tobytes() not in stored
    reopened = SemanticIndex(root, 8)
    reopened.check("legacy-scope")
    assert json.loads((scope_dir(root) / "meta.json").read_text())["generation"] == 3  # no second rebuild


def test_a_scope_built_with_other_graph_parameters_is_rebuilt_when_it_opens(tmp_path: Path):
    root = tmp_path / "semantic"
    rng = np.random.default_rng(5)
    v = rng.normal(size=(40, 8)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    older = SemanticConfig(connectivity=8, expansion_add=40, storage=VectorStorage.F32)
    assert older.graph() != DEFAULT_GRAPH.graph()
    first = SemanticIndex(root, 8, graph=older)
    first.apply("s", upserts=[(f"r{i}", i, v[i : i + 1]) for i in range(40)], removals=[], through_cursor=7)
    first.close()
    generation = json.loads((scope_dir(root) / "meta.json").read_text())["generation"]

    upgraded = SemanticIndex(root, 8)
    upgraded.check("s")
    meta = json.loads((scope_dir(root) / "meta.json").read_text())
    assert meta["graph"] == DEFAULT_GRAPH.graph() and meta["generation"] == generation + 1
    state = upgraded._scope("s")  # noqa: SLF001
    assert state.index.connectivity == DEFAULT_GRAPH.connectivity and state.index.dtype == ScalarKind.I8
    assert state.rows is not None and state.rows.dtype == np.float16  # the rows, float32 before
    assert upgraded.cursor("s") == 7
    for i in range(40):
        assert np.allclose(upgraded.passage_vectors("s", f"r{i}"), v[i : i + 1], atol=1e-3)
    assert [h.record_id for h in upgraded.search("s", v[11], 1)] == ["r11"]


def test_a_scope_that_kept_its_vectors_in_the_graph_opens_with_them_on_disk(tmp_path: Path):
    """The release before the rows file held each vector once, float16, in the graph
    (meta.json without ``rows``): opening rebuilds the graph from those vectors and
    writes them as rows, the removed record's vector in neither."""
    root = tmp_path / "semantic"
    rng = np.random.default_rng(11)
    v = rng.normal(size=(30, 8)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    directory = root / "scope"
    directory.mkdir(parents=True)
    old = Index(ndim=8, metric="ip", dtype="f16", connectivity=32, expansion_add=200)
    old.add(np.arange(30, dtype=np.uint64), v)  # label 29 (r29) removed later
    old.remove(29)
    old.save(str(directory / "vectors-4.bin"))
    sha = hashlib.sha256((directory / "vectors-4.bin").read_bytes()).hexdigest()
    graph = {"engine": "usearch", "metric": "ip", "connectivity": 32, "expansion_add": 200, "storage": "f16"}
    header = {"scope_key": "s", "generation": 4, "sha256": sha, "graph": graph, "next_label": 30}
    write_meta(directory / "meta.json", header, [(f"r{i}", [i], i) for i in range(29)])
    (directory / "cursor.json").write_text('{"cursor": 9}')
    index = SemanticIndex(root, 8)
    directory.rename(index._dir("s"))  # noqa: SLF001 - where this root keeps scope "s"
    index.check("s")
    meta = json.loads((index._dir("s") / "meta.json").read_text())  # noqa: SLF001
    assert meta["graph"] == DEFAULT_GRAPH.graph() and meta["generation"] == 5 and meta["rows"]["count"] == 30
    assert index.cursor("s") == 9
    for i in range(29):
        assert np.allclose(index.passage_vectors("s", f"r{i}"), v[i : i + 1], atol=1e-3)
    assert [h.record_id for h in index.search("s", v[12], 1)] == ["r12"]
    stored = b"".join(p.read_bytes() for p in index._dir("s").iterdir())  # noqa: SLF001
    assert v[12].astype(np.float16).tobytes() in stored and v[29].astype(np.float16).tobytes() not in stored


def test_warm_up_rebuilds_an_old_scope_before_the_first_search(tmp_path: Path):
    root = tmp_path / "idx"
    shutil.copytree(LEGACY, root / "semantic")
    ranker = Ranker(root, HashingTestEncoder(), dim=8)
    ranker.warm("legacy-scope")
    meta = json.loads((scope_dir(root / "semantic") / "meta.json").read_text())
    assert meta["graph"] == DEFAULT_GRAPH.graph()
    assert ranker.semantic_health("legacy-scope") is None
    ranker.close()


def test_a_meta_file_of_the_earlier_layout_opens_and_is_rewritten_streamable(tmp_path: Path):
    """meta.json as the release before streaming wrote it (keys all sorted, rows before the
    scope key and checksum, no format) opens with the same answers and is rewritten in the
    streamable layout, same generation and vector file."""
    root = tmp_path / "semantic"
    rng = np.random.default_rng(9)
    v = rng.normal(size=(30, 8)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    first = SemanticIndex(root, 8)
    first.apply("s", upserts=[(f"r{i}", 1_000 + i, v[i : i + 1]) for i in range(30)], removals=[], through_cursor=4)
    first.close()
    path = scope_dir(root) / "meta.json"
    meta = json.loads(path.read_text())
    assert meta.pop("format") == 2 and list(meta)[-1] == "records"
    path.write_text(json.dumps(meta, sort_keys=True, separators=(",", ":")))  # the earlier layout
    vectors = sorted(p.name for p in scope_dir(root).iterdir() if p.name.startswith("vectors-"))

    reopened = SemanticIndex(root, 8)
    assert [h.record_id for h in reopened.search("s", v[17], 1)] == ["r17"]
    assert reopened.search("s", v[17], 1)[0].valid_time_ms == 1_017 and reopened.cursor("s") == 4
    rewritten = json.loads(path.read_text())
    assert rewritten["format"] == 2 and list(rewritten)[-1] == "records"
    assert {k: rewritten[k] for k in meta} == meta  # same generation, checksum, rows
    assert sorted(p.name for p in scope_dir(root).iterdir() if p.name.startswith("vectors-")) == vectors
    reopened.close()
    again = SemanticIndex(root, 8)
    assert [h.record_id for h in again.search("s", v[3], 1)] == ["r3"]
