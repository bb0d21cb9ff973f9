"""Whether a load's batches are written in a worker process, and how that process starts.

Kept apart from :mod:`index_data.writer` (which imports the engine) so that a command
can decide, and start the worker's imports, before its own heavy imports: the worker's
modules take about 0.4 s to import, and a load's indexing waits for its first batch.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver

from engram.models.device import usable_cores

#: The smallest load written in a worker process: a worker's start costs about a second
#: of imports, the time writing this many records takes.
WORKER_FROM = 5_000

#: The module a worker process runs from (it imports the engine).
WORKER_MODULE = "engram.index_data.writer"


def uses_worker(total: int | None, worker: bool | None = None) -> bool:
    """Whether a load of ``total`` records (None: not known) is written in a worker
    process: as ``worker`` says, or when it says nothing (None), where there is a second
    core and at least :data:`WORKER_FROM` records."""
    if worker is not None:
        return worker
    return usable_cores() >= 2 and (total is None or total >= WORKER_FROM)


def writer_count() -> int:
    """Worker processes that write a load written in workers: two from three cores up,
    one below. Two examine their batches side by side and commit them in turn, so the
    writing's one-at-a-time part is the commit (about half of writing a record) instead
    of the whole write; with two cores, though, the second worker takes its core from
    the indexing, and loads were no faster (``docs/results/capacity.md``)."""
    return 2 if usable_cores() >= 3 else 1


def worker_context() -> multiprocessing.context.BaseContext:
    """How a worker process starts: never by fork, as the loading process runs threads
    (the indexes', the pipeline's); from the fork server where there is one."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def prepare_worker() -> None:
    """Start the fork server now with a worker's modules imported, in the background:
    each worker forked from it starts with them, instead of importing them while the
    loading process waits for its first batch. A command calls this before its own
    imports, so that the two overlap. Nothing where workers are spawned."""
    context = worker_context()
    if context.get_start_method() != "forkserver":
        return
    context.set_forkserver_preload([WORKER_MODULE])
    multiprocessing.forkserver.ensure_running()
