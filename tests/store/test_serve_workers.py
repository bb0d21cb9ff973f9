"""`engram serve --workers 2` on one PostgreSQL database, driven over MCP/HTTP through
its one port: every call answered alike whichever worker takes it (read-your-writes, a
page cursor, a forget gone from every worker's answers and index files), both workers
taking calls, a worker killed with SIGKILL started again with nothing acknowledged lost,
workers that stop once their supervisor is killed, and the settings it refuses.

Each call opens a connection of its own, so the kernel's SO_REUSEPORT hash spreads the
calls over the workers; which worker took a call is read from the audit log in each
worker's data directory.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rel_support import (  # noqa: E402
    PURPOSE,
    ReplicaProcess,
    accept_on,
    confirmed_token,
    enable_tenant,
    key,
    run_on,
    scan_dir,
    search_ids,
    unique_token,
    value,
)

from engram.models.tools import FORGET, GET  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
READY_LINE = re.compile(r"worker (\d+) ready \(pid (\d+)\)")


class Workers(ReplicaProcess):
    """`engram serve --workers 2 --database-url URL` (no model, no rate limit), its
    supervisor logging each worker's start (at info)."""

    def __init__(self, root: Path, database_url: str, key_dir: Path) -> None:
        super().__init__("data", root, database_url, key_dir, "--workers", "2", "--log-level", "info")

    def ready_pids(self) -> list[tuple[int, int]]:
        """(worker, pid) of every "ready" line logged so far, in order."""
        return [(int(w), int(p)) for w, p in READY_LINE.findall(self.log.read_text())]

    def wait_for(self, predicate, timeout_s: float = 120.0) -> None:  # noqa: ANN001
        deadline = time.monotonic() + timeout_s
        while not predicate():
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-2000:]
            assert time.monotonic() < deadline, self.log.read_text()[-2000:]
            time.sleep(0.1)

    def audit_lines(self, worker: int) -> int:
        path = self.data_dir / "workers" / str(worker) / "audit.jsonl"
        return len(path.read_bytes().splitlines()) if path.exists() else 0


@pytest.fixture(scope="module")
def workers(postgres_cluster, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("workers")
    url = postgres_cluster.create_database("workers")
    enable_tenant(url, root / "keys", root / "operator")
    server = Workers(root, url, root / "keys")
    try:
        server.start()  # /readyz answers once worker 0 listens
        server.wait_for(lambda: "with 2 workers" in server.log.read_text())
        yield server
    finally:
        server.stop()


def test_every_call_is_answered_alike_whichever_worker_takes_it(workers: Workers) -> None:
    before = [workers.audit_lines(0), workers.audit_lines(1)]
    word = unique_token()
    made = []
    for i in range(6):
        rid = accept_on(workers, f"Worker note {i} about {word} in the ledger {'x ' * i}")
        made.append(rid)
        # Right after the acknowledgement, on new connections: found, whichever worker answers.
        assert rid in search_ids(workers, word)[0]
        assert value(run_on(workers, GET, {"record_id": rid, "purpose_ref": PURPOSE}))["record"]["record_id"] == rid
    seen: list[str] = []
    ids, cursor = search_ids(workers, word, limit=2)
    seen += ids
    while cursor is not None:
        ids, cursor = search_ids(workers, word, limit=2, page_cursor=cursor)
        seen += ids
    assert len(seen) == len(set(seen)) == 6 and set(seen) == set(made)
    took = [workers.audit_lines(0) - before[0], workers.audit_lines(1) - before[1]]
    assert all(n > 0 for n in took), f"calls per worker: {took}"


def test_forget_is_gone_from_every_worker_when_it_completes(workers: Workers) -> None:
    words = [unique_token() for _ in range(2)]
    rid = accept_on(workers, f"Forget across workers {words[0]} and {words[1]}")
    for _ in range(6):  # new connections, over both workers: each has projected it
        assert search_ids(workers, words[0])[0] == [rid]
    indexes = [workers.data_dir / "workers" / str(w) / "index" for w in (0, 1)]
    # Control: the scan sees the words (one worker suffices: Tantivy's LZ4 can split a
    # word in a store file, about once in 2,000).
    assert any(scan_dir(index, words) for index in indexes)
    args = {"record_id": rid, "idempotency_key": key("fgt"), "reason_ref": "reason:x"}
    out = value(run_on(workers, FORGET, args, confirmed_token(FORGET, args, rid)))
    assert out["projection_invalidation"] == "complete"
    for _ in range(6):
        assert search_ids(workers, words[0])[0] == []
    for index in indexes:
        assert scan_dir(index, words) == {}


def test_a_killed_worker_starts_again_and_nothing_acknowledged_is_lost(workers: Workers) -> None:
    word = unique_token()
    pid = dict(workers.ready_pids())[1]
    os.kill(pid, signal.SIGKILL)
    # Calls start once its listening socket is closed: a connection the kernel queued on
    # a socket that is closing is reset, as on any server that crashes. The socket closes
    # with the process's last thread, and a killed process's main thread shows as a
    # zombie while its other threads are still exiting (the cause of a ReadError here on
    # a loaded machine); the supervisor reaps the worker, and logs it, only once every
    # thread has exited.
    workers.wait_for(lambda: f"worker 1 (pid {pid}) exited with status -9" in workers.log.read_text(), 30)
    assert not _alive(pid)
    made = [accept_on(workers, f"Acknowledged while a worker was down {word} {i}") for i in range(4)]
    workers.wait_for(lambda: any(w == 1 and p != pid for w, p in workers.ready_pids()))
    made += [accept_on(workers, f"Acknowledged after the restart {word} {i}") for i in range(2)]
    for _ in range(6):  # new connections, over both workers
        assert sorted(search_ids(workers, word, limit=50)[0]) == sorted(made)


def test_workers_stop_themselves_when_the_supervisor_is_killed(postgres_cluster, tmp_path: Path) -> None:
    url = postgres_cluster.create_database("orphans")
    enable_tenant(url, tmp_path / "keys", tmp_path / "operator")
    server = Workers(tmp_path, url, tmp_path / "keys")
    try:
        server.start()
        server.wait_for(lambda: "with 2 workers" in server.log.read_text())
        pids = [pid for _, pid in server.ready_pids()]
        assert len(pids) == 2 and all(_alive(pid) for pid in pids)
        server.kill()  # SIGKILL: the supervisor cannot stop its workers
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in pids):
            assert time.monotonic() < deadline, "a worker outlived its supervisor"
            time.sleep(0.1)
    finally:
        server.stop()


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its parent does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ((), "--workers needs a shared store"),
        (("--stdio", "--database-url", "postgresql://nowhere/db"), "--workers serves HTTP"),
    ],
)
def test_settings_workers_refuse(tmp_path: Path, extra: tuple[str, ...], message: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "engram.service.cli",
            "serve",
            "--workers",
            "2",
            "--no-model",
            "-d",
            str(tmp_path),
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert done.returncode == 2
    assert message in done.stderr
