"""`engram serve --workers N`: several serving processes behind one port, on a shared store.

Why: one `engram serve` is one Python process, and the Python of its calls (the MCP
layer, fusion, receipts, the store) runs one call at a time under the interpreter lock
(docs/results/mcp-path.md). On a shared store (PostgreSQL) replicas already answer
every call alike whichever of them takes it: read-your-writes, paging cursors,
idempotency keys, confirmation refs, and a forget that completes only once every live
replica of the scope's group has purged the record. This module runs N such replicas
on one machine behind one port, so that one command uses N cores.

How:

* Worker ``i`` is a replica whose data directory is ``<data-dir>/workers/<i>`` (its own
  lock, indexes, operator socket and replica id). Every worker uses the data
  directory's host secret and key files (``--key-dir``, else ``<data-dir>/keys``), and
  the supervisor holds ``<data-dir>``'s lock for as long as it runs.
* Workers listen on the same address with ``SO_REUSEPORT``: the kernel spreads new
  connections over the sockets listening there. A worker opens its socket only once its
  engine is ready, so a worker still warming up never takes a call. The supervisor binds
  the address first without listening, to hold it (and to resolve ``--port 0``).
* Worker 0 starts alone (on a new database it migrates the schema and creates the key
  file). A worker whose directory is new then starts from a seed of worker 0's vectors,
  written through worker 0's operator socket (`engram admin export-vectors`), and embeds
  only the records admitted since. The seed is deleted once every worker is ready. Each
  worker is given the query encoder's export the data directory or worker 0 holds, so
  no worker exports the model again.
* A worker that exits is started again, after one second, doubling to 30 while it keeps
  exiting within a minute of its start. One that exits before it was first ready (a
  setting it refuses) stops the supervisor with its status. SIGTERM or SIGINT stops
  every worker (SIGTERM, then SIGKILL after 20 seconds) and then the supervisor; a
  worker whose supervisor was killed stops itself.

Each worker holds the whole projection of the scopes it serves, so memory grows with the
number of workers, as it does with replicas on separate machines.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event as ProcessEvent
from pathlib import Path
from typing import Any

import typer

from engram.service.settings import Settings

logger = logging.getLogger("engram.workers")

WORKERS_DIR = "workers"
SEED_DIR = "worker-seed"
RESTART_FIRST_DELAY_S = 1.0
RESTART_MAX_DELAY_S = 30.0
#: A worker that ran at least this long before exiting restarts after the first delay.
STEADY_RUN_S = 60.0
STOP_GRACE_S = 20.0
POLL_S = 0.2
ORPHAN_POLL_S = 1.0
EXIT_REFUSED = 2


def worker_dir(data_dir: Path, index: int) -> Path:
    """Worker ``index``'s own data directory."""
    return Path(data_dir) / WORKERS_DIR / str(index)


def listening_socket(host: str, port: int, *, listen: bool = True) -> socket.socket:
    """A TCP socket bound to ``host:port`` with SO_REUSEPORT (listening unless ``listen``
    is false, as the supervisor's hold on the address is)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
        0
    ]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        if listen:
            sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def _run_worker(settings: Settings, secret: bytes, ready: ProcessEvent) -> None:
    """A worker process's body: one replica serving HTTP on the shared address."""
    from engram.service.logs import configure_logging

    from .serve import serve_http

    configure_logging(settings.log_level, settings.log_format)
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    threading.Thread(target=_stop_when_orphaned, args=(os.getppid(),), name="engram-parent-watch", daemon=True).start()
    try:
        serve_http(settings, secret, on_listening=ready.set)
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None


def _stop_when_orphaned(parent: int) -> None:
    """Stop this worker (SIGTERM to itself: the server shuts down cleanly) once the
    supervisor is gone, killed without the chance to stop its workers."""
    while os.getppid() == parent:
        time.sleep(ORPHAN_POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)


@dataclass
class _Worker:
    index: int
    settings: Settings
    process: BaseProcess | None = None
    ready: ProcessEvent | None = None
    started_at: float = 0.0
    was_ready: bool = False
    delay_s: float = RESTART_FIRST_DELAY_S
    restart_at: float | None = None


class Supervisor:
    """Starts, watches and stops the workers of one `engram serve --workers N`."""

    def __init__(self, settings: Settings, secret: bytes, count: int) -> None:
        self._settings = settings
        self._secret = secret
        self._count = count
        self._context = multiprocessing.get_context("spawn")
        self._stopping = threading.Event()
        self._workers: list[_Worker] = []

    def run(self) -> int:
        """Serve until SIGTERM or SIGINT; the exit status."""
        settings = self._settings
        try:
            hold = listening_socket(settings.host, settings.port, listen=False)
        except OSError as exc:
            logger.error("cannot bind %s:%s: %s", settings.host, settings.port, exc.strerror or exc)
            return EXIT_REFUSED
        with contextlib.closing(hold):
            port = hold.getsockname()[1]
            key_dir = settings.key_dir or settings.data_dir / "keys"
            self._workers = [
                _Worker(
                    i,
                    settings.model_copy(
                        update={
                            "data_dir": worker_dir(settings.data_dir, i),
                            "port": port,
                            "key_dir": key_dir,
                            "workers": 1,
                        }
                    ),
                )
                for i in range(self._count)
            ]
            with self._signals():
                status = self._serve(port)
            self._stop_all()
        return status

    def _serve(self, port: int) -> int:
        first, rest = self._workers[0], self._workers[1:]
        self._start(first)
        if not self._wait_ready([first]):
            return self._failed_start([first])
        new = [w for w in rest if not (w.settings.data_dir / "replica_id").is_file()]
        seed = self._seed() if new and self._settings.load_model else None
        try:
            for worker in rest:
                self._start(worker, seed=seed if worker in new else None)
            if not self._wait_ready(rest):
                return self._failed_start(rest)
        finally:
            if seed is not None:
                shutil.rmtree(seed, ignore_errors=True)
        logger.info(
            "serving on http://%s:%s/mcp with %d workers (data directories under %s)",
            self._settings.host,
            port,
            self._count,
            self._settings.data_dir / WORKERS_DIR,
        )
        while not self._stopping.wait(POLL_S):
            self._watch()
        return 0

    def _start(self, worker: _Worker, *, seed: Path | None = None) -> None:
        settings = worker.settings
        if seed is not None:
            settings = settings.model_copy(update={"seed_vectors": seed})
        worker.ready = self._context.Event()
        worker.process = self._context.Process(
            target=_run_worker, args=(settings, self._secret, worker.ready), name=f"engram-worker-{worker.index}"
        )
        worker.process.start()
        worker.started_at, worker.restart_at = time.monotonic(), None

    def _wait_ready(self, workers: list[_Worker]) -> bool:
        """Wait until every one of ``workers`` listens; False if one exits or we stop first."""
        while not self._stopping.is_set():
            for worker in workers:
                self._note_ready(worker)
            if all(w.was_ready for w in workers):
                return True
            if any(w.process is not None and w.process.exitcode is not None for w in workers):
                return False
            time.sleep(POLL_S)
        return False

    def _failed_start(self, workers: list[_Worker]) -> int:
        if self._stopping.is_set():
            return 0
        for worker in workers:
            code = worker.process.exitcode if worker.process is not None else None
            if code is not None:
                logger.error("worker %d exited with status %s before it was ready", worker.index, code)
                return code if code > 0 else 1
        return 1

    def _seed(self) -> Path | None:
        """Worker 0's vectors, exported for new workers to start from (None: the export
        failed, and they embed what they project)."""
        from engram.service.operator.channel import ChannelAbsent, OperatorFailure, call

        seed = self._settings.data_dir / SEED_DIR
        shutil.rmtree(seed, ignore_errors=True)
        try:
            call(self._workers[0].settings.data_dir, "export-vectors", {"out": str(seed.resolve())})
        except (ChannelAbsent, OperatorFailure, OSError) as exc:
            logger.warning("no seed from worker 0 (%s): new workers embed every record they project", exc)
            shutil.rmtree(seed, ignore_errors=True)
            return None
        return seed

    def _note_ready(self, worker: _Worker) -> None:
        if not worker.was_ready and worker.ready is not None and worker.ready.is_set():
            worker.was_ready = True
            assert worker.process is not None
            logger.info("worker %d ready (pid %d)", worker.index, worker.process.pid)

    def _watch(self) -> None:
        """Note workers that became ready; start again each one that exited, after its delay."""
        now = time.monotonic()
        for worker in self._workers:
            self._note_ready(worker)
            process = worker.process
            if process is None or process.exitcode is None:
                continue
            if worker.restart_at is None:
                if now - worker.started_at >= STEADY_RUN_S:
                    worker.delay_s = RESTART_FIRST_DELAY_S
                worker.restart_at = now + worker.delay_s
                logger.warning(
                    "worker %d (pid %d) exited with status %s; starting it again in %.0f s",
                    worker.index,
                    process.pid,
                    process.exitcode,
                    worker.delay_s,
                )
                worker.delay_s = min(RESTART_MAX_DELAY_S, worker.delay_s * 2)
            elif now >= worker.restart_at:
                process.close()
                worker.was_ready = False
                self._start(worker)

    def _stop_all(self) -> None:
        live = [w.process for w in self._workers if w.process is not None and w.process.exitcode is None]
        for process in live:
            process.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for process in live:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.exitcode is None:
                process.kill()
                process.join()

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        def stop(_signum: int, _frame: Any) -> None:
            self._stopping.set()

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
