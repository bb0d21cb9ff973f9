"""Bulk ingestion: idempotent, resumable, searchable through the agent path."""

from __future__ import annotations

import functools
import gc
import json
from pathlib import Path

import numpy as np
import pytest

from engram.index_data.ingest import ingest_corpus
from engram.index_data.readers import VectorSource, read_beir, read_jsonl
from engram.index_data.records import IngestRecord, build_payload, candidate_id_for, record_id_for
from engram.ranking import LEXICAL_PROFILE
from engram.service.engine import CallContext, Confirmation
from engram.service.engine.clock import now_ms
from engram.service.engine.gates import operation_digest
from engram.service.engine.records import scope_key
from engram.service.store import StoreAddress

SCOPE = ("acme", "kb")
PURPOSE = "purpose:test"


def ctx(scope=SCOPE) -> CallContext:
    return CallContext(
        tenant=scope[0], workspace=scope[1], principal="alice", agent_id="a", session="s", purpose=PURPOSE
    )


def corpus(n: int = 30) -> list[IngestRecord]:
    topics = ["ledger database serialisable", "ingress certificate rotation", "wheel packaging manylinux"]
    return [IngestRecord(external_id=f"r{i}", text=f"{topics[i % 3]} note {i}", source_ref=f"kb:{i}") for i in range(n)]


def live_count(engine, scope=SCOPE) -> int:
    return sum(1 for _ in engine.deps.store.live_records(scope))


def test_ingest_is_idempotent(engine):
    first = ingest_corpus(engine, SCOPE, corpus(), batch_size=8, progress=False, purpose_ref=PURPOSE)
    assert first.ingested == 30 and first.batches == 4
    cursor = engine.deps.store.scope_cursor(SCOPE)
    assert cursor == 30 and first.cursor_after == 30
    again = ingest_corpus(engine, SCOPE, corpus(), batch_size=8, progress=False, purpose_ref=PURPOSE)
    assert again.ingested == 0 and again.skipped_existing == 30
    assert engine.deps.store.scope_cursor(SCOPE) == cursor
    assert live_count(engine) == 30
    assert engine.deps.ranker.projection_cursor(scope_key(SCOPE)) == {"lexical": 30, "semantic": 30}
    assert engine.operator.verify_journal() == {"acme/kb": True}


def test_a_load_gives_the_cyclic_collector_back_as_it_found_it(engine):
    """A load holds the process's older objects out of the collector while it runs, and
    lets them back in when it ends, however it ends."""
    gc.collect()
    before = gc.get_freeze_count()
    seen = []
    ingest_corpus(
        engine,
        SCOPE,
        corpus(),
        batch_size=8,
        progress=False,
        purpose_ref=PURPOSE,
        on_batch=lambda _: seen.append(gc.get_freeze_count()),
    )
    assert seen and min(seen) > before
    assert gc.get_freeze_count() == before

    def fail(_):
        raise RuntimeError("stopped")

    with pytest.raises(RuntimeError, match="stopped"):
        ingest_corpus(
            engine, ("acme", "other"), corpus(), batch_size=8, progress=False, purpose_ref=PURPOSE, on_batch=fail
        )
    assert gc.get_freeze_count() == before


def test_ingest_resumes_after_a_crash_between_commit_and_index(engine, monkeypatch):
    ranker = engine.deps.ranker
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
    # The second batch committed; the third may have too, beside its failing index.
    committed = live_count(engine)
    assert committed in (20, 30)
    assert ranker.projection_cursor(scope_key(SCOPE))["lexical"] == 10  # only one projected
    monkeypatch.setattr(ranker, "apply", real_apply)

    report = ingest_corpus(engine, SCOPE, corpus(), batch_size=10, progress=False, purpose_ref=PURPOSE)
    assert report.ingested == 30 - committed and report.skipped_existing == committed
    assert live_count(engine) == 30
    assert engine.deps.store.scope_cursor(SCOPE) == 30  # one event per record, no duplicate
    assert ranker.projection_cursor(scope_key(SCOPE)) == {"lexical": 30, "semantic": 30}
    hits = ranker.search(scope_key(SCOPE), "certificate rotation", LEXICAL_PROFILE, valid_as_of_ms=2_000_000_000_000)
    assert len({c.record_id for c in hits.candidates}) == 10  # each healed record indexed once


def test_ingested_records_are_searchable_and_gettable(engine):
    ingest_corpus(engine, SCOPE, corpus(), progress=False, purpose_ref=PURPOSE)
    for minimum in ("lexical", "lexical_and_semantic"):
        value = engine.execute(
            "engram_memory_search",
            ctx(),
            {
                "query": "ingress certificate rotation",
                "purpose_ref": PURPOSE,
                "limit": 5,
                "capability_policy": {"minimum_channels": minimum, "network": "forbid"},
            },
        )
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
    other = engine.execute(
        "engram_memory_search",
        ctx(("acme", "other")),
        {"query": "ingress certificate rotation", "purpose_ref": PURPOSE},
    )
    assert other["records"] == []


def _sealed_body(engine, record_id: str) -> dict:
    row = engine.deps.store.records(SCOPE, [record_id])[record_id]
    return engine.deps.vault.open_json(row.key_id, row.sealed, f"record\0{SCOPE[0]}\0{SCOPE[1]}\0{record_id}")


def _admit(engine, text: str) -> str:
    """An agent's capture admitted by the host's policy: the path ingestion must match."""
    agent = ctx()
    # The payload ingestion builds also passes the contract's capture validation.
    payload, evidence = build_payload(IngestRecord("agent-1", text, "doc:agent-note"), PURPOSE)
    captured = engine.execute(
        "engram_memory_capture",
        agent,
        {"idempotency_key": "idem-capture-0001", "payload": payload, "evidence": evidence},
    )
    admitted = engine.execute(
        "engram_memory_request_admission",
        agent,
        {"candidate_id": captured["candidate_id"], "idempotency_key": "idem-admit-00001"},
    )
    return admitted["outcome"]["record_id"]


def test_ingested_records_are_shaped_like_admitted_ones(engine):
    records = corpus(3)
    ingest_corpus(engine, SCOPE, records, progress=False, purpose_ref=PURPOSE)
    admitted_id = _admit(engine, "an agent's own note about ledgers")
    events = list(engine.deps.store.events(SCOPE))
    ingested = [e for e in events[:3]]
    admitted = events[-1]
    # One event kind and one event shape for both paths; digests only, no content.
    assert {e.kind for e in ingested} == {admitted.kind} == {"record_accepted"}
    assert all(set(e.body) == set(admitted.body) for e in ingested)
    assert ingested[0].subject == record_id_for(SCOPE, records[0], PURPOSE)
    assert ingested[0].body["candidate_id"] == candidate_id_for(SCOPE, "r0")
    assert "ledger" not in json.dumps([e.body for e in events])
    # The same sealed body shape; only the stated trust class and the receipts differ.
    body, agent_body = _sealed_body(engine, ingested[0].subject), _sealed_body(engine, admitted_id)
    assert set(body) == set(agent_body)
    assert (body["trust"], agent_body["trust"]) == ("operator-ingested", "asserted")
    assert ingested[0].body["trust"] == "operator-ingested" and admitted.body["trust"] == "asserted"
    # Receipts are kept once and referenced by digest: one authorisation and one decision
    # for the whole batch, each readable back under its digest.
    bodies = [_sealed_body(engine, e.subject) for e in ingested]
    assert len({b["authorization_receipt_digest"] for b in bodies}) == 1
    assert len({b["decision_receipt_digest"] for b in bodies}) == 1
    auth = engine.operator.receipt(body["authorization_receipt_digest"])
    assert auth["tool"] == "engram_operator_ingest" and auth["receipt_digest"] == body["authorization_receipt_digest"]
    assert engine.operator.receipt(body["decision_receipt_digest"])["policy_id"] == "engram.operator-ingest"
    agent_auth = engine.operator.receipt(agent_body["authorization_receipt_digest"])
    assert agent_auth["tool"] == "engram_memory_capture" and agent_auth["principal"] == "alice"
    assert "authorization_receipt" not in body and "authorization_receipt" not in agent_body


def test_forgotten_content_is_not_revived_by_a_reload(engine):
    records = corpus(4)
    ingest_corpus(engine, SCOPE, records, progress=False, purpose_ref=PURPOSE)
    target = record_id_for(SCOPE, records[1], PURPOSE)
    args = {"record_id": target, "idempotency_key": "idem-forget-00001", "reason_ref": "reason:obsolete"}
    now = now_ms()
    human = Confirmation(
        ref="conf-1",
        capability="engram_memory_forget",
        target=target,
        operation_digest=operation_digest("engram_memory_forget", args),
        approved_at_ms=now,
        expires_at_ms=now + 60_000,
    )
    forgotten = engine.execute("engram_memory_forget", CallContext(**{**ctx().__dict__, "confirmation": human}), args)
    assert forgotten["receipt"]["to_state"] == "tombstoned"
    again = ingest_corpus(engine, SCOPE, records, progress=False, purpose_ref=PURPOSE)
    assert again.ingested == 0 and again.skipped_existing == 4
    assert engine.deps.store.records(SCOPE, [target])[target].state == "tombstoned"
    # The same content under another source id is refused, not loaded beside the tombstone.
    clone = IngestRecord(
        external_id="clone",
        text=records[1].text,
        source_ref=records[1].source_ref,
        locator_value=records[1].external_id,
    )
    report = ingest_corpus(engine, SCOPE, [clone], progress=False, purpose_ref=PURPOSE)
    assert report.ingested == 0 and report.refused == {"forgotten": 1}


def test_refused_records_are_counted_not_stored(engine):
    bad = [
        IngestRecord("empty", "   ", "kb:e"),
        IngestRecord("secret", "deploy key AKIAIOSFODNN7EXAMPLE with password=hunter2hunter2", "kb:s"),
        *corpus(2),
    ]
    report = ingest_corpus(engine, SCOPE, bad, progress=False, purpose_ref=PURPOSE)
    assert report.ingested == 2
    assert report.refused.get("empty") == 1 and report.refused.get("secret") == 1


@pytest.mark.parametrize("batch_size", [1, 8])
def test_the_same_content_twice_is_one_record_in_one_batch_or_two(engine, batch_size):
    """Two source documents with the same payload (same text, source and locator under
    different ids) make one current record, whether they share a batch or not."""
    twins = [IngestRecord(f"twin{i}", "ledger note kept twice", "kb:twin", locator_value="twin") for i in range(2)]
    report = ingest_corpus(
        engine, SCOPE, [*twins, *corpus(3)], batch_size=batch_size, progress=False, purpose_ref=PURPOSE
    )
    assert (report.ingested, report.skipped_existing) == (4, 1)
    assert live_count(engine) == 4


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_batches_written_in_a_worker_process_load_the_same_records(tmp_path: Path, encoder, store, request):
    """A load whose batches are written in a worker process (payloads, secret scan,
    digests, sealing, the transaction) writes the same records, refuses the same
    documents, is as idempotent and is as searchable as one written on the loading
    thread."""
    from engram.service.engine import Engine

    records = [
        IngestRecord("empty", "   ", "kb:e"),
        IngestRecord("secret", "deploy key AKIAIOSFODNN7EXAMPLE with password=hunter2hunter2", "kb:s"),
        *[IngestRecord(f"twin{i}", "ledger note kept twice", "kb:twin", locator_value="twin") for i in range(2)],
        *corpus(40),
    ]
    loaded = {}
    for writers in (0, 1, 2):  # on the loading thread; one worker; two, committing in turn
        worker = writers > 0
        url = request.getfixturevalue("postgres_cluster").create_database() if store == "postgres" else None
        data_dir = tmp_path / f"writers-{writers}"
        eng = Engine.open(data_dir, encoder=encoder, store=StoreAddress.resolve(data_dir, url))
        load = functools.partial(
            ingest_corpus, eng, SCOPE, records, batch_size=7, progress=False, purpose_ref=PURPOSE, worker=worker
        )
        try:
            report = load(writers=writers or None)
            again = load(writers=writers or None)
            assert (again.ingested, again.skipped_existing) == (0, 42)  # the twin again too
            assert (report.worker_cpu_seconds > 0) is worker  # the workers' CPU, counted apart
            assert eng.operator.verify_journal() == {"acme/kb": True}
            ids = sorted(r.record_id for r in eng.deps.store.live_records(SCOPE))
            found = [
                hit["record"]
                for hit in eng.execute(
                    "engram_memory_search",
                    ctx(),
                    {"query": "ingress certificate rotation", "purpose_ref": PURPOSE, "limit": 5},
                )["records"]
            ]
            for hit in found:  # each body sealed by the writer opens in the engine
                got = eng.execute("engram_memory_get", ctx(), {"record_id": hit["record_id"], "purpose_ref": PURPOSE})
                assert got["record"]["components"] == hit["components"]
            hits = [hit["record_id"] for hit in found]
            loaded[writers] = (report.ingested, report.skipped_existing, report.refused, report.batches, ids, hits)
        finally:
            eng.close()
    assert loaded[0] == loaded[1] == loaded[2]
    assert loaded[1][:4] == (41, 1, {"empty": 1, "secret": 1}, 7)


@pytest.mark.parametrize("writers", [1, 2])
def test_a_failing_worker_process_stops_the_load(tmp_path: Path, encoder, writers):
    """A batch a worker cannot examine fails the load with the worker's error: nothing
    from it or after it is written (by that worker or another), and a rerun finishes
    the load."""
    from engram.service.engine import Engine

    broken = IngestRecord("broken", "ledger note", "kb:b", valid_time_ms="not a time")  # type: ignore[arg-type]
    eng = Engine.open(tmp_path / "d", encoder=encoder)
    load = functools.partial(
        ingest_corpus, eng, SCOPE, batch_size=10, progress=False, purpose_ref=PURPOSE, worker=True, writers=writers
    )
    try:
        with pytest.raises(ValueError):
            load([*corpus(10), broken, *corpus(60)[10:]])
        assert live_count(eng) <= 10  # at most the batch before the broken one
        report = load(corpus(60))
        assert report.ingested + report.skipped_existing == 60 and live_count(eng) == 60
        assert eng.operator.verify_journal() == {"acme/kb": True}
    finally:
        eng.close()


def test_a_bulk_load_indexes_batches_in_commit_order(engine):
    """A batch indexed after a later one is refused (the indexes would skip it as a gap);
    in order, both are indexed."""
    from engram.index_data.writer import chunks, examine_chunk
    from engram.service.engine import operator_context

    operator = operator_context(SCOPE, "operator:test", "ingest_test", PURPOSE)
    writer = engine.batch_writer()
    first, second = (
        writer.prepare(examine_chunk(SCOPE, PURPOSE, True, chunk).batch) for chunk in chunks(corpus(20), 10)
    )
    with engine.bulk_load(SCOPE) as load:
        one, two = writer.commit(first, operator), writer.commit(second, operator)
        load.index(two)
        with pytest.raises(ValueError, match="commit order|order they were committed"):
            load.index(one)
    assert engine.deps.ranker.projection_cursor(scope_key(SCOPE))["lexical"] == 0  # the second was a gap
    engine.catch_up(SCOPE)
    assert engine.deps.ranker.projection_cursor(scope_key(SCOPE)) == {"lexical": 20, "semantic": 20}


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
@pytest.mark.parametrize("writers", [1, 2])
def test_the_writing_worker_ends_with_a_killed_load(tmp_path: Path, writers: int):
    """SIGKILL of the loading process ends its writing workers (and the start method's
    server) too, instead of leaving them waiting for work (or for a turn) forever; what
    they committed is indexed when the data directory opens again."""
    import os
    import signal
    import subprocess
    import sys
    import time
    import uuid

    mark = f"ENGRAM_TEST_MARK={uuid.uuid4().hex}".encode()

    def marked() -> set[int]:
        pids = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if mark in (entry / "environ").read_bytes().split(b"\0"):
                        pids.add(int(entry.name))
                except OSError:
                    continue  # ended, or not ours to read
        return pids

    name, value = mark.decode().split("=")
    loader = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "ingest_kill_worker.py"), str(tmp_path / "d"), str(writers)],
        stdout=subprocess.PIPE,
        env={**os.environ, name: value},
    )
    try:
        assert loader.stdout is not None and loader.stdout.readline().strip() == b"ready"
        helpers = marked() - {loader.pid}
        assert helpers  # the workers (and the forkserver) run beside the loader
    finally:
        loader.send_signal(signal.SIGKILL)
        loader.wait()
    deadline = time.monotonic() + 60
    while marked() & helpers and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not marked() & helpers

    from engram.service.engine import Engine

    eng = Engine.open(tmp_path / "d", load_model=False)
    try:
        cursor = eng.scope_cursor(SCOPE)
        assert cursor >= 50 and cursor % 50 == 0  # whole batches: the first, and any written ahead
        assert live_count(eng) == cursor and eng.operator.verify_journal() == {"acme/kb": True}
        assert eng.deps.ranker.projection_cursor(scope_key(SCOPE))["lexical"] == cursor
    finally:
        eng.close()


def test_precomputed_vectors_one_row_and_passage_offsets(engine, encoder):
    records = corpus(12)
    vectors = encoder.encode([r.text for r in records])
    report = ingest_corpus(engine, SCOPE, records, vectors=vectors, batch_size=5, progress=False, purpose_ref=PURPOSE)
    assert report.vectors == "precomputed" and report.ingested == 12
    assert engine.deps.ranker.projection_cursor(scope_key(SCOPE))["semantic"] == 12
    # Passage-aligned form: two rows for the first document, one for the rest.
    rows = np.vstack([vectors[:1], vectors])
    source = VectorSource(rows, offsets=np.array([0, 2, *range(3, 14)]))
    assert len(source) == 12 and source.rows([0])[0].shape == (2, encoder.dim)
    report = ingest_corpus(engine, ("acme", "kb2"), records, vectors=source, progress=False, purpose_ref=PURPOSE)
    assert report.ingested == 12


def test_a_load_with_nothing_to_embed_commits_larger_batches(engine, encoder):
    """Per batch a load pays a transaction, a Tantivy commit and a usearch add whatever
    the batch holds: with precomputed vectors 600 records are one batch; embedded here,
    the encoder's pace keeps batches of 512."""
    records = [IngestRecord(external_id=f"b{i}", text=f"batch sizing note {i}", source_ref="kb") for i in range(600)]
    report = ingest_corpus(
        engine, SCOPE, records, vectors=encoder.encode([r.text for r in records]), progress=False, worker=False
    )
    assert (report.ingested, report.batches) == (600, 1)
    assert engine.deps.ranker.projection_cursor(scope_key(SCOPE)) == {"lexical": 600, "semantic": 600}
    embedded = ingest_corpus(engine, ("acme", "kb2"), records, progress=False, worker=False)
    assert (embedded.ingested, embedded.batches, embedded.vectors) == (600, 2, "encoder")


def test_readers(tiny_beir: Path, tmp_path: Path):
    docs = list(read_beir(tiny_beir))
    assert len(docs) == 30
    assert docs[0].text.startswith("note 0 on postgresql\n")
    assert docs[0].source_ref == "beir:tiny/d0" and docs[0].locator_scheme == "beir"
    path = tmp_path / "recs.jsonl"
    path.write_text(json.dumps({"id": "x1", "text": "hello world", "valid_time_ms": 5}) + "\n")
    (rec,) = list(read_jsonl(path))
    assert rec.external_id == "x1" and rec.valid_time_ms == 5 and rec.source_ref == "jsonl:recs/x1"


def test_beir_metadata_valid_time(tmp_path: Path, engine):
    """A BEIR document's ``metadata.valid_time`` (a session's date) is the record's valid
    time, as search returns it; a document without one keeps the fixed default."""
    from engram.index_data.records import DEFAULT_VALID_TIME_MS

    d = tmp_path / "dated"
    d.mkdir()
    (d / "corpus.jsonl").write_text(
        "\n".join(
            json.dumps(doc)
            for doc in [
                {"_id": "c:D1:1", "text": "Ann: I adopted a puppy", "metadata": {"valid_time": "2023-05-08T13:56:00Z"}},
                {
                    "_id": "c:D2:1",
                    "text": "Ann: the puppy learned to sit",
                    "metadata": {"valid_time": "2023-06-01T09:00:00"},
                },
                {"_id": "c:D3:1", "text": "Ann: no date on this puppy"},
            ]
        )
        + "\n"
    )
    docs = list(read_beir(d))
    assert [doc.valid_time_ms for doc in docs] == [1_683_554_160_000, 1_685_610_000_000, DEFAULT_VALID_TIME_MS]
    ingest_corpus(engine, ("acme", "dated"), docs, progress=False, purpose_ref=PURPOSE)
    value = engine.execute(
        "engram_memory_search",
        ctx(("acme", "dated")),
        {
            "query": "puppy",
            "purpose_ref": PURPOSE,
            "limit": 5,
            "capability_policy": {"minimum_channels": "lexical", "network": "forbid"},
        },
    )
    times = {p["record"]["citations"][0]["source_ref"]: p["record"]["valid_time"]["t"] for p in value["records"]}
    assert times == {
        "beir:dated/c:D1:1": 1_683_554_160_000,
        "beir:dated/c:D2:1": 1_685_610_000_000,
        "beir:dated/c:D3:1": DEFAULT_VALID_TIME_MS,
    }


def test_cli_ingest(tiny_beir: Path, tmp_path: Path):
    from typer.testing import CliRunner

    from engram.index_data.cli import app

    args = [
        str(tiny_beir),
        "--data-dir",
        str(tmp_path / "d"),
        "--tenant",
        "t",
        "--workspace",
        "w",
        "--no-model",
        "--no-progress",
        "--batch-size",
        "7",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ingested"] == 30
    # Ingest does not opt the tenant in, and says how to (agents' calls are refused until then).
    assert "tenant 't' is not opted in" in result.stderr and "engram admin tenant enable t" in result.stderr
    from engram.service.cli import app as engram

    enabled = CliRunner().invoke(engram, ["admin", "tenant", "enable", "t", "--data-dir", str(tmp_path / "d")])
    assert enabled.exit_code == 0, enabled.output
    again = CliRunner().invoke(app, args)
    assert json.loads(again.stdout)["skipped_existing"] == 30
    assert "not opted in" not in again.stderr


class _SignallingEncoder:
    """The test encoder, announcing each call (to observe the pipeline's stages)."""

    def __init__(self, inner) -> None:
        self.inner, self.dim, self.calls = inner, inner.dim, 0
        self.second_call = __import__("threading").Event()

    def encode(self, texts):
        self.calls += 1
        if self.calls == 2:
            self.second_call.set()
        return self.inner.encode(texts)


def test_embedding_overlaps_writing(tmp_path: Path, encoder):
    """Batch 2 is embedded while batch 1 is still being written: the write stage of
    batch 1 waits for the encoder's second call, which a sequential loop never makes."""
    from engram.service.engine import Engine

    signalling = _SignallingEncoder(encoder)
    eng = Engine.open(tmp_path / "d", encoder=signalling)
    overlapped: list[bool] = []

    def first_batch_written(report) -> None:
        if report.batches == 1:
            overlapped.append(signalling.second_call.wait(timeout=30))

    try:
        report = ingest_corpus(
            eng, SCOPE, corpus(20), batch_size=10, progress=False, purpose_ref=PURPOSE, on_batch=first_batch_written
        )
    finally:
        eng.close()
    assert overlapped == [True] and report.ingested == 20 and report.vectors == "encoder"


def test_a_failing_stage_stops_the_load_and_a_rerun_finishes(engine):
    def fail_after_first(report) -> None:
        if report.batches == 1:
            raise RuntimeError("operator interrupted")

    with pytest.raises(RuntimeError, match="operator interrupted"):
        ingest_corpus(
            engine, SCOPE, corpus(30), batch_size=10, progress=False, purpose_ref=PURPOSE, on_batch=fail_after_first
        )
    # The first batch was indexed; the writer may have committed the next ones ahead of it.
    committed = live_count(engine)
    assert committed in (10, 20, 30)
    assert engine.deps.ranker.projection_cursor(scope_key(SCOPE))["lexical"] == 10
    report = ingest_corpus(engine, SCOPE, corpus(30), batch_size=10, progress=False, purpose_ref=PURPOSE)
    assert (report.ingested, report.skipped_existing) == (30 - committed, committed)
    assert engine.deps.ranker.projection_cursor(scope_key(SCOPE)) == {"lexical": 30, "semantic": 30}
    assert engine.operator.verify_journal() == {"acme/kb": True}


def test_ingest_runs_on_postgresql_like_on_sqlite(tmp_path: Path, encoder, postgres_cluster):
    """Batch admission goes through the Store protocol only: the same load on PostgreSQL
    gives the same records, journal shapes and answers as on SQLite."""
    from engram.service.engine import Engine

    url = postgres_cluster.create_database("ingest")
    results = []
    for name, kwargs in (("sqlite", {}), ("postgres", {"store": StoreAddress(url)})):
        eng = Engine.open(tmp_path / name, encoder=encoder, **kwargs)
        try:
            first = ingest_corpus(eng, SCOPE, corpus(), batch_size=8, progress=False, purpose_ref=PURPOSE)
            again = ingest_corpus(eng, SCOPE, corpus(), batch_size=8, progress=False, purpose_ref=PURPOSE)
            exported = [(r.record_id, r.payload, r.trust) for r in eng.operator.export_records(SCOPE)]
            kinds = [(e.kind, sorted(e.body)) for e in eng.deps.store.events(SCOPE)]
            hits = [
                p["record"]["record_id"]
                for p in eng.execute(
                    "engram_memory_search",
                    ctx(),
                    {"query": "ingress certificate rotation", "purpose_ref": PURPOSE, "limit": 5},
                )["records"]
            ]
            results.append(
                (first.ingested, again.skipped_existing, exported, kinds, hits, eng.operator.verify_journal())
            )
        finally:
            eng.close()
    assert results[0][0] == 30 and results[0][1] == 30
    assert results[0] == results[1]
    # `engram admin --database-url ... export` reads the PostgreSQL store, not the
    # data directory's SQLite file: both exports are the same bytes.
    from typer.testing import CliRunner

    from engram.service.cli import app

    exports = []
    for name, flags in (("sqlite", []), ("postgres", ["--database-url", url])):
        out = tmp_path / f"{name}.jsonl"
        result = CliRunner().invoke(
            app, ["admin", *flags, "export", *SCOPE, str(out), "--data-dir", str(tmp_path / name)]
        )
        assert result.exit_code == 0, result.output
        exports.append(out.read_bytes())
    assert exports[0] == exports[1] and exports[0].count(b"\n") == 30


def test_a_bulk_load_leaves_the_planner_statistics_of_postgresql(tmp_path: Path, encoder, postgres_cluster):
    """A table loaded in one go has no statistics until autovacuum runs, and the planner
    then read a page's candidates by scanning the scope; ingestion analyses the tables."""
    import psycopg

    from engram.service.engine import Engine

    url = postgres_cluster.create_database("analyse")
    eng = Engine.open(tmp_path / "pg", encoder=encoder, store=StoreAddress(url))
    try:
        ingest_corpus(eng, SCOPE, corpus(), batch_size=8, progress=False, purpose_ref=PURPOSE)
    finally:
        eng.close()
    with psycopg.connect(url) as conn:
        analysed = conn.execute(
            "SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL ORDER BY relname"
        ).fetchall()
    assert {"candidates", "journal", "keys", "records"} <= {name for (name,) in analysed}
