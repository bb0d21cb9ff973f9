"""Examining a load's batches (payloads, secret scan, digests), in worker processes.

Why processes: examining a batch (building each record's payload, the contract's secret
scan, the digests and index documents) is pure Python, about as much CPU per record as
sealing and writing it. Run in a thread of the loading process, it takes turns with the
writer for one interpreter lock, and the writer, which gives the lock up around every
SQLite statement and every call into the indexes, then waits for the examiner to hand it
back each time. Examining reads and writes nothing (``service.engine.examine``), so a
worker process can do it on another core while the loading process only checks which
records the store holds already, writes and indexes. Measured: ``eval/RESULTS.md``
(Capacity, Ingest).

Batches come back in the order they were cut, a bounded number ahead of the writer, so a
corpus larger than memory streams through as before. A worker ends with the loading
process, however that ends (a SIGKILL included): it would otherwise wait for work on its
queue forever, and keep the start method's server process alive with it.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial

from engram.models.scope import Scope
from engram.ranking import usable_cores
from engram.service.engine import ExaminedBatch, examine

from .records import IngestRecord, RefusedRecord, submission

#: Source records cut into one batch, each with its position in the source.
Chunk = list[tuple[int, IngestRecord]]


@dataclass(frozen=True)
class Examined:
    """One examined batch: each submission's source position (``ordinals[position]``),
    how many source records the batch held, those refused before the engine (empty,
    oversized), and the engine's examination of the rest."""

    ordinals: list[int]
    seen: int
    refused: Counter[str]
    batch: ExaminedBatch


def examine_chunk(scope: Scope, purpose_ref: str, scan_secrets: bool, chunk: Chunk) -> Examined:
    """Submissions of ``chunk`` (a refused document counted), then :func:`examine`."""
    subs, ordinals, refused = [], [], Counter[str]()
    for ordinal, record in chunk:
        try:
            subs.append(submission(scope, record, purpose_ref))
        except RefusedRecord as exc:
            refused[str(exc)] += 1
            continue
        ordinals.append(ordinal)
    return Examined(ordinals, len(chunk), refused, examine(scope, subs, scan_secrets=scan_secrets))


#: The smallest load examined in a worker process: a worker's start costs about a second
#: of imports, the time examining this many records takes.
PROCESSES_FROM = 5_000


def default_processes(total: int | None) -> int:
    """Worker processes for a load of ``total`` records (None: not known): one where
    there is a second core and at least :data:`PROCESSES_FROM` records, none otherwise.
    One keeps ahead of the writer, which is then the limit."""
    if usable_cores() < 2 or (total is not None and total < PROCESSES_FROM):
        return 0
    return 1


def _end_with_loader() -> None:
    """In a worker, at its start: exit as soon as the loading process has ended."""
    loader = multiprocessing.parent_process()
    if loader is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([loader.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="engram-loader-watch", daemon=True).start()


class Examiner:
    """Examines chunks in order: in ``processes`` worker processes, or inline with none."""

    def __init__(self, scope: Scope, purpose_ref: str, scan_secrets: bool, *, processes: int, ahead: int) -> None:
        self._work: Callable[[Chunk], Examined] = partial(examine_chunk, scope, purpose_ref, scan_secrets)
        self._ahead = max(1, ahead)
        self._pool: ProcessPoolExecutor | None = None
        if processes > 0:
            methods = multiprocessing.get_all_start_methods()
            # Not fork: the loading process runs threads (the indexes', the pipeline's).
            context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
            self._pool = ProcessPoolExecutor(max_workers=processes, mp_context=context, initializer=_end_with_loader)

    def map(self, chunks: Iterable[Chunk]) -> Iterator[Examined]:
        """Each chunk examined, in order; at most ``ahead`` chunks in flight."""
        if self._pool is None:
            yield from map(self._work, chunks)
            return
        pending: deque[Future[Examined]] = deque()
        for chunk in chunks:
            pending.append(self._pool.submit(self._work, chunk))
            if len(pending) > self._ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def close(self) -> None:
        """Stop the workers; chunks not yet started are dropped."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def chunks(records: Iterable[IngestRecord], size: int) -> Iterator[Chunk]:
    """``records`` cut into chunks of ``size``, each record with its source position."""
    chunk: Chunk = []
    for ordinal, record in enumerate(records):
        chunk.append((ordinal, record))
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
