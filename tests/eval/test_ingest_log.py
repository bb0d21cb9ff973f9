"""A bench ingest keeps a reserve of disk that grows with its size, and stops loudly under it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import NamedTuple

import pytest

from engram.eval import ingest_log
from engram.eval.bench_calls import BENCH_SCOPE
from engram.eval.ingest_log import IngestLog, reserve_gib
from engram.index_data.ingest import IngestReport
from engram.service.store import StoreUnavailable


class _Usage(NamedTuple):
    total: int
    used: int
    free: int


def test_the_reserve_grows_with_the_ingest_within_its_bounds():
    low, high = ingest_log.RESERVE_GIB
    assert reserve_gib(200) == low  # a small run never asks for more than its merges need
    assert reserve_gib(10_000_000) == high
    middle = reserve_gib(300_000)
    assert low < middle < high
    assert middle == pytest.approx(300_000 * ingest_log.BYTES_PER_RECORD / 2**30)


def test_an_ingest_stops_naming_the_free_space_once_under_its_reserve(tmp_path: Path, monkeypatch):
    said: list[str] = []
    log = IngestLog(200, tmp_path, said.append)
    report = IngestReport(scope=BENCH_SCOPE, seen=100, ingested=100)
    real = shutil.disk_usage(tmp_path)
    plenty = 2 * 2**30  # twice a small run's reserve
    monkeypatch.setattr(ingest_log.shutil, "disk_usage", lambda _p: _Usage(real.total, real.used, plenty))
    log(report)  # above the reserve: a progress line, no stop
    assert said and "100 stored" in said[-1]
    monkeypatch.setattr(ingest_log.shutil, "disk_usage", lambda _p: _Usage(real.total, real.used, 2**29))
    with pytest.raises(StoreUnavailable, match=r"0\.5 GiB free .* under the 1\.0 GiB kept free"):
        log(report)
    assert "stopping the ingest" in said[-1]
