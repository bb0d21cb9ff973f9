"""Crash-test worker: a storm of capture / admission / withdraw / forget on one data dir.

Run as `python crash_worker.py DATA_DIR CYCLE SEED`. Prints one JSON line per step:
`{"event": "begin", ...}` before a call and `{"event": "ack", ..., "result": ...}` only
after `Engine.execute` returned (flushed at once), so the parent knows exactly which
mutations were acknowledged when it kills this process with SIGKILL.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

# Run as a script: its own folder is on sys.path; the ranking tests' encoder is beside it.
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "ranking"))

from engine_support import (  # noqa: E402
    CAPTURE,
    FORGET,
    REQUEST_ADMISSION,
    WITHDRAW,
    ContractError,
    capture_args,
    confirmed,
    context,
    open_engine,
)

CRASH_CTX = context(tenant="crash", workspace="storm")


def emit(**fields) -> None:
    sys.stdout.write(json.dumps(fields, sort_keys=True) + "\n")
    sys.stdout.flush()


def token(cycle: int, i: int) -> str:
    return f"crashtok{cycle}n{i}z"


def main() -> None:
    data_dir, cycle, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed * 1000 + cycle)
    engine = open_engine(data_dir)
    emit(event="ready", cycle=cycle)
    pending: list[str] = []
    accepted: list[str] = []
    i = 0
    while True:
        i += 1
        choices = ["capture"] * 3
        if pending:
            choices += ["admit"] * 3 + ["withdraw"]
        if accepted:
            choices += ["forget"]
        op = rng.choice(choices)
        idem = f"crash-{cycle}-{i:06d}-{op}"
        ctx = CRASH_CTX
        if op == "capture":
            tool = CAPTURE
            args = capture_args(f"The {token(cycle, i)} storm record keeps ledger shard {i}.", idempotency_key=idem)
        elif op == "admit":
            tool = REQUEST_ADMISSION
            args = {"candidate_id": pending.pop(rng.randrange(len(pending))), "idempotency_key": idem}
        elif op == "withdraw":
            tool = WITHDRAW
            target = pending.pop(rng.randrange(len(pending)))
            args = {"candidate_id": target, "idempotency_key": idem, "reason_ref": "reason:storm"}
            ctx = confirmed(CRASH_CTX, WITHDRAW, target, args, ref=f"crash-conf-{cycle}-{i}")
        else:
            tool = FORGET
            target = accepted.pop(rng.randrange(len(accepted)))
            args = {"record_id": target, "idempotency_key": idem, "reason_ref": "reason:storm"}
            ctx = confirmed(CRASH_CTX, FORGET, target, args, ref=f"crash-conf-{cycle}-{i}")
        emit(event="begin", cycle=cycle, i=i, tool=tool, args=args)
        try:
            result = engine.execute(tool, ctx, args)
        except ContractError as exc:
            emit(event="error", cycle=cycle, i=i, tool=tool, args=args, code=exc.code.value)
            continue
        emit(event="ack", cycle=cycle, i=i, tool=tool, args=args, result=result)
        if tool == CAPTURE:
            pending.append(result["candidate_id"])
        elif tool == REQUEST_ADMISSION and result["outcome"]["status"] == "accepted":
            accepted.append(result["outcome"]["record_id"])


if __name__ == "__main__":
    main()
