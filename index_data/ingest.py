"""Bulk ingestion: load a corpus into a scope as accepted records, as a pipeline.

The records are written by the engine's batch admission (``examine``,
``Engine.batch_writer`` and ``Engine.bulk_load``, see :mod:`service.engine.ingestion`):
the same record writer as an agent's admitted capture, on whatever store the engine
runs, with trust class ``operator-ingested`` and the operator's receipts. This module
turns source documents into submissions and keeps the encoder busy.

Pipeline: three stages joined by bounded queues (``depth`` batches each), so batch N is
indexed while batch N+1 is embedded and batch N+2 written (examined, checked against
the store, sealed and committed, in worker processes where there is a spare core: see
:mod:`index_data.writer`). The stages run in threads: the encoder (torch), Tantivy and
usearch release the GIL while they work. With precomputed vectors the embedding stage
only slices them, and the pipeline runs at its own ceiling. The scope is held for the
whole load (``Engine.bulk_load``), so no catch-up interleaves with a batch committed but
not yet indexed. A failure in any stage (or a worker) stops the others and is raised
here; whatever committed stays committed, and is indexed by the next catch-up.

Idempotent and resumable: each document's record id is bound to a deterministic pseudo
candidate id (``ingest_`` + sha256(scope, external_id)); records already present (in any
state: a forgotten record is never revived) are skipped, content whose payload was
forgotten is refused. A crash between a batch's commit and its index apply leaves the
indexes behind the journal; the next ingest (or engine start) heals it with
``Engine.catch_up`` before going on.
"""

from __future__ import annotations

import contextlib
import gc
import getpass
import queue
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engram.models.device import usable_cores
from engram.models.scope import Scope
from engram.service.engine import BulkLoad, CommittedBatch, operator_context

from .readers import VectorSource
from .records import DEFAULT_PURPOSE, IngestRecord, RefusedDocument
from .worker_start import uses_worker, writer_count
from .writer import Load, Writer, Written, chunks


@dataclass
class IngestReport:
    """What one ingestion run did (counts, cursors, where the time went)."""

    scope: Scope
    seen: int = 0
    ingested: int = 0
    skipped_existing: int = 0
    refused_records: list[RefusedDocument] = field(default_factory=list)
    batches: int = 0
    cursor_before: int = 0
    cursor_after: int = 0
    seconds: float = 0.0
    write_seconds: float = 0.0  # the feeding thread waiting for written batches
    worker_cpu_seconds: float = 0.0  # the writing worker processes', where there are any
    embed_seconds: float = 0.0
    store_seconds: float = 0.0
    index_seconds: float = 0.0
    vectors: str = "none"

    @property
    def refused(self) -> dict[str, int]:
        """How many source records were refused, by reason."""
        return dict(Counter(r.reason for r in self.refused_records))

    @property
    def records_per_s(self) -> float:
        return self.seen / self.seconds if self.seconds > 0 else 0.0

    @property
    def ingested_per_s(self) -> float:
        return self.ingested / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": list(self.scope),
            "seen": self.seen,
            "ingested": self.ingested,
            "skipped_existing": self.skipped_existing,
            "refused": self.refused,
            "refused_records": [r.as_dict() for r in self.refused_records],
            "batches": self.batches,
            "cursor_before": self.cursor_before,
            "cursor_after": self.cursor_after,
            "seconds": round(self.seconds, 3),
            "write_seconds": round(self.write_seconds, 3),
            "worker_cpu_seconds": round(self.worker_cpu_seconds, 3),
            "embed_seconds": round(self.embed_seconds, 3),
            "store_seconds": round(self.store_seconds, 3),
            "index_seconds": round(self.index_seconds, 3),
            "vectors": self.vectors,
            "records_per_s": round(self.records_per_s, 1),
            "ingested_per_s": round(self.ingested_per_s, 1),
        }


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in a container
        return "unknown"


@dataclass
class _Batch:
    """One written batch on its way to the indexes."""

    ordinals: list[int]  # source position of each written record
    seen: int
    refused: list[RefusedDocument]
    committed: CommittedBatch
    vectors: list[np.ndarray] | None = None


_DONE = object()

#: Records per batch (one store transaction, one commit of each index) where the batch is
#: embedded here: the encoder's pace (tens of passages a second on a CPU) bounds it.
EMBEDDED_BATCH = 512
#: Records per batch where nothing is embedded (precomputed vectors, or no model). Each
#: batch costs a Tantivy commit and reload, a cursor write, a transaction and a usearch
#: add's start, whatever its size: at 4,096 records the loading process spent about a
#: quarter less CPU than at 512 (``docs/results/capacity.md``).
PRECOMPUTED_BATCH = 4096


def default_batch(embedding: bool) -> int:
    """Records per batch of a load that embeds its batches, or does not."""
    return EMBEDDED_BATCH if embedding else PRECOMPUTED_BATCH


class _Stages:
    """Bounded hand-offs between pipeline threads that give up once any stage failed."""

    def __init__(self) -> None:
        self.failed: list[BaseException] = []
        self.stop = threading.Event()

    def put(self, q: queue.Queue[Any], item: Any) -> bool:
        while not self.stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def items(self, q: queue.Queue[Any]) -> Iterator[Any]:
        while not self.stop.is_set():
            try:
                item = q.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is _DONE:
                return
            yield item

    def run(self, name: str, work: Callable[[], None]) -> threading.Thread:
        def guarded() -> None:
            try:
                work()
            except BaseException as exc:  # raised again by the caller's thread
                self.failed.append(exc)
                self.stop.set()

        thread = threading.Thread(target=guarded, name=name, daemon=True)
        thread.start()
        return thread


class _Progress:
    """A rich progress bar on stderr with records/s, or nothing."""

    def __init__(self, enabled: bool, total: int | None, label: str) -> None:
        self._bar = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            ProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.text import Text

        class Rate(ProgressColumn):
            def render(self, task: Any) -> Text:
                speed = task.finished_speed or task.speed
                return Text(f"{speed:,.0f} rec/s" if speed else "- rec/s")

        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            Rate(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self._bar.start()
        self._task = self._bar.add_task(label, total=total)

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


@dataclass
class _Pipeline:
    """One ingestion run's three stages (write, vectors, index), joined by bounded
    queues; each stage method runs in its own thread except :meth:`feed`."""

    engine: Any
    source: VectorSource | None
    embedding: bool
    writer: Writer
    load: BulkLoad
    report: IngestReport
    bar: _Progress
    on_batch: Callable[[IngestReport], None] | None
    depth: int
    total: int | None  # the records the source holds, where known
    stages: _Stages = field(default_factory=_Stages)

    def __post_init__(self) -> None:
        self.to_embed: queue.Queue[Any] = queue.Queue(maxsize=self.depth)
        self.to_index: queue.Queue[Any] = queue.Queue(maxsize=self.depth)

    def feed(self, records: Iterable[IngestRecord], batch_size: int) -> None:
        """Cut ``records`` into batches and have each written (on the calling thread)."""
        written = self.writer.map(chunks(records, batch_size, ramp=self.writer.in_worker, total=self.total))
        while not self.stages.stop.is_set():
            t = time.perf_counter()
            item: Written | None = next(written, None)
            if item is None:
                break
            self.report.write_seconds += time.perf_counter() - t
            if self.writer.in_worker:
                self.report.worker_cpu_seconds += item.cpu_seconds
            batch = _Batch(item.ordinals, item.seen, item.refused, item.committed)
            if not self.stages.put(self.to_embed, batch):
                return
        # Every batch is written: the batches still to index have every core to themselves.
        self.load.graph_threads = 0
        self.stages.put(self.to_embed, _DONE)

    def vectors_stage(self) -> None:
        """Each batch's passage vectors: sliced from the source, or embedded."""
        for batch in self.stages.items(self.to_embed):
            t = time.perf_counter()
            if self.source is not None:
                batch.vectors = self.source.rows(batch.ordinals)
            elif self.embedding and batch.committed.documents:
                batch.vectors = self.engine.embed_batch(batch.committed)
            self.report.embed_seconds += time.perf_counter() - t
            if not self.stages.put(self.to_index, batch):
                return
        self.stages.put(self.to_index, _DONE)

    def index_stage(self) -> None:
        """Each committed batch indexed (Tantivy and usearch), in commit order, and counted."""
        report = self.report
        for batch in self.stages.items(self.to_index):
            committed = batch.committed
            self.load.index(committed, vectors=batch.vectors)
            outcome = committed.outcome
            report.store_seconds += outcome.store_seconds
            report.index_seconds += outcome.index_seconds
            report.ingested += len(outcome.accepted)
            report.skipped_existing += outcome.skipped
            report.refused_records.extend(batch.refused)
            report.seen += batch.seen
            report.batches += 1 if outcome.accepted else 0
            self.bar.advance(batch.seen)
            if self.on_batch is not None:
                self.on_batch(report)

    def run(self, records: Iterable[IngestRecord], batch_size: int) -> None:
        """The stages to the end; the first failure of any stage is raised here."""
        threads = [
            self.stages.run("ingest-vectors", self.vectors_stage),
            self.stages.run("ingest-index", self.index_stage),
        ]
        try:
            self.feed(records, batch_size)
        except BaseException:
            self.stages.stop.set()
            raise
        finally:
            self.writer.close()
            for thread in threads:
                thread.join()
            self.bar.close()
        if self.stages.failed:
            raise self.stages.failed[0]


@contextlib.contextmanager
def _long_lived_frozen() -> Iterator[None]:
    """The process's objects from before the load held out of the cyclic collector
    while it runs: a load allocates containers by the million, and each collection
    that reached the oldest generation walked every module and index object again (on
    the loading thread, holding the interpreter lock: 0.84 s of 50,000 records, 0.16 s
    with them held out)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def ingest_corpus(
    engine: Any,
    scope: Scope,
    records: Iterable[IngestRecord],
    *,
    vectors: np.ndarray | VectorSource | None = None,
    batch_size: int | None = None,
    depth: int = 2,
    progress: bool = True,
    purpose_ref: str = DEFAULT_PURPOSE,
    scan_secrets: bool = True,
    total: int | None = None,
    principal: str | None = None,
    on_batch: Callable[[IngestReport], None] | None = None,
    worker: bool | None = None,
    writers: int | None = None,
) -> IngestReport:
    """Load ``records`` into ``scope`` as accepted, operator-ingested records.

    ``vectors``: precomputed passage vectors aligned with ``records`` by position (a 2-D
    array or ``.npy`` gives one vector per document; a :class:`VectorSource` with offsets
    gives one row per passage window). Without them the engine's encoder embeds each
    batch in the middle stage (an engine without a model projects lexically only, and its
    semantic channel reports itself behind). ``batch_size``: records per batch (None:
    :func:`default_batch`). ``depth``: batches each queue holds.
    ``worker``: write the batches (examine, seal, commit) in a worker process, beside
    the indexing; False writes them on the calling thread; None chooses
    (:func:`~index_data.worker_start.uses_worker`). ``writers``: how many worker
    processes, where there are any (None: :func:`~index_data.worker_start.writer_count`).
    """
    source = VectorSource(np.asarray(vectors)) if isinstance(vectors, np.ndarray) else vectors
    embedding = source is None and engine.encoder is not None
    if batch_size is None:
        batch_size = default_batch(embedding)
    if batch_size < 1 or depth < 1 or (writers is not None and writers < 1):
        raise ValueError("batch_size, depth and writers must be positive")
    report = IngestReport(
        scope=scope, vectors="precomputed" if source is not None else ("encoder" if embedding else "none")
    )
    if total is None and hasattr(records, "__len__"):
        total = len(records)  # type: ignore[arg-type]
    started = time.perf_counter()
    engine.catch_up(scope)  # heal a previous run that committed a batch but did not project it
    report.cursor_before = engine.scope_cursor(scope)
    workers = (writer_count() if writers is None else writers) if uses_worker(total, worker) else 0
    # Each writing worker keeps a core busy: the graph's adds take the others (at least one).
    graph_threads = max(1, usable_cores() - workers) if workers else 0
    with engine.bulk_load(scope, graph_threads=graph_threads) as load, _long_lived_frozen():
        pipeline = _Pipeline(
            engine=engine,
            source=source,
            embedding=embedding,
            writer=Writer(
                engine,
                Load(
                    scope,
                    purpose_ref,
                    scan_secrets,
                    operator_context(
                        scope, principal or f"operator:{_user()}", "ingest_" + uuid.uuid4().hex[:16], purpose_ref
                    ),
                ),
                workers=workers,
                ahead=depth,
            ),
            load=load,
            report=report,
            bar=_Progress(progress, total, f"ingest {scope[0]}/{scope[1]}"),
            on_batch=on_batch,
            depth=depth,
            total=total,
        )
        pipeline.run(records, batch_size)
    engine.catch_up(scope)
    if report.ingested:
        engine.refresh_statistics()
    report.cursor_after = engine.scope_cursor(scope)
    report.seconds = time.perf_counter() - started
    return report
