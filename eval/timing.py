"""Timing the bench's probes and the processes it serves from.

Latencies are summarised as percentiles in milliseconds; several probes are timed taking
turns item by item, so load drift on a shared machine weighs on all of them alike and
their ratios hold; a process's CPU is read from ``/proc`` (whole ticks: only means over
many calls mean anything).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50/p95/p99/mean in milliseconds from seconds."""
    if not samples:
        return {}
    arr = np.asarray(samples) * 1000.0
    return {
        "n": len(samples),
        "mean_ms": round(float(arr.mean()), 3),
        "p50_ms": round(float(np.percentile(arr, 50)), 3),
        "p95_ms": round(float(np.percentile(arr, 95)), 3),
        "p99_ms": round(float(np.percentile(arr, 99)), 3),
    }


def timed(fn: Callable[[Any], Any], items: list[Any], warmup: int = 3) -> list[float]:
    return interleaved({"only": (fn, items)}, warmup)["only"]


def interleaved(probes: dict[str, tuple[Callable[[Any], Any], list[Any]]], warmup: int = 3) -> dict[str, list[float]]:
    """Seconds per item of each probe, the probes taking turns item by item, so a change
    in machine load during the run weighs on every probe alike and their ratios hold."""
    for fn, items in probes.values():
        for item in items[:warmup]:
            fn(item)
    out: dict[str, list[float]] = {name: [] for name in probes}
    for i in range(min(len(items) for _, items in probes.values())):
        for name, (fn, items) in probes.items():
            t = time.perf_counter()
            fn(items[i])
            out[name].append(time.perf_counter() - t)
    return out


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_call(server_s: float, client_s: float, calls: int) -> dict[str, float]:
    """The load run's CPU per call on each side, and the calls per second this machine's
    cores could carry at that cost, server and clients together (the bound a load run on
    one machine cannot pass)."""
    if not calls:
        return {}
    server_ms, client_ms = server_s * 1000 / calls, client_s * 1000 / calls
    cores = os.cpu_count() or 1
    return {
        "server_cpu_ms_per_call": round(server_ms, 1),
        "client_cpu_ms_per_call": round(client_ms, 1),
        "cpu_bound_calls_per_s": round(cores * 1000 / (server_ms + client_ms), 1) if server_ms + client_ms else 0.0,
    }
