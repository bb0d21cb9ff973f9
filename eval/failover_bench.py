"""Failover benchmark: two `engram serve` replicas on a pg_auto_failover formation
(eval/formation.py, the monitor settings of docs/failover.md), measured through a
lost primary and a planned switchover, and what one formation carries.

Why: the seconds a failover costs and the load one formation takes are what an
operator sizes a deployment by (docs/scale-out.md), and they depend on the machine, so
they are measured, not asserted in a test. Reported per event: seconds from the
primary's death (or the switchover's start) to the first acknowledged write through
each replica, and how calls were answered meanwhile (ok, retriable, anything else).
Capacity: capture + admission pairs from a growing number of clients spread over both
replicas, admissions per second, and the CPU the primary's PostgreSQL used per
admission, from which the admissions/s at which that primary saturates one core
follows (the replicas share this machine, so they may saturate first: both are said).

    .venv/bin/python -m engram.eval.failover_bench --out failover-out
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2

from engram.models.tools import CAPTURE, REQUEST_ADMISSION

from .bench_calls import BENCH_SCOPE, load_claims, note_capture_args
from .client_storm import ClientStorm
from .formation import Formation, Node
from .service_memory import ServedDirectory, _cli_env, answer_of

TIMEOUT_MS = 2000
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _postgres_cpu_s(node: Node) -> float:
    """CPU seconds (user + system) of the node's postmaster and its backends so far."""
    root = node.postmaster_pid()
    if root is None:
        return 0.0
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry.name), int(fields[1])
        if root in (pid, ppid):
            total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return total


class Clients:
    """``count`` clients, each a loop of capture then admission, alternating replicas;
    every answer recorded by the storm (eval/client_storm.py), admissions counted."""

    def __init__(self, replicas: list[ServedDirectory], count: int, run: str) -> None:
        self.replicas, self.run = replicas, run
        self.admitted = 0
        self.storm = ClientStorm(len(replicas), self._step, count)
        self._tokens = [replicas[0].token(load_claims(BENCH_SCOPE, client)) for client in range(count)]
        self._http = [httpx2.Client(timeout=httpx2.Timeout(120.0)) for _ in range(count)]  # one per client

    def start(self) -> Clients:
        self.storm.start()
        return self

    def stop(self) -> None:
        self.storm.stop()
        for http in self._http:
            http.close()

    def _call(self, client: int, which: int, tool: str, args: dict[str, Any]) -> Any:
        served, http, token = self.replicas[which], self._http[client], self._tokens[client]

        def send() -> tuple[str, Any]:
            try:
                return answer_of(http.post(**served.request(token, tool, args, 1)))
            except httpx2.HTTPError as exc:
                return f"transport:{type(exc).__name__}", None

        return self.storm.call(which, send)[1]

    def _step(self, client: int, i: int) -> None:
        which = (client + i) % len(self.replicas)
        cap = self._call(client, which, CAPTURE, note_capture_args(i, client, self.run))
        if cap is None:
            time.sleep(0.1)
            return
        args = {"candidate_id": cap["candidate_id"], "idempotency_key": f"adm-{self.run}-{client}-{i}"}
        out = self._call(client, which, REQUEST_ADMISSION, args)
        if out is not None and out["outcome"]["status"] == "accepted":
            with self.storm.lock:
                self.admitted += 1


def _event(replicas: list[ServedDirectory], formation: Formation, kind: str, clients: int) -> dict[str, Any]:
    """One event under load. A lost primary: from the moment its postgres is dead to
    each replica's first acknowledged write (necessarily on the new primary). A
    switchover: from its start, each replica's gap (first failed call to the next
    acknowledged one). With the answers meanwhile, until both replicas wrote again."""
    load = Clients(replicas, clients, f"{kind}-{secrets.token_hex(3)}").start()
    try:
        time.sleep(3.0)
        before = Counter(load.storm.outcomes)
        primary = formation.primary()
        assert primary is not None
        if kind == "primary_lost":
            primary.stop()  # returns once its postgres is gone
            at = time.monotonic()
        else:
            at = time.monotonic()
            formation.switchover()  # returns once the monitor says it is done
        deadline = at + 180
        while time.monotonic() < deadline and not load.storm.served_since(max(at, time.monotonic() - 0.5)):
            time.sleep(0.1)
        time.sleep(1.0)
        during = Counter(load.storm.outcomes)
        during.subtract(before)
    finally:
        load.stop()
    measured = load.storm.first_ok_after(at) if kind == "primary_lost" else load.storm.ok_gap(at)
    if kind == "primary_lost":
        primary.run()
    formation.wait_settled(180)
    now = formation.primary()
    return {
        "seconds_per_replica": measured,
        "answers_during": {k: v for k, v in during.items() if v},
        "old_primary": primary.name,
        "new_primary": None if now is None else now.name,
    }


def _capacity(replicas: list[ServedDirectory], formation: Formation, steps: list[int], seconds: float) -> list[dict]:
    """Admissions/s per number of clients, and the primary's CPU per admission above
    its idle share (the replicas' heartbeats and rescans)."""
    primary = formation.primary()
    assert primary is not None
    cpu0, t0 = _postgres_cpu_s(primary), time.monotonic()
    time.sleep(seconds)
    idle_share = (_postgres_cpu_s(primary) - cpu0) / (time.monotonic() - t0)
    rows: list[dict[str, Any]] = [{"clients": 0, "primary_cpu_share": round(idle_share, 3)}]
    for clients in steps:
        load = Clients(replicas, clients, f"cap{clients}-{secrets.token_hex(3)}").start()
        time.sleep(2.0)  # warm
        n0, cpu0, t0 = load.admitted, _postgres_cpu_s(primary), time.monotonic()
        time.sleep(seconds)
        n1, cpu1, t1 = load.admitted, _postgres_cpu_s(primary), time.monotonic()
        load.stop()
        rate = (n1 - n0) / (t1 - t0)
        cpu_per = max(cpu1 - cpu0 - idle_share * (t1 - t0), 0.0) / max(n1 - n0, 1)
        rows.append(
            {
                "clients": clients,
                "admissions_per_s": round(rate, 1),
                "primary_cpu_share": round((cpu1 - cpu0) / (t1 - t0), 3),
                "primary_cpu_ms_per_admission_above_idle": round(cpu_per * 1000, 2),
                "primary_saturates_at_per_core": round(1 / cpu_per, 0) if cpu_per > 0 else None,
                "outcomes": dict(load.storm.outcomes),
            }
        )
    return rows


def run(out_dir: Path, *, events: int, clients: int, steps: list[int], seconds: float) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    formation = Formation()
    replicas: list[ServedDirectory] = []
    started = time.monotonic()
    try:
        formation.start()
        report: dict[str, Any] = {"formation_start_s": round(time.monotonic() - started, 1), "timeout_ms": TIMEOUT_MS}
        url, keys = formation.url(), out_dir / "keys"
        (out_dir / "operator").mkdir(exist_ok=True)  # an admin command refuses a data directory it would guess
        subprocess.run(
            [sys.executable, "-m", "engram.service.cli", "admin", "--database-url", url, "--key-dir", str(keys)]
            + ["tenant", "enable", BENCH_SCOPE[0], "--data-dir", str(out_dir / "operator")],
            env=_cli_env(),
            check=True,
            capture_output=True,
        )
        secret = secrets.token_hex(32)
        for name in ("a", "b"):
            extra = ("--database-url", url, "--key-dir", str(keys), "--database-timeout-ms", str(TIMEOUT_MS))
            served = ServedDirectory(out_dir / name, model=False, log=out_dir / f"{name}.log", extra=extra)
            served.secret = secret
            replicas.append(served)
            why_not = served.start(180)
            if why_not is not None:
                raise RuntimeError(f"replica {name}: {why_not}")
        report["capacity"] = _capacity(replicas, formation, steps, seconds)
        report["events"] = [
            {"kind": kind, **_event(replicas, formation, kind, clients)}
            for _ in range(events)
            for kind in ("primary_lost", "switchover")
        ]
    finally:
        for served in replicas:
            served.stop()
        formation.stop()
    (out_dir / "failover.json").write_text(json.dumps(report, indent=2))
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--events", type=int, default=2, help="runs of each event (primary lost, switchover)")
    parser.add_argument("--clients", type=int, default=4, help="clients during the events")
    parser.add_argument("--steps", default="2,4,8", help="clients per capacity step")
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds per capacity step")
    args = parser.parse_args(argv)
    report = run(
        args.out,
        events=args.events,
        clients=args.clients,
        steps=[int(s) for s in args.steps.split(",")],
        seconds=args.seconds,
    )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
