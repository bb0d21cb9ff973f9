"""A new replica joins a PostgreSQL deployment from a peer's exported vectors, without
re-embedding: `engram admin export-vectors` through replica A's operator socket, then
replica B warms up with `seed_vectors` and an encoder that refuses every text but the
queries and the one record admitted after the export. B answers the same searches as
A, holds no byte of a record forgotten after the export, and embeds only that late
record. A seed of another encoder or windowing is ignored with a warning (all embedded),
and a record whose passage texts do not match its seed digest is embedded."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from engine_support import (
    HashingTestEncoder,
    accept,
    context,
    files_containing,
    forget,
    open_engine,
    search_ids,
)
from typer.testing import CliRunner

from engram.index_data.ingest import ingest_corpus
from engram.index_data.records import IngestRecord
from engram.ranking import passages
from engram.service.cli import app
from engram.service.engine.records import scope_key
from engram.service.operator.channel import OperatorChannel

SCOPE = ("acme", "main")
PURPOSE = "purpose:test"
#: 300 made-up words, 4 to 10 per record: a query of two or three matches well under the
#: lexical channel's 200 candidates, so no tie is cut by the candidate cap.
VOCAB = [
    f"{a}{b}{c}"
    for a in ("bra", "cle", "dro", "fen", "gli", "hor")
    for b in ("ta", "mo", "vi", "ra", "po")
    for c in ("n", "s", "x", "l", "k", "d", "g", "r", "m", "t")
]
QUERIES = [
    "bratan clemos",
    "drovix fenral glipok",
    "horpod bramot",
    "clevid drotag fenmon",
    "glirak horvix",
    "fenpog bravin clerat",
    "dromok glitas",
]
FORGOTTEN_WORD = "zanzibarquokka"
KEPT_WORD = "zanzibarwalrus"  # the same kind of word in a record that stays: the scans can find one
LATE_TEXT = "a late decision about the wombatgrid rollout"


def corpus(n: int) -> list[IngestRecord]:
    rng = random.Random(7)
    return [
        IngestRecord(
            external_id=f"r{i}",
            source_ref=f"kb:{i}",
            text=f"note {i} "
            + " ".join(rng.sample(VOCAB, rng.randint(4, 10)))
            + (f" {FORGOTTEN_WORD}" if i == 3 else f" {KEPT_WORD}" if i == 5 else ""),
        )
        for i in range(n)
    ]


class OnlyThese:
    """A real encoder that raises on any text outside ``allowed`` and records every text
    it was asked to encode: a replica holding it can embed nothing else."""

    def __init__(self, inner: HashingTestEncoder, allowed: set[str], model_id: str | None = None) -> None:
        self.inner, self.allowed, self.asked = inner, allowed, []
        self.dim = inner.dim
        self.model_id = model_id or inner.model_id

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.asked.extend(texts)
        refused = [t for t in texts if t not in self.allowed]
        if refused:
            raise RuntimeError(f"asked to embed {len(refused)} text(s) this replica must not embed")
        return self.inner.encode(texts)


def answers(engine, queries: list[str]) -> list[list[str]]:
    ctx = context(*SCOPE)
    return [
        search_ids(engine, ctx, q, limit=10, capability_policy={"minimum_channels": minimum, "network": "forbid"})
        for minimum in ("lexical", "lexical_and_semantic")
        for q in queries
    ]


def export_through_socket(engine, data_dir: Path, out: Path) -> dict:
    """`engram admin export-vectors OUT -d DATA_DIR`, answered by the live engine's channel."""
    channel = OperatorChannel(engine, data_dir).start()
    try:
        result = CliRunner().invoke(app, ["admin", "export-vectors", str(out), "-d", str(data_dir)])
    finally:
        channel.close()
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def f16_rows(vectors: np.ndarray) -> list[bytes]:
    return [np.asarray(row, dtype=np.float16).tobytes() for row in vectors]


@pytest.fixture
def replica_a(tmp_path: Path, database_url: str):
    engine = open_engine(tmp_path / "a", database_url=database_url, key_dir=tmp_path / "keys")
    engine.operator.set_tenant_enabled(SCOPE[0], True)
    yield engine
    engine.close()


def test_a_seeded_replica_answers_like_its_peer_and_embeds_only_what_came_after(
    tmp_path: Path, database_url: str, replica_a, caplog: pytest.LogCaptureFixture
) -> None:
    a, ctx, key = replica_a, context(*SCOPE), scope_key(SCOPE)
    ingest_corpus(a, SCOPE, corpus(2000), progress=False, purpose_ref=PURPOSE)
    doomed = [r.record_id for r in a.operator.export_records(SCOPE) if FORGOTTEN_WORD in json.dumps(r.payload)]
    assert len(doomed) == 1
    doomed_rows = f16_rows(a.ranker.passage_vectors(key, doomed)[0])
    seed = tmp_path / "seed"
    summary = export_through_socket(a, tmp_path / "a", seed)
    assert summary["records"] == 2000 and summary["scopes"] == 1 and summary["left_out"] == 0
    assert (seed.stat().st_mode & 0o777) == 0o700
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in seed.iterdir())

    # After the export: one record forgotten, one admitted.
    forget(a, ctx, doomed[0])
    # In a scope this large the forget answers pending; purge now, so that A's indexes
    # (and so its BM25 statistics) hold what B's will, as they do once the purge has run.
    a.operator.sweep_invalidations()
    late = accept(a, ctx, LATE_TEXT)
    late_windows = passages(LATE_TEXT)
    expected = answers(a, QUERIES + ["wombatgrid rollout"])

    guard = OnlyThese(HashingTestEncoder(), set(QUERIES) | {"wombatgrid rollout", *late_windows})
    with caplog.at_level(logging.INFO, logger="engram"):
        b = open_engine(
            tmp_path / "b", database_url=database_url, key_dir=tmp_path / "keys", encoder=guard, seed_vectors=seed
        )
    try:
        assert guard.asked == late_windows  # the warm-up embedded the late record, and nothing else
        assert "1999 records' vectors taken from the seed, 1 embedded" in caplog.text
        assert b.deps.ranker.semantic_health(key) is None
        assert b.deps.projector.lag(SCOPE) == {"lexical": 0, "semantic": 0}
        assert answers(b, QUERIES + ["wombatgrid rollout"]) == expected
        assert search_ids(b, ctx, "wombatgrid rollout")[0] == late
        assert doomed[0] not in search_ids(b, ctx, FORGOTTEN_WORD, limit=50)
        b.deps.ranker.checkpoint()
        b_dir = tmp_path / "b"
        assert files_containing(b_dir, FORGOTTEN_WORD.encode()) == []
        assert all(files_containing(b_dir, row) == [] for row in doomed_rows)
        # ... while the same scan finds a kept record's words and vectors there.
        kept = next(r.record_id for r in a.operator.export_records(SCOPE) if r.record_id != late)
        assert files_containing(b_dir, KEPT_WORD.encode()) != []
        assert all(files_containing(b_dir, row) for row in f16_rows(a.ranker.passage_vectors(key, [kept])[0]))
        # The seed itself is the operator's file outside B: it still holds the doomed row.
        assert any(files_containing(seed, row) for row in doomed_rows)
    finally:
        b.close()


@pytest.mark.parametrize("mismatch", ["encoder", "windowing"])
def test_a_seed_of_another_vector_space_is_ignored_and_everything_embedded(
    tmp_path: Path, database_url: str, replica_a, caplog: pytest.LogCaptureFixture, mismatch: str
) -> None:
    records = corpus(60)
    ingest_corpus(replica_a, SCOPE, records, progress=False, purpose_ref=PURPOSE)
    seed = tmp_path / "seed"
    replica_a.operator.export_vectors(seed)
    model_id = None
    if mismatch == "encoder":
        model_id = "test/another-model"
    else:
        header = json.loads((seed / "seed.json").read_text())
        (seed / "seed.json").write_text(json.dumps({**header, "windowing": "words100-stride50-max2-tail10"}))
    encoder = OnlyThese(
        HashingTestEncoder(), {w for r in records for w in passages(r.text)} | set(QUERIES), model_id=model_id
    )
    with caplog.at_level(logging.INFO, logger="engram"):
        b = open_engine(
            tmp_path / "b", database_url=database_url, key_dir=tmp_path / "keys", encoder=encoder, seed_vectors=seed
        )
    try:
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "ignored" in r.getMessage()]
        assert len(warnings) == 1 and str(seed) in warnings[0].getMessage()
        assert "0 records' vectors taken from the seed, 60 embedded" in caplog.text
        assert sorted(encoder.asked) == sorted(w for r in records for w in passages(r.text))
        assert answers(b, QUERIES) == answers(replica_a, QUERIES)
    finally:
        b.close()


def test_a_record_whose_texts_differ_from_its_seed_digest_is_embedded(
    tmp_path: Path, database_url: str, replica_a, caplog: pytest.LogCaptureFixture
) -> None:
    records = corpus(40)
    ingest_corpus(replica_a, SCOPE, records, progress=False, purpose_ref=PURPOSE)
    seed = tmp_path / "seed"
    replica_a.operator.export_vectors(seed)
    key = scope_key(SCOPE)
    digests_file = seed / f"{key}.digests.npy"
    digests = np.load(digests_file)
    digests[0, 0] ^= 0xFF  # the first record's digest no longer names its passage texts
    np.save(digests_file, digests)
    first = np.load(seed / f"{key}.ids.npy")[0].decode()
    (body,) = [r for r in replica_a.operator.export_records(SCOPE) if r.record_id == first]
    text = next(c["text"] for c in body.payload["components"])
    encoder = OnlyThese(HashingTestEncoder(), set(passages(text)) | set(QUERIES))
    with caplog.at_level(logging.INFO, logger="engram"):
        b = open_engine(
            tmp_path / "b", database_url=database_url, key_dir=tmp_path / "keys", encoder=encoder, seed_vectors=seed
        )
    try:
        assert encoder.asked == passages(text)
        assert "39 records' vectors taken from the seed, 1 embedded" in caplog.text
        assert answers(b, QUERIES) == answers(replica_a, QUERIES)
    finally:
        b.close()
