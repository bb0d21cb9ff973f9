"""Writing a load's batches (examine, check, seal, commit), in worker processes.

Why a process: writing a batch is pure Python around short calls into SQLite or
PostgreSQL: building each record's payload, the contract's secret scan, the digests and
index documents, then sealing each body, packing it and the journal's event, chaining
the events' digests, one transaction. In the loading process it takes turns for one
interpreter lock with the stage that indexes the batch before, and the two together were
one core of Python (``docs/results/capacity.md``). A worker process writes through its
own store connection and key ring (``BatchWriter.open``, from the engine's
``WriterSpec``) on another core, and only what indexing needs comes back: each written
record's index document and position, the journal span, the counts.

One worker, or two where there are cores for them (``worker_start.writer_count``): two
examine their batches side by side and commit them in turn (:class:`Turns`). Either
way batches are committed in the order they were cut, which is the order they must be
indexed in, a bounded number ahead of the indexing (a crash leaves the indexes behind
the journal, which the next catch-up heals, as for a batch committed inline). A load
stops at its first failed batch: no batch cut after it is committed. A worker ends with
the loading process, however that ends (a SIGKILL included): it would otherwise wait
for work on its queue forever, and keep the start method's server process alive with
it; a transaction it had open is rolled back.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial

from engram.models.errors import EngramError
from engram.models.scope import Scope
from engram.service.engine import BatchWriter, CallContext, CommittedBatch, Engine, ExaminedBatch, WriterSpec, examine

from .records import IngestRecord, RefusedDocument, RefusedRecord, submission
from .worker_start import worker_context


class LoadStopped(EngramError):
    """A batch of a bulk load sent after one that failed: a load stops at its first
    failure, so it is not written."""


#: Source records cut into one batch, each with its position in the source.
Chunk = list[tuple[int, IngestRecord]]


@dataclass(frozen=True)
class Examined:
    """One examined batch: each submission's source position (``ordinals[position]``) and
    id (``ids[position]``), how many source records the batch held, those refused before
    the engine (invalid, empty, oversized), and the engine's examination of the rest."""

    ordinals: list[int]
    ids: list[str]
    seen: int
    refused: list[RefusedDocument]
    batch: ExaminedBatch


@dataclass(frozen=True)
class Written:
    """One written batch: the source position of each written record (in journal
    order), how many source records the batch held, those refused (before the engine or
    by it), what the commit wrote, and the CPU seconds writing it took (its thread's)."""

    ordinals: list[int]
    seen: int
    refused: list[RefusedDocument]
    committed: CommittedBatch
    cpu_seconds: float


@dataclass(frozen=True)
class Load:
    """What every batch of one load is written with: its scope, the purpose its payloads
    name, whether the secret scan runs, and the operator's context for its receipts."""

    scope: Scope
    purpose_ref: str
    scan_secrets: bool
    operator: CallContext


def examine_chunk(scope: Scope, purpose_ref: str, scan_secrets: bool, chunk: Chunk) -> Examined:
    """Submissions of ``chunk`` (a refused document named), then :func:`examine`."""
    subs, ordinals, ids, refused = [], [], [], []
    for ordinal, record in chunk:
        try:
            subs.append(submission(scope, record, purpose_ref))
        except RefusedRecord as exc:
            refused.append(RefusedDocument(record.external_id, exc.reason, exc.detail))
            continue
        ordinals.append(ordinal)
        ids.append(record.external_id)
    return Examined(ordinals, ids, len(chunk), refused, examine(scope, subs, scan_secrets=scan_secrets))


def write_chunk(writer: BatchWriter, load: Load, chunk: Chunk) -> Written:
    """``chunk`` examined, the records the scope holds already set aside, and the rest
    committed in one transaction."""
    cpu = time.thread_time()
    return commit_examined(writer, load, examine_chunk(load.scope, load.purpose_ref, load.scan_secrets, chunk), cpu)


def commit_examined(writer: BatchWriter, load: Load, examined: Examined, cpu: float) -> Written:
    """An examined chunk's records the scope holds already set aside, and the rest
    committed in one transaction (``cpu``: the thread's CPU clock when the chunk began)."""
    prepared = writer.prepare(examined.batch)
    committed = writer.commit(prepared, load.operator)
    ordinals = [examined.ordinals[prepared.records[i].position] for i in committed.written]
    refused = examined.refused + [
        RefusedDocument(examined.ids[r.position], r.reason.value, r.rule) for r in committed.outcome.refused
    ]
    return Written(ordinals, examined.seen, refused, committed, time.thread_time() - cpu)


#: What :attr:`Turns` holds as the first failed chunk while none has failed.
_NONE_FAILED = 2**62


class Turns:
    """Whose turn it is to commit, shared by a load's writing workers: chunk ``n`` (in the
    order the chunks were cut) is committed once chunks ``0 .. n-1`` are, whichever
    worker examined it; once chunk ``n`` failed, no chunk after it is committed.

    Why: examining a chunk (payloads, the secret scan, digests, index documents) is
    nearly half of writing it and needs nothing from the chunks before, so where there
    are cores for it one worker examines a chunk while another commits the one before.
    The commits stay one at a time, in order: the journal's order is the order the
    indexes apply, and the first of two equal records is the one kept."""

    def __init__(self, context: multiprocessing.context.BaseContext) -> None:
        self._changed = context.Condition()
        self._next = context.Value("q", 0, lock=False)  # the next chunk to commit
        self._failed = context.Value("q", _NONE_FAILED, lock=False)  # the first that failed

    @contextlib.contextmanager
    def turn(self, n: int) -> Iterator[None]:
        """Wait for chunk ``n``'s turn (LoadStopped once an earlier one failed), and hand
        the turn on after it; a failure inside marks ``n`` failed."""
        with self._changed:
            self._changed.wait_for(lambda: self._next.value == n or self._failed.value < n)
            if self._failed.value < n:
                raise LoadStopped("an earlier batch of this load failed")
        try:
            yield
        except BaseException:
            self.fail(n)
            raise
        with self._changed:
            self._next.value = n + 1
            self._changed.notify_all()

    def fail(self, n: int) -> None:
        """Mark chunk ``n`` failed: no chunk after it is committed."""
        with self._changed:
            self._failed.value = min(self._failed.value, n)
            self._changed.notify_all()


#: The worker process's own writer and its load's turns, set by :func:`_start_worker`.
_writer: BatchWriter | None = None
_turns: Turns | None = None


def _start_worker(spec: WriterSpec, turns: Turns) -> None:
    """In a worker, at its start: its own writer, its load's turns, and an exit as soon
    as the loading process has ended."""
    global _writer, _turns
    _writer = BatchWriter.open(spec)
    _turns = turns
    # Everything alive now (modules, the writer, the detector) lives as long as the
    # worker: out of the cyclic collector, whose passes over it cost 35-43 us of every
    # record's write (8-19 us after).
    gc.freeze()
    loader = multiprocessing.parent_process()
    if loader is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([loader.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="engram-loader-watch", daemon=True).start()


def _write_in_worker(load: Load, n: int, chunk: Chunk) -> Written:
    """Chunk ``n`` examined, then committed in its turn."""
    assert _writer is not None and _turns is not None  # set by the pool's initializer
    cpu = time.thread_time()
    try:
        examined = examine_chunk(load.scope, load.purpose_ref, load.scan_secrets, chunk)
    except BaseException:
        _turns.fail(n)
        raise
    with _turns.turn(n):
        return commit_examined(_writer, load, examined, cpu)


class Writer:
    """Writes chunks, committed in order: in worker processes (``workers`` of them, 0 for
    none), or on the calling thread."""

    def __init__(self, engine: Engine, load: Load, *, workers: int, ahead: int) -> None:
        self._ahead = max(1, ahead, workers + 1)  # enough in flight to keep each worker busy
        self._load = load
        self._pool: ProcessPoolExecutor | None = None
        self._here: Callable[[Chunk], Written] | None = None  # the writing on the calling thread
        self.in_worker = workers > 0  # whether the chunks are written in worker processes
        if self.in_worker:
            context = worker_context()
            self._pool = ProcessPoolExecutor(
                max_workers=workers,
                mp_context=context,
                initializer=_start_worker,
                initargs=(engine.writer_spec(), Turns(context)),
            )
        else:
            self._here = partial(write_chunk, engine.batch_writer(), load)

    def map(self, chunks: Iterable[Chunk]) -> Iterator[Written]:
        """Each chunk written, in order; at most ``ahead`` chunks in flight."""
        if self._pool is None:
            assert self._here is not None
            yield from map(self._here, chunks)
            return
        pending: deque[Future[Written]] = deque()
        for n, chunk in enumerate(chunks):
            pending.append(self._pool.submit(_write_in_worker, self._load, n, chunk))
            if len(pending) > self._ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def close(self) -> None:
        """Stop the workers; chunks not yet started are dropped."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


#: The first chunk of a ramped load (see :func:`chunks`).
RAMP_FROM = 512


def chunks(
    records: Iterable[IngestRecord], size: int, *, ramp: bool = False, total: int | None = None
) -> Iterator[Chunk]:
    """``records`` cut into chunks of ``size``, each record with its source position.

    ``ramp``, for a load written in a worker process: the first chunk holds
    :data:`RAMP_FROM` records (when ``size`` is larger) and each next one twice as many, up
    to ``size``, since the loading process indexes nothing until the worker has written a
    chunk (a first chunk of 4,096 records kept one of two cores idle for over a second).
    Where ``total`` says how many records there are, the last chunks shrink the same way
    (each at most half of what is left, at least :data:`RAMP_FROM`): the worker then idles
    only while the loading process indexes a small last chunk."""
    target = min(size, RAMP_FROM) if ramp else size
    left = total if ramp else None  # records not yet cut, where known

    def cut() -> int:
        return target if left is None else min(target, max(RAMP_FROM, -(-left // 2)))

    chunk: Chunk = []
    limit = cut()
    for ordinal, record in enumerate(records):
        chunk.append((ordinal, record))
        if len(chunk) >= limit:
            yield chunk
            if left is not None:
                left -= len(chunk)
            chunk = []
            target = min(size, target * 2)
            limit = cut()
    if chunk:
        yield chunk
