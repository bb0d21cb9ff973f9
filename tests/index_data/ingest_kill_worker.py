"""A load that waits after its first batch, for a test to kill it with SIGKILL.

Run as `python ingest_kill_worker.py DATA_DIR WRITERS`: ingests generated records with
their batches written in WRITERS worker processes, prints "ready" once the first batch
is written (the workers are running by then) and waits there.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from engram.index_data.ingest import ingest_corpus
from engram.index_data.records import IngestRecord
from engram.service.engine import Engine


def main() -> None:
    engine = Engine.open(Path(sys.argv[1]), load_model=False)
    records = (IngestRecord(f"r{i}", f"ledger note {i} on certificate rotation", f"kb:{i}") for i in range(2_000))

    def wait_after_first(report: object) -> None:
        print("ready", flush=True)
        time.sleep(600)

    ingest_corpus(
        engine,
        ("acme", "kb"),
        records,
        batch_size=50,
        progress=False,
        worker=True,
        writers=int(sys.argv[2]),
        on_batch=wait_after_first,
    )


if __name__ == "__main__":
    main()
