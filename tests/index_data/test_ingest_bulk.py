"""Bulk ingestion: idempotent, resumable, searchable through the agent path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from index_data.ingest import ingest_corpus
from index_data.readers import VectorSource, read_beir, read_jsonl
from index_data.records import IngestRecord, candidate_id_for, record_id_for
from service.engine import CallContext
from service.engine.records import scope_key

SCOPE = ("acme", "kb")
PURPOSE = "purpose:test"


def ctx(scope=SCOPE) -> CallContext:
    return CallContext(tenant=scope[0], workspace=scope[1], principal="alice", agent_id="a", session="s",
                       purpose=PURPOSE)


def corpus(n: int = 30) -> list[IngestRecord]:
    topics = ["ledger database serialisable", "ingress certificate rotation", "wheel packaging manylinux"]
    return [IngestRecord(external_id=f"r{i}", text=f"{topics[i % 3]} note {i}", source_ref=f"kb:{i}")
            for i in range(n)]


def live_count(engine, scope=SCOPE) -> int:
    return sum(1 for _ in engine.parts.store.live_records(scope))


def test_ingest_is_idempotent(engine):
    first = ingest_corpus(engine, SCOPE, corpus(), batch_size=8, progress=False, purpose_ref=PURPOSE)
    assert first.ingested == 30 and first.batches == 4
    cursor = engine.parts.store.scope_cursor(SCOPE)
    assert cursor == 30 and first.cursor_after == 30
    again = ingest_corpus(engine, SCOPE, corpus(), batch_size=8, progress=False, purpose_ref=PURPOSE)
    assert again.ingested == 0 and again.skipped_existing == 30
    assert engine.parts.store.scope_cursor(SCOPE) == cursor
    assert live_count(engine) == 30
    assert engine.parts.ranker.projection_cursor(scope_key(SCOPE)) == {"lexical": 30, "semantic": 30}
    assert engine.verify_journal() == {"acme/kb": True}


def test_ingest_resumes_after_a_crash_between_commit_and_index(engine, monkeypatch):
    ranker = engine.parts.ranker
    real_apply = ranker.apply
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("simulated crash after the second batch committed")
        return real_apply(*args, **kwargs)

    monkeypatch.setattr(ranker, "apply", flaky)
    with pytest.raises(RuntimeError):
        ingest_corpus(engine, SCOPE, corpus(), batch_size=10, progress=False, purpose_ref=PURPOSE)
    assert live_count(engine) == 20  # two batches committed
    assert ranker.projection_cursor(scope_key(SCOPE))["lexical"] == 10  # only one projected
    monkeypatch.setattr(ranker, "apply", real_apply)

    report = ingest_corpus(engine, SCOPE, corpus(), batch_size=10, progress=False, purpose_ref=PURPOSE)
    assert report.ingested == 10 and report.skipped_existing == 20
    assert live_count(engine) == 30
    assert engine.parts.store.scope_cursor(SCOPE) == 30  # one event per record, no duplicate
    assert ranker.projection_cursor(scope_key(SCOPE)) == {"lexical": 30, "semantic": 30}
    hits = ranker.search(scope_key(SCOPE), "certificate rotation", __import__("ranking").LEXICAL_PROFILE,
                         valid_as_of_ms=2_000_000_000_000)
    assert len({c.record_id for c in hits.candidates}) == 10  # each healed record indexed once


def test_ingested_records_are_searchable_and_gettable(engine):
    ingest_corpus(engine, SCOPE, corpus(), progress=False, purpose_ref=PURPOSE)
    for minimum in ("lexical", "lexical_and_semantic"):
        value = engine.execute("engram_memory_search", ctx(), {
            "query": "ingress certificate rotation", "purpose_ref": PURPOSE, "limit": 5,
            "capability_policy": {"minimum_channels": minimum, "network": "forbid"}})
        assert len(value["records"]) == 5
        top = value["records"][0]["record"]
        assert "certificate" in top["components"][0]["text"]
    got = engine.execute("engram_memory_get", ctx(), {"record_id": top["record_id"], "purpose_ref": PURPOSE})
    record = got["record"]
    assert record["state"] == "accepted_current"
    assert record["citations"][0]["source_ref"].startswith("kb:")
    assert record["retention"] == {"derivative_rule": "make-ineligible"}
    assert "actor" in got["redacted_fields"]
    # Another scope sees nothing.
    other = engine.execute("engram_memory_search", ctx(("acme", "other")),
                           {"query": "ingress certificate rotation", "purpose_ref": PURPOSE})
    assert other["records"] == []


def test_record_ids_are_deterministic_and_journal_carries_digests_only(engine):
    records = corpus(3)
    ingest_corpus(engine, SCOPE, records, progress=False, purpose_ref=PURPOSE)
    events = list(engine.parts.store.events(SCOPE))
    assert [e.kind for e in events] == ["record_ingested"] * 3
    assert events[0].subject == record_id_for(SCOPE, records[0], PURPOSE)
    assert events[0].body["candidate_id"] == candidate_id_for(SCOPE, "r0")
    assert events[0].body["external_id"] == "r0"
    assert "ledger" not in json.dumps([e.body for e in events])  # no content in the journal
    row = engine.parts.store.records(SCOPE, [events[0].subject])[events[0].subject]
    body = engine.parts.vault.open_json(row.key_id, row.sealed,
                                        f"record\0{SCOPE[0]}\0{SCOPE[1]}\0{row.record_id}")
    assert body["trust"] == "operator-ingested"
    assert body["authorization_receipt"]["receipt_digest"].startswith("sha256:")


def test_refused_records_are_counted_not_stored(engine):
    bad = [IngestRecord("empty", "   ", "kb:e"),
           IngestRecord("secret", "deploy key AKIAIOSFODNN7EXAMPLE with password=hunter2hunter2", "kb:s"),
           *corpus(2)]
    report = ingest_corpus(engine, SCOPE, bad, progress=False, purpose_ref=PURPOSE)
    assert report.ingested == 2
    assert report.refused.get("empty") == 1 and report.refused.get("secret") == 1


def test_precomputed_vectors_one_row_and_passage_offsets(engine, encoder):
    records = corpus(12)
    vectors = encoder.encode([r.text for r in records])
    report = ingest_corpus(engine, SCOPE, records, vectors=vectors, batch_size=5, progress=False,
                           purpose_ref=PURPOSE, encoder=None)
    assert report.vectors == "precomputed" and report.ingested == 12
    assert engine.parts.ranker.projection_cursor(scope_key(SCOPE))["semantic"] == 12
    # Passage-aligned form: two rows for the first document, one for the rest.
    rows = np.vstack([vectors[:1], vectors])
    source = VectorSource(rows, offsets=np.array([0, 2, *range(3, 14)]))
    assert len(source) == 12 and source.get(0).shape == (2, encoder.dim)
    report = ingest_corpus(engine, ("acme", "kb2"), records, vectors=source, progress=False,
                           purpose_ref=PURPOSE, encoder=None)
    assert report.ingested == 12


def test_readers(tiny_beir: Path, tmp_path: Path):
    docs = list(read_beir(tiny_beir))
    assert len(docs) == 30
    assert docs[0].text.startswith("note 0 on postgresql\n")
    assert docs[0].source_ref == "beir:tiny/d0" and docs[0].locator_scheme == "beir"
    path = tmp_path / "recs.jsonl"
    path.write_text(json.dumps({"id": "x1", "text": "hello world", "valid_time_ms": 5}) + "\n")
    (rec,) = list(read_jsonl(path))
    assert rec.external_id == "x1" and rec.valid_time_ms == 5 and rec.source_ref == "jsonl:recs/x1"


def test_cli_ingest(tiny_beir: Path, tmp_path: Path):
    from typer.testing import CliRunner

    from index_data.cli import app

    args = [str(tiny_beir), "--data-dir", str(tmp_path / "d"), "--tenant", "t", "--workspace", "w",
            "--no-model", "--no-progress", "--batch-size", "7"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["ingested"] == 30
    again = CliRunner().invoke(app, args)
    assert json.loads(again.output)["skipped_existing"] == 30
