"""Chaos matrix: each state-changing admin command run THROUGH the live server (its
operator socket) beside a capture/admission/withdraw/forget storm, with the server
SIGKILLed at a random point (before, during or after the command), then every check of
the crash test: journal chains, store invariants, projections, and every acknowledged
mutation replayed to its original answer after the restart. A backup taken in the
matrix is restored with the live keys: it must verify, and nothing acknowledged as
forgotten comes back.

ENGRAM_CHAOS_ROUNDS (default 1) runs the whole matrix that many times; ENGRAM_CHAOS_SEED
sets the random seed. The CI-sized run is one round: one killed cycle per command.
"""

from __future__ import annotations

import asyncio
import random
import threading
from pathlib import Path
from typing import Any

import pytest
from rel_support import FIGURES, HashingTestEncoder, env_int
from test_crash_safety import (
    WORKERS,
    Ledger,
    launcher_process,
    online_checks,
    recover,
    worker,
)

from engram.service.engine.engine import restore
from engram.service.operator.channel import ChannelAbsent, OperatorFailure, call

pytestmark = pytest.mark.anyio

ROUNDS = env_int("ENGRAM_CHAOS_ROUNDS", 1)
SEED = env_int("ENGRAM_CHAOS_SEED", 4242)
COMMANDS = ("rotate-kek", "backup", "expire", "transition", "rebuild-projections", "sweep-invalidations", "tenant-set")


def _arguments(command: str, cycle: int, tmp_path: Path, ledger: Ledger) -> dict[str, Any]:
    if command == "backup":
        return {"dest": str(tmp_path / f"backup-{cycle}"), "include_keys": False}
    if command == "tenant-set":
        return {"tenant": "acme", "enabled": True}
    if command == "transition":
        live = [m for m, rid in ledger.records.items() if m not in ledger.forgotten | ledger.maybe_forgotten]
        if not live:
            return {}
        marker = live[0]
        ledger.maybe_forgotten.add(marker)  # no longer expected current, whether or not it ran
        return {
            "operation": "dispute",
            "tenant": "acme",
            "workspace": "ws1",
            "record_id": ledger.records[marker],
            "reason_ref": "chaos:dispute",
        }
    return {}


def _run_command(data_dir: Path, command: str, args: dict[str, Any], outcome: dict[str, Any]) -> None:
    try:
        outcome["result"] = call(data_dir, command, args, timeout_s=60)
    except (ChannelAbsent, OperatorFailure, OSError) as exc:  # the kill may cut it short
        outcome["error"] = exc


def _check_restore(tmp_path: Path, data_dir: Path, backup: Path, ledger: Ledger, cycle: int) -> None:
    """The backup restores with the live keys; what was acknowledged forgotten stays gone."""
    target = tmp_path / f"restored-{cycle}"
    engine = restore(backup, target, key_source=data_dir / "keys", encoder=HashingTestEncoder(), load_model=False)
    try:
        assert all(engine.operator.verify_journal().values())
        with engine.deps.store.reader() as tx:
            for marker in ledger.forgotten:
                row = tx.record(("acme", "ws1"), ledger.records[marker]) if marker in ledger.records else None
                assert row is None or row.state == "tombstoned", marker
        FIGURES["chaos: backups restored, forgotten records not revived"] += 1
    finally:
        engine.close()


async def test_admin_commands_beside_a_killed_server(tmp_path: Path):
    rng = random.Random(SEED)
    data_dir = tmp_path / "data"
    server = launcher_process(data_dir, tmp_path / "server.log")
    ledger = Ledger()
    checked = 0
    backups: list[Path] = []
    try:
        server.start()
        cycle = 0
        for _ in range(ROUNDS):
            for command in COMMANDS:
                stop = asyncio.Event()
                tasks = [
                    asyncio.create_task(worker(server.url, n, random.Random(rng.random()), ledger, stop))
                    for n in range(WORKERS)
                ]
                await asyncio.sleep(rng.uniform(0.5, 1.2))
                args = _arguments(command, cycle, tmp_path, ledger)
                outcome: dict[str, Any] = {}
                runner = threading.Thread(target=_run_command, args=(data_dir, command, args, outcome))
                runner.start()
                if command == "backup" and not backups and cycle < len(COMMANDS):
                    # the first round lets one backup finish, so its restore is checked
                    await asyncio.to_thread(runner.join, 60)
                await asyncio.sleep(rng.uniform(0.0, 0.8))  # kill before, during or after it
                await asyncio.to_thread(server.kill)
                stop.set()  # the storm ends before the command is joined (recover finds it ended)
                await asyncio.wait_for(asyncio.gather(*tasks), 60)
                await asyncio.to_thread(runner.join, 60)
                if command == "backup" and "result" in outcome:
                    backups.append(Path(outcome["result"]))
                FIGURES[f"chaos: {command} cycles ({'finished' if 'result' in outcome else 'cut by the kill'})"] += 1
                checked = await recover(server, data_dir, ledger, stop, tasks, checked)
                FIGURES["chaos: SIGKILL cycles survived"] += 1
                cycle += 1
        await online_checks(server.url, ledger, ledger.acked, sorted({op.marker for op in ledger.acked}))
        FIGURES["chaos: acknowledged mutations checked (lost: 0)"] += len(ledger.acked)
    finally:
        server.stop()
    for i, backup in enumerate(backups):
        _check_restore(tmp_path, data_dir, backup, ledger, i)
    assert len(ledger.acked) > len(COMMANDS)  # the storm did work between kills
