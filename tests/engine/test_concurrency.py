"""Readers and writers at once: every call either succeeds or raises a ContractError, and
the journal and projections are consistent afterwards."""

from __future__ import annotations

import threading

from engine_support import (
    ContractError, ErrorCode, accept, capture, context, forget, get, search, search_ids,
)


def test_concurrent_readers_and_writers(engine) -> None:
    ctx = context(workspace="busy")
    seed = [accept(engine, ctx, f"The ferret worker {i} drains queue {i}.") for i in range(4)]
    failures: list[BaseException] = []
    accepted: dict[int, list[str]] = {0: [], 1: []}
    forgotten: list[str] = []
    stop = threading.Event()

    def writer(n: int) -> None:
        try:
            for i in range(8):
                rid = accept(engine, ctx, f"The ferret writer {n} item {i} drains a queue.")
                accepted[n].append(rid)
                if i % 3 == 0:
                    forget(engine, ctx, rid)
                    forgotten.append(rid)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    def reader() -> None:
        try:
            while not stop.is_set():
                try:
                    out = search(engine, ctx, "ferret queue", limit=50)
                except ContractError as exc:  # a writer's catch-up held the projection too long
                    assert exc.code is ErrorCode.PROJECTION_STALE
                    continue
                for packet in out["records"][:3]:
                    try:
                        get(engine, ctx, packet["record"]["record_id"])
                    except ContractError as exc:  # forgotten meanwhile
                        assert exc.code is ErrorCode.NOT_FOUND
                capture(engine, ctx, "A reader-side draft about ferrets.")
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    writers = [threading.Thread(target=writer, args=(n,)) for n in (0, 1)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join(120)
    stop.set()
    for t in readers:
        t.join(60)
    assert not failures, failures
    assert all(engine.verify_journal().values())
    live = set(seed) | (set(accepted[0]) | set(accepted[1])) - set(forgotten)
    assert set(search_ids(engine, ctx, "ferret queue", limit=50)) == live
    for rid in forgotten:
        assert rid not in search_ids(engine, ctx, "ferret", limit=50)
