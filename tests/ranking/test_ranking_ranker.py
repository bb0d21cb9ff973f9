"""The Ranker against real Tantivy and usearch files, with the hashing test encoder."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ranking_support import HashingTestEncoder, bytes_under, doc

from engram.ranking import HYBRID_PROFILE, LEXICAL_PROFILE, Ranker, SemanticUnavailable
from engram.ranking.lexical import LexicalIndex
from engram.ranking.semantic import SemanticIndex

SECRET = "zyxquorblat"


def ids(ranker: Ranker, scope: str, query: str, profile=HYBRID_PROFILE) -> list[str]:
    return [c.record_id for c in ranker.search(scope, query, profile, valid_as_of_ms=0).candidates]


def seed(ranker: Ranker) -> None:
    ranker.apply(
        "scopeA",
        upserts=[
            doc("scopeA", "mem_a1", "deploy the payment service on friday", decision="use blue green"),
            doc("scopeA", "mem_a2", "error ERR_4411 when the cache warms", source_refs="JIRA-77"),
            doc("scopeA", "mem_a3", f"the {SECRET} incident report", evidence="logs show timeout"),
        ],
        removals=[],
        through_cursor=3,
    )
    ranker.apply(
        "scopeB",
        upserts=[doc("scopeB", "mem_b1", "payment service secrets for tenant b")],
        removals=[],
        through_cursor=1,
    )


def test_search_finds_by_each_field_and_both_profiles(ranker: Ranker):
    seed(ranker)
    assert ids(ranker, "scopeA", "payment", LEXICAL_PROFILE) == ["mem_a1"]
    assert ids(ranker, "scopeA", "ERR_4411")[0] == "mem_a2"
    assert ids(ranker, "scopeA", "jira-77", LEXICAL_PROFILE) == ["mem_a2"]
    assert ids(ranker, "scopeA", "timeouts", LEXICAL_PROFILE) == ["mem_a3"]  # stemmed evidence
    result = ranker.search("scopeA", "blue green deploy", HYBRID_PROFILE, valid_as_of_ms=0)
    assert result.channels == ("lexical", "semantic")
    assert result.candidates[0].record_id == "mem_a1"
    assert result.candidate_ids == sorted(result.candidate_ids)


def test_empty_query_gives_empty_lexical_list(ranker: Ranker):
    seed(ranker)
    assert ranker.search("scopeA", "  ?!* ", LEXICAL_PROFILE, valid_as_of_ms=0).candidates == []


ADVERSARIAL = st.one_of(
    st.sampled_from(
        [
            "scope:scopeB",
            "*",
            "record_id:mem_b1",
            '"unbalanced',
            "foo AND (bar",
            "AND",
            "-",
            "payment OR scope:scopeB",
            "scope:* payment",
            "\\",
            "((((",
            "tenant b",
            "secrets",
            "",
            "::",
        ]
    ),
    st.text(max_size=60),
    st.text(alphabet='abcdefghijklmnopqrstuvwxyz :*"()-+^~[]{}!\\', max_size=80),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=ADVERSARIAL)
def test_no_query_escapes_its_scope(ranker: Ranker, query: str):
    if not ranker.projection_cursor("scopeA")["lexical"]:
        seed(ranker)
    for profile in (LEXICAL_PROFILE, HYBRID_PROFILE):
        found = ids(ranker, "scopeA", query, profile)
        assert all(r.startswith("mem_a") for r in found)


def test_long_and_unicode_queries(ranker: Ranker):
    seed(ranker)
    assert ids(ranker, "scopeA", "payment " * 1100, LEXICAL_PROFILE) == ["mem_a1"]
    assert ids(ranker, "scopeA", "ünïcødé 支付 🚀 payment", LEXICAL_PROFILE) == ["mem_a1"]


def test_apply_is_idempotent_and_cursor_never_goes_back(ranker: Ranker):
    seed(ranker)
    batch = [doc("scopeA", "mem_a1", "deploy the payment service on friday")]
    ranker.apply("scopeA", upserts=batch, removals=[], through_cursor=3)
    ranker.apply("scopeA", upserts=batch, removals=[], through_cursor=2)
    assert ranker.projection_cursor("scopeA") == {"lexical": 3, "semantic": 3}
    assert ids(ranker, "scopeA", "payment", LEXICAL_PROFILE) == ["mem_a1"]
    assert ids(ranker, "scopeA", "payment") == ["mem_a1"]  # once, and no unrelated filler
    assert ranker.projection_cursor("never") == {"lexical": 0, "semantic": 0}


def test_upsert_replaces_text_and_removal_hides_at_once(ranker: Ranker):
    seed(ranker)
    ranker.apply(
        "scopeA", upserts=[doc("scopeA", "mem_a1", "rollback the checkout service")], removals=[], through_cursor=4
    )
    assert ids(ranker, "scopeA", "payment", LEXICAL_PROFILE) == []
    assert ids(ranker, "scopeA", "checkout", LEXICAL_PROFILE) == ["mem_a1"]
    ranker.apply("scopeA", upserts=[], removals=["mem_a1"], through_cursor=5)
    assert "mem_a1" not in ids(ranker, "scopeA", "checkout rollback")


def test_purge_leaves_no_byte_of_the_record(tmp_path: Path):
    ranker = Ranker(tmp_path / "idx", HashingTestEncoder())
    seed(ranker)
    assert bytes_under(tmp_path, SECRET.encode())  # stored text is on disk before purge
    ranker.apply("scopeA", upserts=[], removals=["mem_a3"], through_cursor=4)
    assert ranker.purge("scopeA", ["mem_a3"]) is True
    assert bytes_under(tmp_path, SECRET.encode()) == []
    assert bytes_under(tmp_path, b"mem_a3") == []
    assert ids(ranker, "scopeA", "payment", LEXICAL_PROFILE) == ["mem_a1"]
    assert ids(ranker, "scopeB", "payment") == ["mem_b1"]
    ranker.close()


def test_corrupt_vector_file_degrades_to_lexical(tmp_path: Path):
    ranker = Ranker(tmp_path / "idx", HashingTestEncoder())
    seed(ranker)
    ranker.close()
    for path in (tmp_path / "idx" / "semantic").rglob("vectors-*.bin"):
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    reopened = Ranker(tmp_path / "idx", HashingTestEncoder())
    assert "corrupt" in (reopened.semantic_health("scopeA") or "")
    with pytest.raises(SemanticUnavailable):
        reopened.search("scopeA", "payment", HYBRID_PROFILE, valid_as_of_ms=0)
    assert ids(reopened, "scopeA", "payment", LEXICAL_PROFILE) == ["mem_a1"]
    # With a lexical fallback the same call answers from the lexical hits it already has.
    fell_back = reopened.search("scopeA", "payment", HYBRID_PROFILE, valid_as_of_ms=0, fallback=LEXICAL_PROFILE)
    assert fell_back.profile == LEXICAL_PROFILE and fell_back.channels == ("lexical",)
    assert [c.record_id for c in fell_back.candidates] == ["mem_a1"]
    with pytest.raises(SemanticUnavailable):  # a fallback that needs semantic is no fallback
        reopened.search("scopeA", "payment", HYBRID_PROFILE, valid_as_of_ms=0, fallback=HYBRID_PROFILE)
    reopened.close()


def test_no_encoder_means_semantic_down_but_lexical_projects(tmp_path: Path):
    ranker = Ranker(tmp_path / "idx", None)
    seed(ranker)
    assert ranker.semantic_health() == "model not loaded"
    assert ranker.projection_cursor("scopeA") == {"lexical": 3, "semantic": 0}
    with pytest.raises(SemanticUnavailable):
        ranker.search("scopeA", "payment", HYBRID_PROFILE, valid_as_of_ms=0)
    assert ids(ranker, "scopeA", "payment", LEXICAL_PROFILE) == ["mem_a1"]
    ranker.close()


def test_reopen_keeps_documents_vectors_and_cursors(tmp_path: Path):
    ranker = Ranker(tmp_path / "idx", HashingTestEncoder())
    seed(ranker)
    before = ranker.search("scopeA", "payment cache", HYBRID_PROFILE, valid_as_of_ms=0)
    ranker.close()
    reopened = Ranker(tmp_path / "idx", HashingTestEncoder())
    assert reopened.semantic_health("scopeA") is None
    assert reopened.projection_cursor("scopeA") == {"lexical": 3, "semantic": 3}
    after = reopened.search("scopeA", "payment cache", HYBRID_PROFILE, valid_as_of_ms=0)
    assert after.candidates == before.candidates
    reopened.reset()
    assert reopened.projection_cursor("scopeA") == {"lexical": 0, "semantic": 0}
    assert ids(reopened, "scopeA", "payment", LEXICAL_PROFILE) == []
    reopened.close()


def test_bulk_apply_with_many_documents(ranker: Ranker):
    docs = [doc("bulk", f"mem_{i:05d}", f"note {i} about topic{i % 11}") for i in range(1500)]
    ranker.apply("bulk", upserts=docs, removals=[], through_cursor=1500)
    found = ranker.search("bulk", "topic3", LEXICAL_PROFILE, valid_as_of_ms=0).candidates
    assert {c.record_id for c in found} == {f"mem_{i:05d}" for i in range(1500) if i % 11 == 3}
    capped = ranker.search("bulk", "note", LEXICAL_PROFILE, valid_as_of_ms=0).candidates
    assert len(capped) == LEXICAL_PROFILE.config.lexical.cap < 1500


def test_semantic_search_scores_exactly_when_the_graph_cannot_fill_k(tmp_path, monkeypatch) -> None:
    """After many deletions the graph may reach fewer live vectors than asked for; the
    channel must then score the live vectors exactly instead of returning a short list."""
    import types

    import numpy as np

    from engram.ranking.profiles import SemanticConfig

    index = SemanticIndex(tmp_path, 8, graph=SemanticConfig(exact_up_to=0))  # always the graph
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(30, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index.apply("s", upserts=[(f"r{i}", 0, vectors[i : i + 1]) for i in range(30)], removals=[], through_cursor=1)
    index.apply("s", upserts=[], removals=[f"r{i}" for i in range(20)], through_cursor=2)
    expected = index.search("s", vectors[25], 5)
    assert index.settle(30)  # no background save of the real index is left to run on the stand-in
    real = index._scope("s").index  # noqa: SLF001

    class Short:
        """Stands in for the index: its searches reach only two vectors."""

        expansion_search = 0
        ndim = real.ndim
        dtype = real.dtype

        def search(self, query, k, exact=False, threads=0):
            found = real.search(query, k, exact=exact, threads=threads)
            if exact:
                return found
            return types.SimpleNamespace(keys=found.keys[:2], distances=found.distances[:2])

        def get(self, keys):
            return real.get(keys)

    monkeypatch.setattr(index._scope("s"), "index", Short())  # noqa: SLF001
    hits = index.search("s", vectors[25], 5)
    assert [h.record_id for h in hits] == [h.record_id for h in expected] and len(hits) == 5
    assert hits[0].record_id == "r25" and abs(hits[0].similarity - 1.0) < 1e-3  # float16 storage
    assert all(int(h.record_id[1:]) >= 20 for h in hits)


def test_a_channel_already_through_a_batch_skips_it(tmp_path: Path) -> None:
    """After a lexical-only rebuild the semantic channel, still at the head, must not
    embed the journal again; the lexical channel catches up alone."""

    class CountingEncoder(HashingTestEncoder):
        texts = 0

        def encode(self, texts):
            CountingEncoder.texts += len(texts)
            return super().encode(texts)

    ranker = Ranker(tmp_path, CountingEncoder())
    docs = [doc("s1", f"r{i}", f"tidal gauge {i}") for i in range(5)]
    ranker.apply("s1", upserts=docs, removals=[], through_cursor=5)
    embedded = CountingEncoder.texts
    assert embedded >= 5

    ranker.apply("s1", upserts=docs, removals=[], through_cursor=5, after_cursor=0)  # a replayed batch
    assert CountingEncoder.texts == embedded

    ranker._lexical.reset()  # noqa: SLF001 - the lexical projection lost, semantic intact
    assert ranker.projection_cursor("s1") == {"lexical": 0, "semantic": 5}
    ranker.apply("s1", upserts=docs, removals=[], through_cursor=5, after_cursor=0)
    assert CountingEncoder.texts == embedded
    hits = ranker.search("s1", "tidal gauge", LEXICAL_PROFILE, valid_as_of_ms=0).candidates
    assert {c.record_id for c in hits} == {f"r{i}" for i in range(5)}


def test_warm_reads_the_vector_file_before_the_first_search(tmp_path: Path):
    ranker = Ranker(tmp_path / "idx", HashingTestEncoder())
    seed(ranker)
    before = ids(ranker, "scopeA", "payment cache")
    ranker.close()
    warmed = Ranker(tmp_path / "idx", HashingTestEncoder())
    warmed.warm("scopeA")
    warmed.warm("scope-never-written")  # nothing on disk: nothing opened, nothing created
    for path in (tmp_path / "idx" / "semantic").rglob("vectors-*.bin"):
        path.unlink()  # the first search must not need the file: it was read at warm-up
    assert warmed.semantic_health("scopeA") is None
    assert ids(warmed, "scopeA", "payment cache") == before
    cold = Ranker(tmp_path / "idx", HashingTestEncoder())
    assert "corrupt" in (cold.semantic_health("scopeA") or "")  # what an unwarmed reader meets


def test_read_write_lock_lets_readers_share_and_writers_wait():
    import threading

    from engram.ranking.read_write_lock import ReadWriteLock

    lock = ReadWriteLock()
    inside, release, order = threading.Barrier(3), threading.Event(), []

    def reader(name: str) -> None:
        with lock.read():
            inside.wait(timeout=30)  # both readers are inside at once, or this times out
            release.wait(timeout=30)
            order.append(name)

    def writer() -> None:
        with lock.write():
            order.append("writer")

    readers = [threading.Thread(target=reader, args=(f"r{i}",)) for i in range(2)]
    for t in readers:
        t.start()
    inside.wait(timeout=30)
    w = threading.Thread(target=writer)
    w.start()
    release.set()
    for t in [*readers, w]:
        t.join(timeout=30)
    assert sorted(order[:2]) == ["r0", "r1"] and order[2] == "writer"  # the writer waited for both


def test_read_write_lock_timed_read_gives_up_while_a_writer_holds_it():
    import threading

    from engram.ranking.read_write_lock import ReadWriteLock

    lock = ReadWriteLock()
    with lock.read(timeout=0) as held:
        assert held  # free: taken at once
    writing, release = threading.Event(), threading.Event()

    def writer() -> None:
        with lock.write():
            writing.set()
            release.wait(timeout=30)

    w = threading.Thread(target=writer)
    w.start()
    assert writing.wait(timeout=30)
    with lock.read(timeout=0.05) as held:
        assert not held  # the writer holds it: gave up, not held...
    release.set()
    w.join(timeout=30)
    with lock.read(timeout=0.05) as held:
        assert held
    with lock.write():  # ...and a refused reader left no count behind
        pass


def test_concurrent_searches_of_one_scope_agree_with_a_lone_search(tmp_path: Path):
    from concurrent.futures import ThreadPoolExecutor

    ranker = Ranker(tmp_path / "idx", HashingTestEncoder())
    seed(ranker)
    ranker.apply(
        "scopeA",
        upserts=[doc("scopeA", f"mem_x{i}", f"payment note {i} about the cache") for i in range(60)],
        removals=[],
        through_cursor=4,
    )
    alone = ids(ranker, "scopeA", "payment cache")
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: ids(ranker, "scopeA", "payment cache"), range(32)))
    assert all(r == alone for r in results)
    ranker.close()


def test_a_scope_loading_its_vector_file_does_not_hold_up_another_scopes_search(tmp_path: Path):
    """The first use of scope A reads and checks its vector file; scope B's searches
    meanwhile answer (loads are per scope, not under the index's global lock)."""
    import threading

    writer = Ranker(tmp_path / "idx", HashingTestEncoder())
    seed(writer)
    writer.close()
    reader = Ranker(tmp_path / "idx", HashingTestEncoder())
    assert ids(reader, "scopeB", "payment service") == ["mem_b1"]  # B loaded
    loading, release = threading.Event(), threading.Event()
    load = SemanticIndex._load

    def held_load(self, scope_key):  # noqa: ANN001, ANN202
        if scope_key == "scopeA":
            loading.set()
            assert release.wait(60)
        return load(self, scope_key)

    outcome: dict[str, list[str]] = {}
    try:
        SemanticIndex._load = held_load  # type: ignore[method-assign]
        first_a = threading.Thread(target=lambda: outcome.update(a=ids(reader, "scopeA", "payment")))
        first_a.start()
        assert loading.wait(60)
        b = threading.Thread(target=lambda: outcome.update(b=ids(reader, "scopeB", "payment service")))
        b.start()
        b.join(60)
        assert outcome.get("b") == ["mem_b1"] and first_a.is_alive()  # B answered while A was loading
    finally:
        release.set()
        SemanticIndex._load = load  # type: ignore[method-assign]
    first_a.join(60)
    assert outcome["a"][0] == "mem_a1"
    reader.close()


def test_a_hybrid_search_encodes_its_query_while_the_lexical_channel_searches(tmp_path: Path):
    """The query encode and the lexical search of one hybrid search overlap: here each
    waits until the other has begun, which only completes if they run side by side (in
    sequence the lexical search would wait for an encode that had not started)."""
    import threading

    from engram.ranking.lexical import LexicalIndex

    encoding, searching = threading.Event(), threading.Event()
    met: list[str] = []

    class MeetingEncoder(HashingTestEncoder):
        def encode(self, texts):  # noqa: ANN001, ANN202
            if texts == ["payment cache"]:
                encoding.set()
                met.append("encoder" if searching.wait(10) else "encoder alone")
            return super().encode(texts)

    ranker = Ranker(tmp_path / "idx", MeetingEncoder())
    seed(ranker)
    search = LexicalIndex.search

    def meeting_search(self, scope_key, query, config, limit, **options):  # noqa: ANN001, ANN202
        if query == "payment cache":
            searching.set()
            met.append("lexical" if encoding.wait(10) else "lexical alone")
        return search(self, scope_key, query, config, limit, **options)

    try:
        LexicalIndex.search = meeting_search  # type: ignore[method-assign]
        hybrid = ids(ranker, "scopeA", "payment cache")
    finally:
        LexicalIndex.search = search  # type: ignore[method-assign]
    assert sorted(met) == ["encoder", "lexical"]
    assert hybrid == ids(ranker, "scopeA", "payment cache")  # the same list as an unhindered search
    ranker.close()


def test_drop_deletes_one_scope_and_leaves_the_others(ranker: Ranker, tmp_path: Path):
    seed(ranker)
    ranker.checkpoint()
    root = tmp_path / "idx"
    assert bytes_under(root, SECRET.encode()), "control: the files hold the scope's words"
    assert ranker.holds("scopeA") and ranker.holds("scopeB") and not ranker.holds("scopeC")
    ranker.drop("scopeA")
    assert bytes_under(root, SECRET.encode()) == []
    assert not ranker.holds("scopeA")
    assert ranker.projection_cursor("scopeA") == {"lexical": 0, "semantic": 0}
    assert ids(ranker, "scopeA", SECRET) == []
    assert ids(ranker, "scopeB", "payment") == ["mem_b1"]  # another scope untouched
    ranker.apply(
        "scopeA", upserts=[doc("scopeA", "mem_a4", "projected again from the journal")], removals=[], through_cursor=4
    )
    assert ids(ranker, "scopeA", "projected") == ["mem_a4"]


def test_precomputed_vectors_apply_both_channels_at_once(ranker: Ranker, monkeypatch):
    """With the vectors given, Tantivy indexes while the graph takes the vectors: the
    lexical apply here waits for the semantic one to start, which a sequential apply
    (lexical first) would never let happen."""
    import threading

    import numpy as np

    semantic_started = threading.Event()
    real_lexical, real_semantic = ranker._lexical.apply, ranker._semantic.apply

    def lexical(*args, **kwargs):
        assert semantic_started.wait(10), "the semantic channel did not run beside the lexical one"
        return real_lexical(*args, **kwargs)

    def semantic(*args, **kwargs):
        semantic_started.set()
        return real_semantic(*args, **kwargs)

    monkeypatch.setattr(ranker._lexical, "apply", lexical)
    monkeypatch.setattr(ranker._semantic, "apply", semantic)
    docs = [doc("bulk", f"mem_v{i}", f"vector note {i}") for i in range(4)]
    vectors = [np.eye(1, 384, i, dtype=np.float32) for i in range(4)]
    ranker.apply("bulk", upserts=docs, removals=[], through_cursor=4, vectors=vectors)
    assert ranker.projection_cursor("bulk") == {"lexical": 4, "semantic": 4}
    assert ids(ranker, "bulk", "vector note 2", LEXICAL_PROFILE)[0] == "mem_v2"


def test_a_lexical_failure_beside_precomputed_vectors_fails_the_apply(ranker: Ranker, monkeypatch):
    import numpy as np

    def broken(*args, **kwargs):
        raise RuntimeError("tantivy failed")

    monkeypatch.setattr(ranker._lexical, "apply", broken)
    with pytest.raises(RuntimeError, match="tantivy failed"):
        ranker.apply(
            "bulk",
            upserts=[doc("bulk", "mem_v0", "vector note")],
            removals=[],
            through_cursor=1,
            vectors=[np.eye(1, 384, 0, dtype=np.float32)],
        )
    assert ranker.projection_cursor("bulk")["lexical"] == 0


@pytest.mark.parametrize("owner", [Ranker, LexicalIndex, SemanticIndex])
def test_apply_takes_its_batch_by_name(owner) -> None:
    """The channels list upserts and removals of different shapes: named, a swapped
    pair cannot pass silently."""
    params = inspect.signature(owner.apply).parameters
    for name in ("upserts", "removals", "through_cursor"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY


def test_the_semantic_default_graph_is_the_hybrid_profiles() -> None:
    from engram.ranking.semantic import DEFAULT_GRAPH

    assert DEFAULT_GRAPH == HYBRID_PROFILE.config.semantic


def test_queries_are_encoded_at_the_profiles_precision_and_passages_at_full(tmp_path: Path) -> None:
    """A profile names its query precision; the ranker asks the encoder's query path for
    it, and never uses that path for passages."""
    import dataclasses

    from engram.ranking.profiles import QueryPrecision

    class RecordingEncoder(HashingTestEncoder):
        def __init__(self) -> None:
            self.asked: list[tuple[str, QueryPrecision | None]] = []

        def encode(self, texts):
            self.asked += [(t, None) for t in texts]
            return super().encode(texts)

        def encode_queries(self, texts, precision):
            self.asked += [(t, precision) for t in texts]
            return super().encode(texts)

    encoder = RecordingEncoder()
    ranker = Ranker(tmp_path, encoder)
    seed(ranker)
    assert encoder.asked and all(precision is None for _, precision in encoder.asked)  # passages
    assert HYBRID_PROFILE.config.semantic is not None
    float32 = dataclasses.replace(
        HYBRID_PROFILE,
        config=dataclasses.replace(
            HYBRID_PROFILE.config,
            semantic=dataclasses.replace(HYBRID_PROFILE.config.semantic, query_precision=QueryPrecision.FLOAT32),
        ),
    )
    for profile in (HYBRID_PROFILE, float32):
        encoder.asked.clear()
        assert ids(ranker, "scopeA", "payment cache", profile)
        assert encoder.asked == [("payment cache", profile.config.semantic.query_precision)]
    assert HYBRID_PROFILE.config.semantic.query_precision is QueryPrecision.INT8
