"""A long bench ingest's progress in the log, and a stop before the disk fills.

Why: an ingest of ten million records runs for hours in the background on a shared
machine; its log must say how far it got and how fast, and a disk about to fill must end
it loudly (an exception naming the free space, raised from the ingest's own progress
callback) instead of leaving a half-written store behind a process that went quiet.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from engram.index_data.ingest import IngestReport
from engram.service.store import StoreUnavailable

#: Disk a stored record may take at most, its share of merges and checkpoints included
#: (four times the 4 KiB a record measured at 1M, docs/results/capacity.md).
BYTES_PER_RECORD = 16 * 1024
#: The reserve kept free on the data directory's disk, whatever the ingest's size (GiB):
#: at least enough for a small run's merges, at most what a shared machine's others need.
RESERVE_GIB = (1.0, 10.0)
#: Seconds between two progress lines.
EVERY_S = 60.0


class IngestLog:
    """``on_batch`` for :func:`engram.index_data.ingest.ingest_corpus`: a line every
    :data:`EVERY_S` seconds (records seen, stored, rate, free disk); raises
    :class:`StoreUnavailable` once the disk holds less than :func:`reserve_gib` of the
    ingest's size."""

    def __init__(self, size: int, root: Path, say: Callable[[str], None]) -> None:
        self._size = size
        self._root = root
        self._say = say
        self._min_free = reserve_gib(size)
        self._started = time.monotonic()
        self._last = float("-inf")

    def __call__(self, report: IngestReport) -> None:
        free = shutil.disk_usage(self._root).free / 2**30
        now = time.monotonic()
        if free < self._min_free:
            self._say(f"[n={self._size}] stopping the ingest: {free:.1f} GiB free (at least {self._min_free:.1f} kept)")
            raise StoreUnavailable(f"{free:.1f} GiB free on {self._root}, under the {self._min_free:.1f} GiB kept free")
        if now - self._last >= EVERY_S:
            self._last = now
            elapsed = now - self._started
            self._say(
                f"[n={self._size}] ingest: {report.seen:,} of {self._size:,} seen, {report.ingested:,} stored, "
                f"{report.skipped_existing:,} already there, {report.ingested / max(elapsed, 1e-9):,.0f} rec/s "
                f"over {elapsed / 60:.1f} min, {free:.1f} GiB free"
            )


def reserve_gib(size: int) -> float:
    """GiB kept free while ``size`` records are ingested: what the whole ingest could
    write (:data:`BYTES_PER_RECORD` each), within :data:`RESERVE_GIB`. A 200-record run
    keeps 1 GiB; a million-record run or larger keeps 10 GiB."""
    low, high = RESERVE_GIB
    return min(high, max(low, size * BYTES_PER_RECORD / 2**30))
