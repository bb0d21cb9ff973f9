"""Semantic checkpoints: deferred saving, crash recovery, purge durability, bulk cost,
and searches served while an apply is still embedding."""

from __future__ import annotations

import gc
import json
import threading
import time
from pathlib import Path

import numpy as np
from ranking_support import HashingTestEncoder, bytes_under, doc

from engram.ranking import HYBRID_PROFILE, LEXICAL_PROFILE, Ranker
from engram.ranking.semantic import CHECKPOINT_RECORDS, SemanticIndex

SECRET = "zyxquorblat"


def ids(ranker: Ranker, scope: str, query: str, profile=HYBRID_PROFILE) -> list[str]:
    return [c.record_id for c in ranker.search(scope, query, profile, valid_as_of_ms=0).candidates]


def semantic_ids(ranker: Ranker, scope: str, query: str) -> list[str]:
    vector = ranker._encode([query])  # noqa: SLF001 - the semantic channel alone
    return [h.record_id for h in ranker._semantic.search(scope, vector, 50)]  # noqa: SLF001


def semantic_dir(root: Path) -> Path:
    (directory,) = [p for p in (root / "semantic").iterdir() if p.is_dir()]
    return directory


class SlowEncoder(HashingTestEncoder):
    """Sleeps while embedding any text that mentions ``slowdoc`` (never a query)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.embedding = threading.Event()

    def encode(self, texts):
        if any("slowdoc" in t for t in texts):
            self.embedding.set()
            time.sleep(self.seconds)
        return super().encode(texts)


def test_search_during_a_slow_apply_is_served(tmp_path: Path):
    """While apply has committed lexically and is still embedding, the semantic cursor
    trails the lexical one; that is no health problem (the engine's lag bound decides)."""
    encoder = SlowEncoder(1.5)
    ranker = Ranker(tmp_path / "idx", encoder)
    ranker.apply("s", upserts=[doc("s", "mem_1", "payment service deploy friday")], removals=[], through_cursor=1)
    batch = [doc("s", f"mem_slow{i}", f"slowdoc payment ledger {i}") for i in range(3)]
    worker = threading.Thread(
        target=ranker.apply, args=("s",), kwargs={"upserts": batch, "removals": [], "through_cursor": 2}
    )
    worker.start()
    try:
        assert encoder.embedding.wait(10)
        assert ranker.projection_cursor("s") == {"lexical": 2, "semantic": 1}
        assert ranker.semantic_health("s") is None
        result = ranker.search("s", "payment", HYBRID_PROFILE, valid_as_of_ms=0)
        assert result.channels == ("lexical", "semantic")
        found = {c.record_id for c in result.candidates}
        assert "mem_1" in found and found <= {"mem_1", "mem_slow0", "mem_slow1", "mem_slow2"}
        assert worker.is_alive()  # the search was served during the apply, not after it
    finally:
        worker.join(30)
    assert ranker.projection_cursor("s") == {"lexical": 2, "semantic": 2}
    assert "mem_slow1" in semantic_ids(ranker, "s", "slowdoc ledger 1")
    ranker.close()


def test_apply_defers_saving_until_a_checkpoint(tmp_path: Path):
    root = tmp_path / "idx"
    ranker = Ranker(root, HashingTestEncoder(), checkpoint_records=5, checkpoint_seconds=3600, checkpoint_spacing=0)

    def apply(upserts: list, removals: list[str], through_cursor: int) -> None:
        ranker.apply("s", upserts=upserts, removals=removals, through_cursor=through_cursor)
        assert ranker.settle(30)  # whatever it made due is saved (in the background)

    def on_disk() -> tuple[int, int]:
        directory = semantic_dir(root)
        meta = json.loads((directory / "meta.json").read_text())
        return json.loads((directory / "cursor.json").read_text())["cursor"], len(meta["records"])

    apply([doc("s", f"mem_{i}", f"alpha note {i}") for i in range(3)], [], 3)
    assert on_disk() == (3, 3)  # a scope never saved is due at once
    apply([doc("s", "mem_3", "alpha note 3")], [], 4)
    apply([doc("s", "mem_4", "alpha note 4")], ["mem_0"], 5)  # 3 records unsaved
    assert ranker.projection_cursor("s") == {"lexical": 5, "semantic": 5}
    assert on_disk() == (3, 3)
    assert sorted(semantic_ids(ranker, "s", "alpha note")) == ["mem_1", "mem_2", "mem_3", "mem_4"]
    apply([doc("s", f"mem_{i}", f"alpha note {i}") for i in range(5, 7)], [], 7)  # 5 records
    assert on_disk() == (7, 6)
    assert len(list(semantic_dir(root).glob("vectors-*.bin"))) == 1
    apply([doc("s", "mem_7", "alpha note 7")], [], 8)
    assert on_disk() == (7, 6)  # not yet
    ranker.checkpoint()
    assert on_disk() == (8, 7)
    apply([], ["never-indexed"], 9)  # nothing unsaved: the cursor is written at once
    assert on_disk() == (9, 7)
    apply([doc("s", "mem_8", "alpha note 8")], [], 10)
    ranker.close()
    assert on_disk() == (10, 8)


def test_crash_reopens_at_the_checkpoint_and_reapplying_heals(tmp_path: Path):
    root = tmp_path / "idx"
    first = [doc("s", f"mem_{i}", f"alpha note {i}") for i in range(3)]
    later = [doc("s", "mem_3", "beta gamma report"), doc("s", "mem_1", "beta rewritten note")]
    ranker = Ranker(root, HashingTestEncoder(), checkpoint_records=10_000, checkpoint_seconds=3600)
    ranker.apply("s", upserts=first, removals=[], through_cursor=3)
    ranker.checkpoint()
    # The first apply made a save due, queued on the background thread; a crash would
    # end that thread too, so it must be done before the later apply.
    assert ranker.settle(60)
    ranker.apply("s", upserts=later, removals=["mem_2"], through_cursor=5)  # applied in memory only
    assert ranker.projection_cursor("s") == {"lexical": 5, "semantic": 5}
    assert sorted(semantic_ids(ranker, "s", "beta")) == ["mem_0", "mem_1", "mem_3"]
    del ranker  # a crash: no close, no checkpoint
    gc.collect()

    reopened = Ranker(root, HashingTestEncoder(), checkpoint_records=10_000, checkpoint_seconds=3600)
    assert reopened.projection_cursor("s") == {"lexical": 5, "semantic": 3}
    assert reopened.semantic_health("s") is None
    assert sorted(semantic_ids(reopened, "s", "alpha note")) == ["mem_0", "mem_1", "mem_2"]  # as checkpointed
    # The projector re-applies from the lowest cursor; lexical repeats it harmlessly.
    reopened.apply("s", upserts=later, removals=["mem_2"], through_cursor=5, after_cursor=3)
    assert reopened.projection_cursor("s") == {"lexical": 5, "semantic": 5}
    assert sorted(semantic_ids(reopened, "s", "beta")) == ["mem_0", "mem_1", "mem_3"]
    assert sorted(ids(reopened, "s", "beta", LEXICAL_PROFILE)) == ["mem_1", "mem_3"]  # no duplicates
    reopened.close()

    again = Ranker(root, HashingTestEncoder())
    assert again.projection_cursor("s") == {"lexical": 5, "semantic": 5}
    assert sorted(semantic_ids(again, "s", "beta")) == ["mem_0", "mem_1", "mem_3"]
    again.close()


def test_purge_reaches_the_disk_with_unsaved_changes_pending(tmp_path: Path):
    root = tmp_path / "idx"
    ranker = Ranker(root, HashingTestEncoder(), checkpoint_records=10_000, checkpoint_seconds=3600)
    ranker.apply(
        "s",
        upserts=[doc("s", "mem_keep", "payment service notes"), doc("s", "mem_gone", f"the {SECRET} payment incident")],
        removals=[],
        through_cursor=2,
    )
    ranker.checkpoint()
    assert bytes_under(semantic_dir(root), b"mem_gone")  # in the saved label map
    ranker.apply(
        "s", upserts=[doc("s", "mem_new", "payment ledger")], removals=["mem_gone"], through_cursor=3
    )  # unsaved
    assert ranker.purge("s", ["mem_gone"]) is True
    assert bytes_under(tmp_path, SECRET.encode()) == []
    assert bytes_under(tmp_path, b"mem_gone") == []
    directory = semantic_dir(root)
    assert json.loads((directory / "cursor.json").read_text())["cursor"] == 3
    assert len(list(directory.glob("vectors-*.bin"))) == 1
    del ranker  # even without close, what purge saved is what reopens
    gc.collect()
    reopened = Ranker(root, HashingTestEncoder())
    assert reopened.projection_cursor("s") == {"lexical": 3, "semantic": 3}
    assert sorted(ids(reopened, "s", "payment")) == ["mem_keep", "mem_new"]
    reopened.close()


def test_bulk_apply_cost_stays_roughly_linear(tmp_path: Path, capsys):
    """40 batches of 500: a save (the whole index written) comes at most once per
    ``CHECKPOINT_RECORDS`` applied, so late batches cost about what early ones do.
    What is asserted is the count of saves; the timings are printed, not asserted
    (speed is measured by `engram bench`)."""
    dim = 32
    ranker = Ranker(tmp_path / "idx", None, dim=dim)
    rng = np.random.default_rng(0)
    saves = {"n": 0}
    real_save = SemanticIndex._save

    def counting(self, scope_key, state):
        saves["n"] += 1
        real_save(self, scope_key, state)

    ranker._semantic._save = counting.__get__(ranker._semantic)  # noqa: SLF001
    batches, size = 40, 500
    times = []
    for b in range(batches):
        docs = [doc("bulk", f"mem_{b}_{i}", f"note {i} of batch {b} topic{i % 7}") for i in range(size)]
        vectors = rng.normal(size=(size, 1, dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=2, keepdims=True)
        started = time.perf_counter()
        ranker.apply("bulk", upserts=docs, removals=[], through_cursor=(b + 1) * size, vectors=list(vectors))
        times.append(time.perf_counter() - started)
    started = time.perf_counter()
    ranker.close()
    closing = time.perf_counter() - started
    first, last = sum(times[:10]), sum(times[-10:])
    with capsys.disabled():
        print(
            f"\nbulk {batches}x{size}: total {sum(times):.2f}s, first 10 batches {first:.2f}s, "
            f"last 10 {last:.2f}s, {saves['n']} semantic saves, close {closing:.2f}s"
        )
    assert ranker.projection_cursor("bulk") == {"lexical": batches * size, "semantic": batches * size}
    assert saves["n"] <= batches * size // CHECKPOINT_RECORDS + 1


def test_reload_and_rebuild_keep_the_vectors_exactly_and_files_stay_private(tmp_path: Path, monkeypatch):
    """The index holds the only copy of the vectors: a reopened scope and a purge's
    rebuild (read back a few at a time) serve exactly the vectors it stored."""
    import engram.ranking.semantic as semantic

    root = tmp_path / "idx"
    ranker = Ranker(root, HashingTestEncoder())
    ranker.apply(
        "s",
        upserts=[doc("s", f"mem_{i}", f"note {i} about topic{i % 5}") for i in range(40)],
        removals=[],
        through_cursor=40,
    )
    ranker.apply("s", upserts=[], removals=["mem_7"], through_cursor=41)  # a hidden label is not read back
    ranker.close()
    names = [f"mem_{i}" for i in range(40)]
    before = ranker.passage_vectors("s", names)
    assert before[7] is None and all(v is not None and v.dtype == np.float32 for v in before[:7])
    monkeypatch.setattr(semantic, "LOAD_CHUNK", 3)  # many chunks, one short
    reopened = Ranker(root, HashingTestEncoder())
    state = reopened._semantic._scope("s")  # noqa: SLF001
    assert state.labels.live_count == 39
    after = reopened.passage_vectors("s", names)
    assert all((a is None and b is None) or np.array_equal(a, b) for a, b in zip(before, after))
    assert sorted(semantic_ids(reopened, "s", "topic3")) == sorted(semantic_ids(ranker, "s", "topic3"))
    reopened.purge("s", ["mem_8"])  # a rebuild, reading the vectors back in chunks of 3
    rebuilt = reopened.passage_vectors("s", names)
    assert rebuilt[8] is None
    assert all(np.array_equal(a, b) for i, (a, b) in enumerate(zip(before, rebuilt)) if i not in (7, 8))
    for path in semantic_dir(root).iterdir():
        assert path.stat().st_mode & 0o077 == 0, path.name
    assert root.stat().st_mode & 0o077 == 0  # and nothing below the root is reachable
    reopened.close()


def test_a_save_removes_temporary_files_a_crash_left_behind(tmp_path: Path):
    root = tmp_path / "idx"
    ranker = Ranker(root, HashingTestEncoder())
    ranker.apply("s", upserts=[doc("s", "mem_1", f"{SECRET} note")], removals=[], through_cursor=1)
    ranker.checkpoint()
    leftover = semantic_dir(root) / ".vectors-9.bin.crashed.tmp"  # as atomic_write names them
    leftover.write_bytes(SECRET.encode())
    ranker.apply("s", upserts=[doc("s", "mem_2", "another note")], removals=[], through_cursor=2)
    ranker.checkpoint()
    assert not leftover.exists()
    ranker.close()


def test_a_first_checkpoint_cut_before_its_metadata_restarts_the_scope(tmp_path: Path):
    """kill -9 between writing a scope's first vector file and swapping in meta.json
    leaves a vector file no metadata names: the scope reopens empty at cursor 0 (the
    projector replays the journal into it), not as a corrupt index."""
    root = tmp_path / "idx"
    ranker = Ranker(root, HashingTestEncoder())
    ranker.apply("s", upserts=[doc("s", "mem_1", "alpha note one")], removals=[], through_cursor=1)
    ranker.close()
    directory = semantic_dir(root)
    (directory / "meta.json").unlink()  # the state a kill between the two writes leaves
    (directory / ".vectors-2.bin.tmp").write_bytes(b"partial")
    assert list(directory.glob("vectors-*.bin"))

    reopened = Ranker(root, HashingTestEncoder())
    assert reopened.semantic_health("s") is None
    assert reopened.projection_cursor("s")["semantic"] == 0
    assert not list(directory.glob("vectors-*.bin")) and not list(directory.glob(".*.tmp"))
    reopened.apply("s", upserts=[doc("s", "mem_1", "alpha note one")], removals=[], through_cursor=1)
    assert semantic_ids(reopened, "s", "alpha note one") == ["mem_1"]
    reopened.close()


def hold_saves(semantic: SemanticIndex) -> tuple[threading.Event, threading.Event]:
    """Make the index's background saves wait while they write their generation: (set
    once one has begun, set to let it go on)."""
    saving, release = threading.Event(), threading.Event()
    real_write = SemanticIndex._write_generation

    def held_write(self, *args):  # noqa: ANN001, ANN202
        saving.set()
        assert release.wait(30)
        return real_write(self, *args)

    semantic._write_generation = held_write.__get__(semantic)  # noqa: SLF001 - the save is held open
    return saving, release


def test_a_due_checkpoint_is_saved_beside_searches_and_changes(tmp_path: Path):
    """A save rewrites the whole scope (seconds at a million records). The apply that
    makes it due returns without it, and while it writes the new generation, searches
    of the scope are answered and the next change is applied; the generation swapped in
    holds what was applied when the save began, and the next checkpoint the rest."""
    root = tmp_path / "idx"
    ranker = Ranker(root, HashingTestEncoder(), checkpoint_records=1, checkpoint_seconds=3600, checkpoint_spacing=0)
    saving, release = hold_saves(ranker._semantic)  # noqa: SLF001

    def in_thread(fn, *args, **kwargs) -> tuple[threading.Thread, list]:
        out: list = []
        thread = threading.Thread(target=lambda: out.append(fn(*args, **kwargs)), daemon=True)
        thread.start()
        return thread, out

    first, _ = in_thread(
        ranker.apply, "s", upserts=[doc("s", "mem_1", "alpha note one")], removals=[], through_cursor=1
    )
    first.join(30)
    assert not first.is_alive()  # answered while its checkpoint waits to be written
    assert saving.wait(30)  # the save is running, on the checkpointer's thread
    later, _ = in_thread(
        ranker.apply, "s", upserts=[doc("s", "mem_2", "alpha note two")], removals=[], through_cursor=2
    )
    later.join(30)
    search, found = in_thread(semantic_ids, ranker, "s", "alpha note")
    search.join(30)
    try:
        assert not later.is_alive()  # applied while the save is held
        assert not search.is_alive() and {"mem_1", "mem_2"} <= set(found[0])  # served during the save
    finally:
        release.set()
    assert ranker.settle(30)
    meta = json.loads((semantic_dir(root) / "meta.json").read_text())
    assert sorted(r[0] for r in meta["records"]) == ["mem_1", "mem_2"]
    assert json.loads((semantic_dir(root) / "cursor.json").read_text())["cursor"] == 2
    ranker.close()


def test_a_walked_scope_is_searched_during_a_save_at_a_new_depth(tmp_path: Path):
    """A scope searched through its graph sets the graph's search depth (which grows with
    the scope) as it searches: that is no change to wait for, so a search is answered
    while a background save of the scope runs, even the first one at a new depth."""
    from engram.ranking.profiles import SemanticConfig

    dim = 16
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(300, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = SemanticIndex(
        tmp_path / "sem",
        dim,
        graph=SemanticConfig(exact_up_to=0, expansion_reference=100),
        checkpoint_records=1,
        checkpoint_spacing=0,
    )
    # One thread adds to the graph, so the graph (and the nearest match a walk finds) is
    # the same every run: built on every core, about one build in 200 walked past r250.
    first = [(f"r{i}", i, vectors[i : i + 1]) for i in range(200)]
    index.apply("s", upserts=first, removals=[], through_cursor=1, graph_threads=1)
    assert index.settle(30)
    assert index.search("s", vectors[3], 5)[0].record_id == "r3"
    saving, release = hold_saves(index)
    more = [(f"r{i}", i, vectors[i : i + 1]) for i in range(200, 300)]
    index.apply("s", upserts=more, removals=[], through_cursor=2, graph_threads=1)  # a deeper graph now
    assert saving.wait(30)
    found: list = []
    search = threading.Thread(target=lambda: found.append(index.search("s", vectors[250], 5)), daemon=True)
    search.start()
    search.join(30)
    try:
        assert not search.is_alive() and found[0][0].record_id == "r250"
        graph = index._scope("s").index  # noqa: SLF001
        assert graph.expansion_search == SemanticConfig(expansion_reference=100).expansion_for(300)
    finally:
        release.set()
    assert index.settle(30)
    index.close()


def test_a_checkpoint_written_beside_changes_holds_the_scope_as_it_began(tmp_path: Path):
    """A background checkpoint writes the scope as it was when it began: a change applied
    while it wrote is not in it, and the cursor on disk does not pass that change. After
    a crash that cuts the next checkpoint, the scope reopens at the first one's moment,
    and re-applying the journal from there heals it."""
    root = tmp_path / "idx"
    ranker = Ranker(root, HashingTestEncoder(), checkpoint_records=1, checkpoint_seconds=3600, checkpoint_spacing=0)
    calls: list[int] = []
    writing, release = threading.Event(), threading.Event()
    real_write = SemanticIndex._write_generation

    def write(self, *args):  # noqa: ANN001, ANN202
        calls.append(len(calls))
        if len(calls) > 1:
            raise OSError("cut by the crash")  # the next checkpoint never reaches the disk
        writing.set()
        assert release.wait(30)
        return real_write(self, *args)

    ranker._semantic._write_generation = write.__get__(ranker._semantic)  # noqa: SLF001
    ranker.apply("s", upserts=[doc("s", "mem_1", "alpha note one")], removals=[], through_cursor=1)
    assert writing.wait(30)
    ranker.apply("s", upserts=[doc("s", "mem_2", "alpha note two")], removals=[], through_cursor=2)
    release.set()
    assert ranker.settle(30)
    assert len(calls) == 2
    meta = json.loads((semantic_dir(root) / "meta.json").read_text())
    assert [r[0] for r in meta["records"]] == ["mem_1"]
    del ranker  # a crash: no close, no checkpoint
    gc.collect()

    reopened = Ranker(root, HashingTestEncoder(), checkpoint_records=10_000, checkpoint_seconds=3600)
    assert reopened.projection_cursor("s") == {"lexical": 2, "semantic": 1}
    assert semantic_ids(reopened, "s", "alpha note") == ["mem_1"]
    reopened.apply("s", upserts=[doc("s", "mem_2", "alpha note two")], removals=[], through_cursor=2, after_cursor=1)
    assert sorted(semantic_ids(reopened, "s", "alpha note")) == ["mem_1", "mem_2"]
    reopened.close()
