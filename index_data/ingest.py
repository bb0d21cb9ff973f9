"""Bulk ingestion: load a corpus into a scope as accepted records, through an operator path.

Why not capture + request_admission per document: a collection of a million documents
would pay two transactions, an idempotency reservation and a policy decision each, and an
agent-path confirmation model that makes no sense for an operator's load. Ingestion is the
operator's equivalent of an accepted admission: per record it writes exactly what
admission writes for an accepted candidate (payload, evidence and record digests from
:mod:`service.engine.records`, a body sealed under its own data key with the record's
associated data, a chained journal event, a record row), with two differences stated in
the record itself: the journal event kind is ``record_ingested`` and the body's trust
class is ``operator-ingested``, its authorisation receipt the operator's.

Batches: one store transaction per batch, then the batch is projected straight into both
indexes with ``Ranker.apply(..., after_cursor=cursor before the batch)`` while holding the
projector's lock, so a concurrent catch-up cannot interleave. Vectors are computed before
the lock is taken (or come precomputed), so searches never queue behind the encoder.

Idempotent and resumable: the record digest is bound to a deterministic pseudo candidate
id (``ingest_`` + sha256(scope, external_id)), so the same document always has the same
record_id; records already present (in any state: a forgotten record is never revived)
are skipped. A crash between a batch's commit and its index apply leaves the indexes
behind the journal; the next ingest (or engine start) heals it with
``Projector.catch_up`` before going on, re-embedding at most that one batch.
"""

from __future__ import annotations

import getpass
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ranking import IndexDocument, passages
from service.engine import CallContext
from service.engine.admission import record_row
from service.engine.clock import instant, now_ms
from service.engine.records import authorization_receipt, index_document, record_aad, scope_key
from service.engine.secrets import find_secret

from .readers import VectorSource
from .records import DEFAULT_PURPOSE, IngestRecord, RefusedRecord, build_payload, identity

INGEST_TOOL = "engram_operator_ingest"
TRUST = "operator-ingested"
EVENT_KIND = "record_ingested"


@dataclass
class IngestReport:
    """What one ingestion run did (counts, cursors, where the time went)."""

    scope: tuple[str, str]
    seen: int = 0
    ingested: int = 0
    skipped_existing: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    cursor_before: int = 0
    cursor_after: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0
    store_seconds: float = 0.0
    index_seconds: float = 0.0
    vectors: str = "none"

    @property
    def records_per_s(self) -> float:
        return self.seen / self.seconds if self.seconds > 0 else 0.0

    @property
    def ingested_per_s(self) -> float:
        return self.ingested / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": list(self.scope), "seen": self.seen, "ingested": self.ingested,
            "skipped_existing": self.skipped_existing, "refused": dict(self.refused),
            "batches": self.batches, "cursor_before": self.cursor_before,
            "cursor_after": self.cursor_after, "seconds": round(self.seconds, 3),
            "embed_seconds": round(self.embed_seconds, 3), "store_seconds": round(self.store_seconds, 3),
            "index_seconds": round(self.index_seconds, 3), "vectors": self.vectors,
            "records_per_s": round(self.records_per_s, 1), "ingested_per_s": round(self.ingested_per_s, 1),
        }


def operator_context(scope: tuple[str, str], purpose_ref: str, *, principal: str | None = None,
                     session: str | None = None) -> CallContext:
    """The operator's own context, for the authorisation receipt sealed in each body."""
    return CallContext(
        tenant=scope[0], workspace=scope[1],
        principal=principal or f"operator:{_user()}", agent_id="engram-ingest",
        session=session or "ingest_" + uuid.uuid4().hex[:16], purpose=purpose_ref,
    )


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in a container
        return "unknown"


def embed_documents(encoder: Any, docs: Sequence[IndexDocument], batch: int = 256) -> list[np.ndarray]:
    """Passage vectors per document, exactly as ``Ranker.apply`` would embed them."""
    windows = [passages(d.semantic_text()) for d in docs]
    flat = [w for ws in windows for w in ws]
    rows = [np.asarray(encoder.encode(flat[i : i + batch]), dtype=np.float32) for i in range(0, len(flat), batch)]
    matrix = np.vstack(rows) if rows else np.zeros((0, encoder.dim), dtype=np.float32)
    out, start = [], 0
    for ws in windows:
        out.append(matrix[start : start + len(ws)])
        start += len(ws)
    return out


@dataclass
class _Prepared:
    ordinal: int
    record: IngestRecord
    payload: dict[str, Any]
    evidence: dict[str, Any]
    ident: Any


class _Progress:
    """A rich progress bar on stderr with records/s, or nothing."""

    def __init__(self, enabled: bool, total: int | None, label: str) -> None:
        self._bar = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn,
                                   TextColumn, TimeElapsedColumn, TimeRemainingColumn)
        from rich.text import Text

        class Rate(ProgressColumn):
            def render(self, task: Any) -> Text:
                speed = task.finished_speed or task.speed
                return Text(f"{speed:,.0f} rec/s" if speed else "- rec/s")

        self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                             Rate(), TimeElapsedColumn(), TimeRemainingColumn(),
                             console=Console(stderr=True), transient=False)
        self._bar.start()
        self._task = self._bar.add_task(label, total=total)

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def ingest_corpus(
    engine: Any,
    scope: tuple[str, str],
    records: Iterable[IngestRecord],
    *,
    vectors: np.ndarray | VectorSource | None = None,
    batch_size: int = 512,
    progress: bool = True,
    purpose_ref: str = DEFAULT_PURPOSE,
    encoder: Any = "engine",
    scan_secrets: bool = True,
    total: int | None = None,
    principal: str | None = None,
    on_batch: Callable[[IngestReport], None] | None = None,
) -> IngestReport:
    """Load ``records`` into ``scope`` as accepted, operator-ingested records.

    ``vectors``: precomputed passage vectors aligned with ``records`` by position (a 2-D
    array or ``.npy`` gives one vector per document; a :class:`VectorSource` with offsets
    gives one row per passage window). Without them the records are embedded with
    ``encoder`` (default: the engine's model), or, with no encoder at all, projected
    lexically only (the semantic channel then reports itself behind).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be positive")
    parts = engine.parts
    store, ranker, projector = parts.store, parts.ranker, parts.projector
    key = scope_key(scope)
    source = VectorSource(np.asarray(vectors)) if isinstance(vectors, np.ndarray) else vectors
    if encoder == "engine":
        encoder = engine.encoder
    report = IngestReport(scope=scope, vectors="precomputed" if source is not None else
                          ("encoder" if encoder is not None else "none"))
    ctx = operator_context(scope, purpose_ref, principal=principal)
    actor = {"principal": ctx.principal, "agent_id": ctx.agent_id, "session": ctx.session}
    if total is None and hasattr(records, "__len__"):
        total = len(records)  # type: ignore[arg-type]
    started = time.perf_counter()
    # Heal a previous run that committed a batch but crashed before projecting it.
    projector.catch_up(scope)
    report.cursor_before = store.scope_cursor(scope)
    refused: Counter[str] = Counter()
    bar = _Progress(progress, total, f"ingest {scope[0]}/{scope[1]}")

    def process(batch: list[tuple[int, IngestRecord]]) -> None:
        refused_before = sum(refused.values())
        prepared: dict[str, _Prepared] = {}
        for ordinal, record in batch:
            try:
                payload, evidence = build_payload(record, purpose_ref)
                if scan_secrets and find_secret(payload["components"][0]["text"]) is not None:
                    raise RefusedRecord("secret")
            except RefusedRecord as exc:
                refused[str(exc)] += 1
                continue
            ident = identity(scope, record, payload, evidence)
            prepared.setdefault(ident.record_id, _Prepared(ordinal, record, payload, evidence, ident))
        existing = store.records(scope, list(prepared))
        fresh = [p for rid, p in prepared.items() if rid not in existing]
        # Already present (in any state), or the same document twice in this batch.
        skipped = len(batch) - (sum(refused.values()) - refused_before) - len(fresh)
        if not fresh:
            report.skipped_existing += skipped
            return
        docs = [index_document(key, p.ident.record_id, p.payload) for p in fresh]
        t0 = time.perf_counter()
        vecs: list[np.ndarray] | None = None
        if source is not None:
            vecs = [source.get(p.ordinal) for p in fresh]
        elif encoder is not None:
            vecs = embed_documents(encoder, docs)
        t1 = time.perf_counter()
        report.embed_seconds += t1 - t0
        with engine.parts.projector.exclusive():
            written: list[int] = []
            with store.transaction() as tx:
                at = now_ms()
                auth = authorization_receipt(ctx, INGEST_TOOL, at)
                events = []
                for i, p in enumerate(fresh):
                    ident = p.ident
                    if tx.record(scope, ident.record_id) is not None:
                        skipped += 1  # a concurrent run got there first
                        continue
                    if tx.tombstoned_payload(scope, ident.payload_digest):
                        refused["forgotten"] += 1  # forgotten content does not come back by bulk load
                        continue
                    if tx.accepted_with_payload(scope, ident.payload_digest) is not None:
                        skipped += 1
                        continue
                    body = {
                        "payload": p.payload,
                        "evidence": p.evidence,
                        "retention": {"derivative_rule": "make-ineligible"},
                        "authorization_receipt": auth,
                        "trust": TRUST,
                        "actor": actor,
                        "recorded_at": instant(at),
                        "accepted_at": instant(at),
                    }
                    key_id, sealed = parts.vault.seal_json(tx, body, record_aad(scope, ident.record_id))
                    event = tx.append_event(
                        scope, EVENT_KIND, ident.record_id,
                        {"candidate_id": ident.candidate_id, "record_digest": ident.record_digest,
                         "payload_digest": ident.payload_digest, "evidence_digest": ident.evidence_digest,
                         "authorization_receipt_digest": auth["receipt_digest"],
                         "external_id": p.record.external_id},
                        instant(at))
                    events.append(event)
                    tx.insert_record(record_row(
                        scope, ident.record_id, body, r_digest=ident.record_digest,
                        p_digest=ident.payload_digest, key_id=key_id, sealed=sealed,
                        cursor=event.cursor, at_ms=at, candidate_id=ident.candidate_id))
                    written.append(i)
            t2 = time.perf_counter()
            report.store_seconds += t2 - t1
            if written:
                first, last = events[0].cursor, events[-1].cursor
                ranker.apply(
                    key, [docs[i] for i in written], [], through_cursor=last,
                    vectors=[vecs[i] for i in written] if vecs is not None else None,
                    after_cursor=first - 1,
                )
            report.index_seconds += time.perf_counter() - t2
        report.ingested += len(written)
        report.skipped_existing += skipped
        report.batches += 1

    try:
        batch: list[tuple[int, IngestRecord]] = []
        for ordinal, record in enumerate(records):
            batch.append((ordinal, record))
            if len(batch) >= batch_size:
                process(batch)
                report.seen += len(batch)
                bar.advance(len(batch))
                batch = []
                report.refused = dict(refused)
                if on_batch is not None:
                    on_batch(report)
        if batch:
            process(batch)
            report.seen += len(batch)
            bar.advance(len(batch))
            report.refused = dict(refused)
            if on_batch is not None:
                on_batch(report)
    finally:
        bar.close()
    projector.catch_up(scope)
    report.refused = dict(refused)
    report.cursor_after = store.scope_cursor(scope)
    report.seconds = time.perf_counter() - started
    return report
