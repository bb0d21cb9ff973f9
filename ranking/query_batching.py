"""Natural batching of query encodes: concurrent searches share one encoder run.

Why: a hybrid search is CPU-bound and encoding its query is the largest part of it. On
a CPU, one ONNX Runtime run over eight short queries costs a half to two thirds of the
CPU time of eight runs of one (figures in eval/RESULTS.md), and concurrent runs of one
session also compete for its intra-op thread pool. So concurrent searches should encode
together.

There is no wait window and no background thread. A query that finds the encoder idle
is encoded at once, alone: a lone search pays nothing. Queries that arrive while a
batch runs queue up, and when that batch ends its thread hands everything queued (up
to ``max_batch``) to the first queued thread, which encodes it as the next batch. Under
load, batches form by themselves, as large as the number of searches that arrived
during one encode; no thread encodes more than one batch per query it asked for.

The batch goes through the same encoder as a lone query would, so each vector is the
one a lone encode returns, up to the float noise of padding (tested).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)
class _Query:
    """One caller's query, waiting for its vector or for the next batch to run."""

    text: str
    done: threading.Event = field(default_factory=threading.Event)
    batch: list[_Query] | None = None  # set when this caller is to run the next batch
    vector: np.ndarray | None = None
    error: BaseException | None = None


class QueryBatcher:
    """Encodes one query at a time for each caller, in batches across callers.

    ``encode``: texts in, one row per text out (may raise: every caller of the batch
    then raises the same exception).
    """

    def __init__(self, encode: Callable[[Sequence[str]], np.ndarray], *, max_batch: int) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._encode = encode
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._queued: list[_Query] = []
        self._running = False  # a batch is being encoded now

    def encode(self, text: str) -> np.ndarray:
        """The vector of ``text``, encoded alone if the encoder is idle, else in the
        next batch with every query that arrived meanwhile."""
        own = _Query(text)
        with self._lock:
            if self._running:
                self._queued.append(own)
                batch = None
            else:
                self._running = True
                batch = [own]
        if batch is None:
            own.done.wait()
            batch = own.batch  # None: another caller's batch encoded it
        if batch is not None:
            self._run(batch)
        if own.error is not None:
            raise own.error
        assert own.vector is not None
        return own.vector

    def _run(self, batch: list[_Query]) -> None:
        """Encode ``batch`` (its first query is the caller's), answer the others, then
        hand the queue to its first waiter or mark the encoder idle."""
        try:
            vectors = self._encode([q.text for q in batch])
            if len(vectors) != len(batch):
                raise ValueError(f"encoder returned {len(vectors)} rows for {len(batch)} texts")
            for query, vector in zip(batch, vectors):
                query.vector = vector
        except BaseException as exc:  # noqa: BLE001 - every caller of the batch re-raises it
            for query in batch:
                query.error = exc
        finally:
            with self._lock:
                following = self._queued[: self._max_batch]
                del self._queued[: self._max_batch]
                self._running = bool(following)
            if following:
                following[0].batch = following
                following[0].done.set()
            for query in batch[1:]:
                query.done.set()
