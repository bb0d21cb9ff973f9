"""Batch admission: an operator accepts many records at once, through the agent path's writer.

Why not capture + request_admission per document: a collection of a million documents
would pay two transactions, an idempotency reservation and a policy decision each, and an
agent-path confirmation model that makes no sense for an operator's load. A batch is the
operator's accepted admission: one decision receipt (policy ``engram.operator-ingest``)
and one authorisation receipt cover the batch, and each record is written by
:func:`service.engine.acceptance.accept_records`, the function ``request_admission`` uses,
so a loaded record differs from an admitted one only in what it states: trust class
``operator-ingested`` and the operator's receipts.

Four steps, so a caller can overlap them with embedding and with each other, and spread
them over processes (see ``index_data.ingest``): :func:`examine` (pure: secret scan,
digests, index documents; it reads nothing), then a :class:`BatchWriter`'s ``prepare``
(which records the store has already) and ``commit`` (one store transaction), then,
inside a :class:`BulkLoad` (the scope held so that no catch-up interleaves), ``index``
(both indexes), a batch committed while the one before it is indexed. The first three
need only the store and the KEKs, so a worker process can run them on its own
connection (:meth:`BatchWriter.open`, from the engine's :class:`WriterSpec`), and the
loading process only indexes. Each works per batch, not per record: the secret scan
scans each distinct string of the batch once, the transaction checks the batch's ids and
payloads in two statements and writes its keys, journal events and records in one
statement each, and the indexes take the batch in one Tantivy commit and one usearch add
(side by side when the vectors are precomputed).

The record id is bound to the submission's ``candidate_id``, so a caller that derives it
deterministically (bulk ingest: from the source document's id) gets idempotent,
resumable loads: a record already present in any state is skipped (a forgotten record
is never revived), content whose payload was forgotten is refused, and content already a
current record (in the scope, or earlier in the same batch) is skipped. A crash between a
batch's commit and its index apply leaves the indexes behind the journal; the projector
heals it on the next catch-up.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from engram.models.digests import DigestKind, digest, seal_receipt
from engram.models.scope import Scope
from engram.ranking import IndexDocument
from engram.service.secrets import scan as secret_scan
from engram.service.store import StoreAddress, open_store
from engram.service.store.base import Store

from .acceptance import DEFAULT_RETENTION, Acceptance, accept_records
from .clock import instant, now_ms
from .context import CallContext
from .dependencies import Dependencies
from .lifecycle import RecordState
from .records import (
    Trust,
    authorization_receipt,
    evidence_digest,
    index_document,
    payload_digest,
    record_digest,
    record_id,
    scope_key,
)
from .sealing import BodyVault, KeyRing

INGEST_TOOL = "engram_operator_ingest"
INGEST_POLICY = "engram.operator-ingest"


class Refusal(StrEnum):
    """Why a submission did not become a record."""

    SECRET = "secret"  # the contract's secret scan matched (as capture would refuse it)
    FORGOTTEN = "forgotten"  # a record with this payload was forgotten in the scope


@dataclass(frozen=True)
class Refused:
    """A submission that did not become a record: its position in the batch, why, and
    for a secret the name of the scan's rule that matched (never the secret)."""

    position: int
    reason: Refusal
    rule: str | None = None


@dataclass(frozen=True)
class Submission:
    """One document offered for batch admission, in the contract's capture shapes.

    ``candidate_id`` stands where an agent's capture would mint one: the record's digest
    and id are bound to it, so a deterministic one makes the load idempotent."""

    candidate_id: str
    payload: dict[str, Any]
    evidence: dict[str, Any]
    retention: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_RETENTION))


@dataclass(frozen=True)
class PreparedRecord:
    """A submission that may become a record: ``position`` is its index in the batch."""

    position: int
    submission: Submission
    payload_digest: str
    evidence_digest: str
    record_digest: str
    record_id: str
    document: IndexDocument


@dataclass
class ExaminedBatch:
    """A batch after :func:`examine`: the records it may write (not yet checked against
    the store) and what it refused (each with its position and reason, and for a secret
    the id of the rule that fired, so a summary can name why) or found twice. Plain data,
    so it crosses processes."""

    scope: Scope
    records: list[PreparedRecord]
    refused: list[Refused] = field(default_factory=list)
    skipped: int = 0  # twice in this batch


@dataclass
class PreparedBatch:
    """A batch after :func:`prepare`: the records to write and what was set aside."""

    scope: Scope
    records: list[PreparedRecord]
    refused: list[Refused] = field(default_factory=list)
    skipped: int = 0  # already present in the scope, or twice in this batch


@dataclass
class BatchOutcome:
    """What :func:`admit` wrote: record ids in order, the journal span, timings."""

    accepted: list[str] = field(default_factory=list)
    skipped: int = 0
    refused: list[Refused] = field(default_factory=list)
    first_cursor: int = 0
    last_cursor: int = 0
    store_seconds: float = 0.0
    index_seconds: float = 0.0


def identify(scope: Scope, submission: Submission) -> tuple[str, str, str, str]:
    """(payload digest, evidence digest, record digest, record id) of a submission."""
    p_digest = payload_digest(submission.payload)
    e_digest = evidence_digest(submission.evidence)
    r_digest = record_digest(scope, submission.candidate_id, p_digest, e_digest)
    return p_digest, e_digest, r_digest, record_id(r_digest)


def examine(scope: Scope, submissions: Sequence[Submission], *, scan_secrets: bool = True) -> ExaminedBatch:
    """Scan, digest and de-duplicate a batch, reading and writing nothing. The secret
    scan is the agent path's rule (every kept string, keys included), each distinct
    string of the batch scanned once."""
    key = scope_key(scope)
    batch = ExaminedBatch(scope, [])
    candidates: dict[str, PreparedRecord] = {}
    verdicts = (
        secret_scan(
            *({"payload": sub.payload, "evidence": sub.evidence, "retention": sub.retention} for sub in submissions)
        ).findings
        if scan_secrets
        else [None] * len(submissions)
    )
    for position, (sub, secret) in enumerate(zip(submissions, verdicts)):
        if secret is not None:
            batch.refused.append(Refused(position, Refusal.SECRET, secret))
            continue
        p_digest, e_digest, r_digest, rid = identify(scope, sub)
        if rid in candidates:
            batch.skipped += 1
            continue
        candidates[rid] = PreparedRecord(
            position, sub, p_digest, e_digest, r_digest, rid, index_document(key, rid, sub.payload)
        )
    batch.records = list(candidates.values())
    return batch


def operator_context(scope: Scope, principal: str, session: str, purpose_ref: str) -> CallContext:
    """The operator's own context, for the batch's authorisation receipt."""
    return CallContext(
        tenant=scope[0],
        workspace=scope[1],
        principal=principal,
        agent_id="engram-ingest",
        session=session,
        purpose=purpose_ref,
    )


@dataclass
class CommittedBatch:
    """What one commit wrote in ``scope``: the outcome, and each written record's
    position in the prepared batch and its index document, in journal order. Plain data,
    so it crosses processes."""

    scope: Scope
    outcome: BatchOutcome
    written: list[int]
    documents: list[IndexDocument]


@dataclass(frozen=True)
class WriterSpec:
    """Where a :class:`BatchWriter` in another process finds the engine's store and its
    KEKs: ``Engine.writer_spec``."""

    store: StoreAddress
    key_dir: Path
    retire_grace_s: float


class BatchWriter:
    """Batch admission's middle steps over a store and a vault: ``prepare`` (which
    examined records the scope holds already) and ``commit`` (one transaction).

    The engine's own (``Engine.batch_writer``), or one a worker process opens on its
    own connection from the engine's :class:`WriterSpec` (:meth:`open`), so that sealing
    and writing leave the loading process."""

    def __init__(self, store: Store, vault: BodyVault) -> None:
        self._store = store
        self._vault = vault

    @classmethod
    def open(cls, spec: WriterSpec) -> BatchWriter:
        """A writer on a store connection and key ring of its own, for a worker process
        (they end with it)."""
        store = open_store(spec.store)
        ring = KeyRing(spec.key_dir, retire_grace_s=spec.retire_grace_s)
        return cls(store, BodyVault(ring, store))

    def prepare(self, batch: ExaminedBatch) -> PreparedBatch:
        """Set aside the examined records the scope holds already (in any state)."""
        with self._store.reader() as snapshot:
            existing = snapshot.present_records(batch.scope, [r.record_id for r in batch.records])
        return PreparedBatch(
            batch.scope,
            [r for r in batch.records if r.record_id not in existing],
            list(batch.refused),
            batch.skipped + len(existing),
        )

    def commit(self, batch: PreparedBatch, operator: CallContext) -> CommittedBatch:
        """Accept a prepared batch in one store transaction (nothing indexed)."""
        outcome = BatchOutcome(skipped=batch.skipped, refused=list(batch.refused))
        written: list[int] = []
        if not batch.records:
            return CommittedBatch(batch.scope, outcome, written, [])
        scope = batch.scope
        actor = {"principal": operator.principal, "agent_id": operator.agent_id, "session": operator.session}
        t0 = time.perf_counter()
        with self._store.transaction() as tx:
            at = now_ms()
            auth = authorization_receipt(operator, INGEST_TOOL, at)
            recorded_at = instant(at)
            accepted: list[Acceptance] = []
            present = tx.present_records(scope, [r.record_id for r in batch.records])
            states = tx.payload_states(scope, [r.payload_digest for r in batch.records])
            payloads: set[str] = set()
            for i, prepared in enumerate(batch.records):
                sub = prepared.submission
                found = states.get(prepared.payload_digest, ())
                if prepared.record_id in present:
                    outcome.skipped += 1  # a concurrent load got there first
                    continue
                if RecordState.TOMBSTONED in found:
                    outcome.refused.append(Refused(prepared.position, Refusal.FORGOTTEN))  # forgotten stays forgotten
                    continue
                if RecordState.ACCEPTED_CURRENT in found or prepared.payload_digest in payloads:
                    outcome.skipped += 1  # the same content is already a current record
                    continue
                payloads.add(prepared.payload_digest)
                accepted.append(
                    Acceptance(
                        candidate_id=sub.candidate_id,
                        record_digest=prepared.record_digest,
                        record_id=prepared.record_id,
                        payload_digest=prepared.payload_digest,
                        evidence_digest=prepared.evidence_digest,
                        payload=sub.payload,
                        evidence=sub.evidence,
                        retention=sub.retention,
                        trust=Trust.OPERATOR_INGESTED,
                        actor=actor,
                        recorded_at=recorded_at,
                        authorization_receipt_digest=auth["receipt_digest"],
                    )
                )
                written.append(i)
            if accepted:
                decision = seal_receipt(
                    DigestKind.DECISION_RECEIPT,
                    {
                        "policy_id": INGEST_POLICY,
                        "policy_version": "1",
                        "decision": "accept",
                        "record_digests_digest": digest(DigestKind.IDS, [a.record_digest for a in accepted]),
                        "issued_at": instant(at),
                    },
                )
                events = accept_records(self._vault, tx, scope, accepted, decision, [auth], at)
                outcome.accepted = [a.record_id for a in accepted]
                outcome.first_cursor, outcome.last_cursor = events[0].cursor, events[-1].cursor
        outcome.store_seconds = time.perf_counter() - t0
        return CommittedBatch(scope, outcome, written, [batch.records[i].document for i in written])


class BulkLoad:
    """A scope held for a bulk load (:meth:`Engine.bulk_load`): no catch-up of the scope
    interleaves with its batches, so a caller may commit one batch (through a
    :class:`BatchWriter`, here or in another process) while it indexes the batch before.
    Batches are indexed in the order they were committed (a batch indexed after a later
    one is refused: the indexes would skip it as a gap). ``graph_threads``: the
    threads usearch adds each batch's vectors with (0: one per core); a loader may
    change it at any time, and the rest of the batch being indexed follows (once its
    writer is done, every core is free)."""

    def __init__(self, deps: Dependencies, scope: Scope, graph_threads: int = 0) -> None:
        self._deps = deps
        self.scope = scope
        self.graph_threads = graph_threads
        self._indexed_through = 0  # the journal cursor of the last batch indexed

    def index(self, committed: CommittedBatch, *, vectors: Sequence[np.ndarray] | None = None) -> None:
        """Project a committed batch into both indexes (``vectors``: one array of passage
        vectors per written record; without them the ranker embeds)."""
        outcome = committed.outcome
        if committed.scope != self.scope:
            raise ValueError("the batch belongs to another scope")
        if vectors is not None and len(vectors) != len(committed.documents):
            raise ValueError("vectors must hold one array per written record")
        t0 = time.perf_counter()
        if committed.written:
            if outcome.first_cursor <= self._indexed_through:
                raise ValueError("batches are indexed in the order they were committed")
            self._deps.ranker.apply(
                scope_key(self.scope),
                upserts=committed.documents,
                removals=[],
                through_cursor=outcome.last_cursor,
                vectors=list(vectors) if vectors is not None else None,
                after_cursor=outcome.first_cursor - 1,
                graph_threads=lambda: self.graph_threads,  # asked per slice: a change applies mid-batch
            )
            self._indexed_through = outcome.last_cursor
        outcome.index_seconds = time.perf_counter() - t0
