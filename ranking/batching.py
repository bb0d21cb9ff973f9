"""Natural batching: concurrent callers of one native engine share its runs.

Why: a hybrid search is CPU-bound, and its two native calls cost less per query in a
batch than alone.
- **Query encodes.** One ONNX Runtime run over eight short queries costs a half to two
  thirds of the CPU time of eight runs of one (figures in docs/results/). Concurrent
  runs of one session also compete for its intra-op thread pool.
- **Graph searches.** usearch holds the GIL while it searches, so concurrent searches of
  one index run one at a time. A batch searches its queries on several threads in one
  call.

So concurrent callers should run together.

There is no wait window and no background thread. A caller that finds the engine idle
runs at once, alone: a lone search pays nothing. Callers that arrive while a batch runs
queue up. When that batch ends, its thread hands everything queued (up to
``max_batch``) to the first queued caller, which runs it as the next batch. Under load,
batches form by themselves, as large as the number of callers that arrived during one
run. No thread runs more than one batch per item it submitted.

A batch goes through the same engine call as a lone item would. For encodes, each
vector equals the one a lone encode returns, up to the float noise of padding; for graph
searches, the results are the same. Both are tested.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(eq=False)
class _Waiter(Generic[T, R]):
    """One caller's item, waiting for its result or for the next batch to run."""

    item: T
    done: threading.Event = field(default_factory=threading.Event)
    batch: list[_Waiter[T, R]] | None = None  # set when this caller is to run the next batch
    result: R | None = None
    error: BaseException | None = None


class NaturalBatcher(Generic[T, R]):
    """Runs one item at a time for each caller, in batches across callers.

    ``run``: items in, one result per item out, in order (it may raise: every caller of
    the batch then raises the same exception).
    """

    def __init__(self, run: Callable[[Sequence[T]], Sequence[R]], *, max_batch: int) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._run_batch = run
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._queued: list[_Waiter[T, R]] = []
        self._running = False  # a batch is running now

    def submit(self, item: T) -> R:
        """The result for ``item``: run alone if the engine is idle, else in the next
        batch with every item that arrived meanwhile."""
        own: _Waiter[T, R] = _Waiter(item)
        with self._lock:
            if self._running:
                self._queued.append(own)
                batch = None
            else:
                self._running = True
                batch = [own]
        if batch is None:
            own.done.wait()
            batch = own.batch  # None: another caller's batch ran it
        if batch is not None:
            self._run(batch)
        if own.error is not None:
            raise own.error
        return own.result  # type: ignore[return-value]  # set whenever error is not

    def _run(self, batch: list[_Waiter[T, R]]) -> None:
        """Run ``batch`` (its first item is the caller's), answer the others, then hand
        the queue to its first waiter or mark the engine idle."""
        try:
            results = self._run_batch([w.item for w in batch])
            if len(results) != len(batch):
                raise ValueError(f"a batch of {len(batch)} items returned {len(results)} results")
            for waiter, result in zip(batch, results):
                waiter.result = result
        except BaseException as exc:  # noqa: BLE001 - every caller of the batch re-raises it
            for waiter in batch:
                waiter.error = exc
        finally:
            with self._lock:
                following = self._queued[: self._max_batch]
                del self._queued[: self._max_batch]
                self._running = bool(following)
            if following:
                following[0].batch = following
                following[0].done.set()
            for waiter in batch[1:]:
                waiter.done.set()
