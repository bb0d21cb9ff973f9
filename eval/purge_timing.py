"""How long a forget's physical purge takes, and what it costs the scope's other calls.

Why: a forget in a large scope answers `pending` and leaves the rewrite of the scope's
index files to a background purge (``service.engine.sweeper``); what an operator can
rely on is how long until no byte of the record is left (the purge delay plus one
rewrite), and that admissions and searches of the scope do not wait for the rewrite.
This measures both on the ranker alone, on a synthetic corpus (``corpus_gen``: Zipfian
text, low-rank vectors, no model): for each size, the purge's duration (the median of
three), and the latency of an apply of one record followed by a lexical search, run in a
loop beside a purge and, in the same run, without one.

Run: ``python -m engram.eval.purge_timing --sizes 10000,50000 --out OUT``
(writes OUT/purge_timing.json and prints a table).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from engram.index_data.records import IngestRecord
from engram.ranking import IndexDocument, Ranker

from .corpus_gen import CorpusSpec, SyntheticCorpus
from .timing import percentiles

SCOPE = "purge-timing"
BATCH = 512
PURGES = 3


def _document(record: IngestRecord, record_id: str) -> IndexDocument:
    return IndexDocument(
        scope_key=SCOPE,
        record_id=record_id,
        primary=record.text,
        decision="",
        evidence="",
        context="",
        source_refs=record.source_ref,
        valid_time_ms=record.valid_time_ms,
    )


def _load(ranker: Ranker, size: int) -> tuple[list[IndexDocument], np.ndarray]:
    """Index ``size`` synthetic records in batches; returns the spare records (applied
    during the timing loops) and their vectors."""
    corpus = SyntheticCorpus(CorpusSpec(size=size + 2_000, dim=384, topics=300))
    cursor, n = 0, 0
    spare: list[IndexDocument] = []
    spare_vectors: list[np.ndarray] = []
    for records, vectors in corpus.chunks(BATCH):
        docs = [_document(r, f"mem_{n + i:08d}") for i, r in enumerate(records)]
        n += len(docs)
        if n > size:
            spare += docs
            spare_vectors.append(vectors)
            continue
        cursor += 1
        ranker.apply(SCOPE, upserts=docs, removals=[], through_cursor=cursor, vectors=[v[None, :] for v in vectors])
    ranker.checkpoint(SCOPE)
    return spare, np.vstack(spare_vectors)


class _Calls:
    """Apply one spare record, then search lexically, in a loop; each pair's seconds."""

    def __init__(self, ranker: Ranker, spare: list[IndexDocument], vectors: np.ndarray, cursor: int) -> None:
        self.ranker, self.spare, self.vectors, self.cursor = ranker, spare, vectors, cursor
        self.next = 0

    def run(self, until: threading.Event, at_least: int) -> list[float]:
        from engram.ranking import LEXICAL_PROFILE

        seconds: list[float] = []
        while (not until.is_set() or len(seconds) < at_least) and self.next < len(self.spare):
            doc = self.spare[self.next]
            vector = self.vectors[self.next][None, :]
            self.next += 1
            self.cursor += 1
            started = time.perf_counter()
            self.ranker.apply(SCOPE, upserts=[doc], removals=[], through_cursor=self.cursor, vectors=[vector])
            self.ranker.search(SCOPE, doc.primary.split()[0], LEXICAL_PROFILE, valid_as_of_ms=0)
            seconds.append(time.perf_counter() - started)
        return seconds


def measure(size: int, work: Path) -> dict[str, Any]:
    ranker = Ranker(work / f"n{size}", None, dim=384)
    try:
        spare, vectors = _load(ranker, size)
        cursor = ranker.projection_cursor(SCOPE)["lexical"]
        calls = _Calls(ranker, spare, vectors, cursor)
        durations = []
        beside: list[float] = []
        for i in range(PURGES):
            calls.cursor += 1
            gone = f"mem_{i:08d}"
            ranker.apply(SCOPE, upserts=[], removals=[gone], through_cursor=calls.cursor)
            done = threading.Event()
            result: list[float] = []

            def purge(record_id: str = gone, finished: threading.Event = done, out: list[float] = result) -> None:
                started = time.perf_counter()
                ranker.purge(SCOPE, [record_id])
                out.append(time.perf_counter() - started)
                finished.set()

            worker = threading.Thread(target=purge)
            worker.start()
            beside += calls.run(done, at_least=1)
            worker.join()
            durations += result
        stopped = threading.Event()
        stopped.set()  # as many calls as ran beside the purges, no more
        alone = calls.run(stopped, at_least=len(beside))
        return {
            "size": size,
            "purge_s": round(statistics.median(durations), 3),
            "purges_s": [round(d, 3) for d in durations],
            "apply_and_search_beside_purge_ms": percentiles(beside),
            "apply_and_search_alone_ms": percentiles(alone),
        }
    finally:
        ranker.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,50000")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="purge-timing-") as work:
        for size in (int(s) for s in args.sizes.split(",")):
            rows.append(measure(size, Path(work)))
            print(json.dumps(rows[-1]), flush=True)
    (args.out / "purge_timing.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
