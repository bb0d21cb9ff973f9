"""SIGKILL at each point of a background purge: after a restart no acknowledged
mutation is lost, the purge is finished before the engine serves, and no byte of the
forgotten record's text is left (a high-entropy word, so compression cannot hide it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from engine_support import FORGET, confirmed, files_containing, open_engine, search_ids
from purge_crash_worker import PURGE_CTX, SECRET

WORKER = Path(__file__).resolve().parent / "purge_crash_worker.py"
POINTS = (
    "lexical-copied",
    "lexical-renamed",
    "semantic-begun",
    "semantic-built",
    "semantic-written",
    "semantic-swapped",
    "semantic-saved",
)


@pytest.mark.parametrize("point", POINTS)
def test_kill_during_purge_loses_nothing_and_leaves_no_plaintext(tmp_path: Path, point: str) -> None:
    data_dir = tmp_path / "data"
    log = tmp_path / "worker.log"
    with open(log, "wb") as stderr:
        proc = subprocess.run(
            [sys.executable, str(WORKER), str(data_dir), point],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            timeout=300,
            check=False,
        )
    lines = proc.stdout.decode().splitlines()
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, lines, log.read_text()[-2000:])
    assert len(lines) == 1, lines  # acknowledged, then killed at the point (never "survived")
    acked = json.loads(lines[0])
    assert acked["result"]["projection_invalidation"] == "pending"
    assert acked["on_disk"]  # positive control: the words were on disk when it died

    engine = open_engine(data_dir)
    try:
        assert engine.deps.store.pending_purges() == {}
        assert files_containing(data_dir, SECRET.encode()) == []
        assert not list(data_dir.rglob("*.fresh")) and not list(data_dir.rglob("*.retired"))
        args = acked["args"]
        again = engine.execute(FORGET, confirmed(PURGE_CTX, FORGET, acked["gone"], args, ref="recheck"), args)
        assert again == {**acked["result"], "replayed": True}
        for channels in ("lexical", "lexical_and_semantic"):
            policy = {"minimum_channels": channels, "network": "forbid"}
            found = search_ids(engine, PURGE_CTX, "harbour night shift notes", capability_policy=policy, limit=10)
            assert set(found) == set(acked["keep"]), (channels, found)
    finally:
        engine.close()
