"""Export and import: ingest(export(x)) answers searches the same, and nothing but current
records leaves the store."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from engram.index_data.ingest import ingest_corpus
from engram.index_data.records import IngestRecord, build_payload
from engram.service.engine import CallContext, Engine
from engram.service.engine.clock import instant, now_ms

SCOPE = ("acme", "kb")
PURPOSE = "purpose:test"
#: Valid times hours apart and recent, so recency separates equal BM25 scores (a tie
#: falls to record_id order, and an import gives the records new ids).
RECENT = now_ms()
EXPIRES = instant(now_ms() + 100 * 86_400_000)
QUERIES = ["ledger database", "certificate rotation ingress", "packaging wheels", "quokka migration plan"]


def ctx() -> CallContext:
    return CallContext(
        tenant=SCOPE[0], workspace=SCOPE[1], principal="alice", agent_id="a", session="s", purpose=PURPOSE
    )


def corpus(n: int = 24) -> list[IngestRecord]:
    topics = [
        "ledger database serialisable",
        "ingress certificate rotation",
        "wheel packaging manylinux",
        "quokka gateway deprecation",
    ]
    return [
        IngestRecord(
            external_id=f"r{i}",
            text=f"{topics[i % 4]} note {i} " + "detail " * (i % 5),
            source_ref=f"kb:{i}",
            valid_time_ms=RECENT - i * 3_600_000,
        )
        for i in range(n)
    ]


def admit_structured(engine: Engine, n: int) -> str:
    """An agent's record with several components and a retention, admitted by policy."""
    payload, evidence = build_payload(IngestRecord(f"agent-{n}", f"quokka migration plan {n}", "doc:plan"), PURPOSE)
    payload["components"].append(
        {"component_id": "c2", "kind": "decision", "text": "move the gateway first", "citation_ids": ["cit1"]}
    )
    payload["retention"] = {"derivative_rule": "make-ineligible", "expires_at": EXPIRES}
    cap = engine.execute(
        "engram_memory_capture",
        ctx(),
        {"idempotency_key": f"idem-capture-{n:05d}", "payload": payload, "evidence": evidence},
    )
    out = engine.execute(
        "engram_memory_request_admission",
        ctx(),
        {"candidate_id": cap["candidate_id"], "idempotency_key": f"idem-admit-{n:06d}"},
    )
    return out["outcome"]["record_id"]


def answers(engine: Engine) -> list[list[str]]:
    """Ordered texts of every component of each hit, per query and profile."""
    out = []
    for minimum in ("lexical", "lexical_and_semantic"):
        for query in QUERIES:
            value = engine.execute(
                "engram_memory_search",
                ctx(),
                {
                    "query": query,
                    "purpose_ref": PURPOSE,
                    "limit": 10,
                    "capability_policy": {"minimum_channels": minimum, "network": "forbid"},
                },
            )
            out.append(["|".join(c["text"] for c in p["record"]["components"]) for p in value["records"]])
    return out


def test_ingest_of_an_export_answers_searches_the_same(tmp_path: Path, encoder):
    from engram.service.cli import app

    source = Engine.open(tmp_path / "a", encoder=encoder)
    try:
        ingest_corpus(source, SCOPE, corpus(), progress=False, purpose_ref=PURPOSE)
        admit_structured(source, 1)
        expected = answers(source)
    finally:
        source.close()
    assert all(expected) and any("move the gateway first" in t for hits in expected for t in hits)

    out = tmp_path / "export" / "kb.jsonl"
    runner = CliRunner()
    result = runner.invoke(app, ["admin", "export", *SCOPE, str(out), "--data-dir", str(tmp_path / "a"), "--vectors"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["records"] == 25 and Path(summary["vectors"]).is_file()
    assert oct(out.stat().st_mode & 0o777) == oct(Path(summary["vectors"]).stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in out.parent.iterdir()) == ["kb.jsonl", "kb.npz"]  # no scratch left
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["id"] for line in lines] == sorted(line["id"] for line in lines)
    assert all("actor" not in line and "authorization_receipt_digest" not in line for line in lines)

    # The import: the ingest command, with the exported vectors and no model at all.
    result = runner.invoke(
        app,
        [
            "ingest",
            str(out),
            "--vectors",
            str(summary["vectors"]),
            "--data-dir",
            str(tmp_path / "b"),
            "--tenant",
            SCOPE[0],
            "--workspace",
            SCOPE[1],
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ingested"] == 25
    target = Engine.open(tmp_path / "b", encoder=encoder)
    try:
        got = answers(target)
        assert got == expected
        restored = next(p for p in target.operator.export_records(SCOPE) if len(p.payload["components"]) == 2)
        assert restored.retention["expires_at"] == EXPIRES
    finally:
        target.close()


def test_export_leaves_out_what_is_not_current(tmp_path: Path, encoder):
    engine = Engine.open(tmp_path / "a", encoder=encoder)
    try:
        ingest_corpus(engine, SCOPE, corpus(6), progress=False, purpose_ref=PURPOSE)
        victim = sorted(r.record_id for r in engine.operator.export_records(SCOPE))[0]
        engine.operator.transition(SCOPE, victim, "dispute", "reason:test")
        exported = list(engine.operator.export_records(SCOPE, vectors=True))
        assert len(exported) == 5 and victim not in {r.record_id for r in exported}
        assert all(r.vectors is not None and r.vectors.shape[1] == encoder.dim for r in exported)
        assert {r.trust for r in exported} == {"operator-ingested"}
    finally:
        engine.close()


def test_an_empty_scope_exports_empty_files(tmp_path: Path, encoder):
    from engram.index_data.export import write_export
    from engram.index_data.readers import VectorSource, read_jsonl

    engine = Engine.open(tmp_path / "a", encoder=encoder)
    try:
        summary = write_export(engine, ("nobody", "here"), tmp_path / "e.jsonl", vectors=True)
    finally:
        engine.close()
    assert (summary["records"], summary["passages"]) == (0, 0)
    assert list(read_jsonl(tmp_path / "e.jsonl")) == [] and len(VectorSource.load(tmp_path / "e.npz")) == 0
