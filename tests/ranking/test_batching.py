"""Natural batching: concurrent query encodes share batches, a lone one runs at once, and
every caller gets its own text's vector (the real model's batched vectors equal its lone
ones); concurrent graph searches of one scope share one usearch call, and each query
gets the matches it gets alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ranking_support import HashingTestEncoder, doc

from engram.models.outputs import contribution_wire
from engram.ranking import HYBRID_PROFILE, Ranker
from engram.ranking.batching import NaturalBatcher


def wire(c: Any) -> dict[str, Any]:
    """The receipt's wire form of a contribution."""
    return contribution_wire(c, c.decimals)


class GatedEncoder:
    """Records each batch it is given; while ``gate`` is closed, a batch waits for it
    (so the test can make callers queue behind a running batch)."""

    def __init__(self, inner) -> None:  # noqa: ANN001 - any Encoder
        self.inner = inner
        self.dim = inner.dim
        self.batches: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.batches.append(list(texts))
        self.entered.set()
        assert self.gate.wait(60)
        return self.inner.encode(texts)


def queued(batcher: NaturalBatcher) -> int:
    return len(batcher._queued)  # noqa: SLF001 - how many callers wait, to sequence the test


def wait_until(condition, timeout: float = 60.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def encode_concurrently(
    batcher: NaturalBatcher, encoder: GatedEncoder, texts: list[str], first: str = "the first query"
) -> tuple[np.ndarray, dict[str, object]]:
    """Start one encode, hold it inside the encoder until every one of ``texts`` has
    queued behind it, then let all run; returns the first's vector and each text's
    outcome (vector or exception)."""
    encoder.gate.clear()
    encoder.entered.clear()
    results: dict[str, object] = {}

    def call(text: str) -> None:
        try:
            results[text] = batcher.submit(text)
        except Exception as exc:  # noqa: BLE001 - compared below
            results[text] = exc

    lead = threading.Thread(target=call, args=(first,))
    lead.start()
    assert encoder.entered.wait(60)
    threads = [threading.Thread(target=call, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    wait_until(lambda: queued(batcher) == len(texts))
    encoder.gate.set()
    for t in [lead, *threads]:
        t.join(60)
    return results.pop(first), results


def test_a_lone_query_is_encoded_at_once_and_alone() -> None:
    encoder = GatedEncoder(HashingTestEncoder())
    batcher = NaturalBatcher(encoder.encode, max_batch=16)
    vector = batcher.submit("otter ledger")
    assert encoder.batches == [["otter ledger"]]
    assert np.array_equal(vector, HashingTestEncoder().encode(["otter ledger"])[0])
    batcher.submit("heron ledger")  # the encoder is idle again: alone again
    assert encoder.batches[-1] == ["heron ledger"]


def test_queries_arriving_during_a_batch_share_the_next_one() -> None:
    encoder = GatedEncoder(HashingTestEncoder())
    batcher = NaturalBatcher(encoder.encode, max_batch=16)
    texts = [f"query number {i} about otters" for i in range(7)]
    _, results = encode_concurrently(batcher, encoder, texts)
    assert encoder.batches[0] == ["the first query"]
    assert sorted(encoder.batches[1]) == sorted(texts) and len(encoder.batches) == 2
    reference = HashingTestEncoder().encode(texts)
    for text, row in zip(texts, reference):
        assert np.array_equal(results[text], row)  # each caller gets its own text's vector
    assert batcher.submit("alone again") is not None and encoder.batches[-1] == ["alone again"]


def test_batches_are_capped_and_the_queue_drains() -> None:
    encoder = GatedEncoder(HashingTestEncoder())
    batcher = NaturalBatcher(encoder.encode, max_batch=4)
    texts = [f"query {i}" for i in range(10)]
    _, results = encode_concurrently(batcher, encoder, texts)
    assert [len(b) for b in encoder.batches] == [1, 4, 4, 2]
    assert sorted(t for b in encoder.batches[1:] for t in b) == sorted(texts)
    assert all(isinstance(v, np.ndarray) for v in results.values())


def test_a_failing_batch_fails_each_of_its_callers_and_the_next_batch_still_runs() -> None:
    encoder = GatedEncoder(HashingTestEncoder())
    calls = {"n": 0}

    def encode(texts: Sequence[str]) -> np.ndarray:
        calls["n"] += 1
        out = encoder.encode(texts)
        if calls["n"] == 2:
            raise RuntimeError("model failed")
        return out

    batcher = NaturalBatcher(encode, max_batch=3)
    texts = [f"query {i}" for i in range(5)]
    first, results = encode_concurrently(batcher, encoder, texts)
    assert isinstance(first, np.ndarray)
    failed = [t for t, v in results.items() if isinstance(v, RuntimeError)]
    assert sorted(failed) == sorted(encoder.batches[1])  # the second batch, all of it
    assert all(isinstance(results[t], np.ndarray) for t in encoder.batches[2])
    assert batcher.submit("after the failure") is not None


def test_concurrent_hybrid_searches_rank_as_lone_ones(tmp_path: Path) -> None:
    encoder = GatedEncoder(HashingTestEncoder())
    ranker = Ranker(tmp_path / "idx", encoder)
    try:
        docs = [
            doc("s", f"r{i}", f"The otter {w} ledger entry {i} balances.")
            for i, w in enumerate(["river", "sea", "night", "bank", "tide", "moss", "stone", "reed"])
        ]
        ranker.apply("s", upserts=docs, removals=[], through_cursor=1)
        queries = ["otter river", "sea ledger", "night entry", "tide moss stone"]

        def ranked(query: str) -> list[tuple[str, float]]:
            out = ranker.search("s", query, HYBRID_PROFILE, valid_as_of_ms=0)
            return [(c.record_id, wire(c)["final_score"]) for c in out.candidates]

        alone = {q: ranked(q) for q in queries}
        encoder.batches.clear()
        encoder.gate.clear()
        encoder.entered.clear()
        together: dict[str, list[tuple[str, float]]] = {}
        lead = threading.Thread(target=lambda: together.update(lead=ranked("the first query")))
        lead.start()
        assert encoder.entered.wait(60)
        threads = [threading.Thread(target=lambda q=q: together.update({q: ranked(q)})) for q in queries]
        for t in threads:
            t.start()
        precision = HYBRID_PROFILE.config.semantic.query_precision  # type: ignore[union-attr]
        wait_until(lambda: queued(ranker._queries[precision]) == len(queries))  # noqa: SLF001
        encoder.gate.set()
        for t in [lead, *threads]:
            t.join(60)
        assert sorted(encoder.batches[1]) == sorted(queries)  # they did share a batch
        assert {q: together[q] for q in queries} == alone
    finally:
        ranker.close()


@pytest.mark.model
def test_the_real_model_gives_a_batched_query_its_lone_vector(minilm) -> None:
    """Parity: a query encoded in a batch with shorter and longer ones (so padded) gets
    the vector a lone encode gives it, to float tolerance."""
    texts = [
        "vehicle ignition failure",
        "what did Okonkwo17 do",
        "ERR_4821x",
        "Why was the billing ledger moved to serialisable transactions?",
        "naïve café — ünïcödé, 日本語のテキスト",
        "the effect of x-rays on bone density " * 8,
    ]
    encoder = GatedEncoder(minilm)
    batcher = NaturalBatcher(encoder.encode, max_batch=16)
    _, results = encode_concurrently(batcher, encoder, texts)
    assert sorted(encoder.batches[1]) == sorted(texts)
    for text in texts:
        lone = minilm.encode([text])[0]
        assert np.allclose(results[text], lone, atol=1e-5)
        assert float(np.dot(results[text], lone)) >= 0.99999


# -- graph searches ---------------------------------------------------------------------


def test_a_batch_of_graph_searches_gives_each_query_its_lone_matches(tmp_path: Path) -> None:
    """Queries of two scopes at two depths and two search depths (ef), graph walks
    and scans of every code, all rescored exactly, searched as one batch: each gets exactly the
    passages and similarities a lone search of its scope gives it."""
    from engram.ranking.profiles import SemanticConfig
    from engram.ranking.semantic import SemanticIndex, _graph_searches, _GraphSearch

    rng = np.random.default_rng(7)
    index = SemanticIndex(tmp_path, 32, graph=SemanticConfig(connectivity=16, expansion_search=64, exact_up_to=0))
    scopes, stored = [], []
    for name in ("a", "b"):
        vectors = rng.standard_normal((2000, 32)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        index.apply(
            name, upserts=[(f"{name}{i}", 0, vectors[i : i + 1]) for i in range(2000)], removals=[], through_cursor=1
        )
        scopes.append(index._scope(name))  # noqa: SLF001
        stored.append(vectors.astype(np.float16).astype(np.float32))  # as the rows hold them
    queries = rng.standard_normal((9, 32)).astype(np.float32)
    requests = [
        _GraphSearch(
            scopes[i % 2],
            queries[i],
            (10, 40)[i % 3 == 0],
            walk=(60, 100)[i % 2],
            ef=(100, 200)[i % 5 < 2],
            exact=i % 4 == 1,
        )
        for i in range(9)
    ]
    together = _graph_searches(requests)
    assert len(together) == len(requests)
    for i, (request, found) in enumerate(zip(requests, together)):
        (alone,) = _graph_searches([request])
        assert len(alone.labels) == request.k
        assert np.array_equal(found.labels, alone.labels)
        assert np.array_equal(found.similarities, alone.similarities)
        exact = stored[i % 2][found.labels.astype(np.int64)] @ request.vector  # rescored exactly
        assert np.allclose(found.similarities, exact, atol=1e-3)
        assert np.all(np.diff(found.similarities) <= 1e-6)  # best first


def test_concurrent_searches_of_one_scope_share_one_graph_search(tmp_path: Path, monkeypatch) -> None:
    """Searches that arrive while a scope's graph search runs are searched together in the
    next one, and each ranks as it does alone."""
    import engram.ranking.semantic as semantic

    runs: list[int] = []
    gate, entered = threading.Event(), threading.Event()
    real = semantic._graph_searches  # noqa: SLF001

    def gated(requests):  # noqa: ANN001, ANN202
        runs.append(len(requests))
        entered.set()
        assert gate.wait(60)
        return real(requests)

    writer = Ranker(tmp_path / "idx", HashingTestEncoder())
    docs = [
        doc("s", f"r{i}", f"The otter {w} ledger entry {i} balances.")
        for i, w in enumerate(["river", "sea", "night", "bank", "tide", "moss", "stone", "reed"])
    ]
    writer.apply("s", upserts=docs, removals=[], through_cursor=1)
    queries = ["otter river", "sea ledger", "night entry", "tide moss stone"]

    def ranked(ranker: Ranker, query: str) -> list[tuple[str, float]]:
        out = ranker.search("s", query, HYBRID_PROFILE, valid_as_of_ms=0)
        return [(c.record_id, wire(c)["final_score"]) for c in out.candidates]

    alone = {q: ranked(writer, q) for q in queries}
    writer.close()
    monkeypatch.setattr(semantic, "_graph_searches", gated)
    ranker = Ranker(tmp_path / "idx", HashingTestEncoder())  # its scope batches through `gated`
    try:
        gate.set()
        ranked(ranker, "warm the scope")
        runs.clear()
        gate.clear()
        entered.clear()
        together: dict[str, list[tuple[str, float]]] = {}
        lead = threading.Thread(target=lambda: together.update(lead=ranked(ranker, "the first query")))
        lead.start()
        assert entered.wait(60)
        threads = [threading.Thread(target=lambda q=q: together.update({q: ranked(ranker, q)})) for q in queries]
        for t in threads:
            t.start()
        batcher = ranker._semantic._scope("s").searches  # noqa: SLF001 - to sequence the test
        wait_until(lambda: queued(batcher) == len(queries))
        gate.set()
        for t in [lead, *threads]:
            t.join(60)
        assert runs == [1, len(queries)]  # the lead alone, then the four together
        assert {q: together[q] for q in queries} == alone
    finally:
        gate.set()
        ranker.close()
