"""How long a background checkpoint and a purge hold a scope's changes.

Why: an admission applies its record to the scope's vector index, and waits while a
save of the scope holds its changes (``_ScopeVectors.changing``). A soak measures that
wait only mixed with the machine's load and every other call; this measures it alone,
on the ranker's semantic index with no model: ``records`` records of two low-rank 384-d passages
each, then three rounds of 50 more records applied, a background checkpoint of them,
and a purge of one record. For each it prints the whole call's duration and each span
during which the scope's changes were held.

Run: ``python -m engram.eval.scope_hold --records 20000``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from engram.ranking import Ranker

SCOPE = "scope-hold"
DIM = 384
BATCH = 2_000
ROUNDS = 3


class _TimedLock:
    """A scope's ``changing`` lock that notes how long each holder kept it."""

    def __init__(self, lock: Any) -> None:
        self._lock = lock
        self.holds: list[float] = []
        self._since = 0.0

    def __enter__(self) -> None:
        self._lock.acquire()
        self._since = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        self.holds.append(time.monotonic() - self._since)
        self._lock.release()


def _vectors(rng: np.random.Generator, basis: np.ndarray, n: int) -> np.ndarray:
    rows = rng.standard_normal((n, 2, basis.shape[0])).astype(np.float32) @ basis
    return rows / np.linalg.norm(rows, axis=2, keepdims=True)


def run(records: int, root: Path) -> list[dict[str, Any]]:
    """Load ``records`` records, then time the rounds; one row per timed call."""
    ranker = Ranker(root, None, dim=DIM, checkpoint_records=10**9, checkpoint_seconds=1e9)
    index = ranker._semantic  # noqa: SLF001 - the semantic channel alone, its lock measured
    rng = np.random.default_rng(0)
    basis = rng.standard_normal((32, DIM)).astype(np.float32)
    vectors = _vectors(rng, basis, records)
    for start in range(0, records, BATCH):
        upserts = [(f"r{i}", i, vectors[i]) for i in range(start, min(records, start + BATCH))]
        index.apply(SCOPE, upserts=upserts, removals=[], through_cursor=start + BATCH)
    index.checkpoint()
    state = index._scope(SCOPE)  # noqa: SLF001 - the scope's lock is what is measured
    timed = _TimedLock(state.changing)
    setattr(state, "changing", timed)  # noqa: B010 - a lock of another type, timing its holders
    extra = _vectors(rng, basis, 50)
    rows: list[dict[str, Any]] = []

    def timing(name: str, call: Callable[[], object]) -> None:
        timed.holds.clear()
        started = time.monotonic()
        call()
        rows.append({"call": name, "seconds": time.monotonic() - started, "holds": list(timed.holds)})

    for n in range(ROUNDS):
        upserts = [(f"x{n}_{i}", i, extra[i]) for i in range(len(extra))]
        index.apply(SCOPE, upserts=upserts, removals=[], through_cursor=records + BATCH + n)
        timing("checkpoint", lambda: index._background_save(SCOPE))  # noqa: SLF001 - as the checkpointer runs it
        gone = f"r{n}"
        timing("purge", lambda: index.purge(SCOPE, [gone]))  # noqa: B023 - called at once
    ranker.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        for row in run(args.records, Path(scratch)):
            holds = ", ".join(f"{h * 1000:.0f}" for h in row["holds"])
            print(f"{row['call']:<10} {row['seconds']:6.2f} s in all; changes held (ms): {holds}")


if __name__ == "__main__":
    main()
