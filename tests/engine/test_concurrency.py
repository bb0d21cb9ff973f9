"""Readers and writers at once: every call either succeeds or raises a ContractError, and
the journal and projections are consistent afterwards."""

from __future__ import annotations

import threading

import pytest
from engine_support import (
    ContractError,
    ErrorCode,
    accept,
    admit,
    capture,
    context,
    forget,
    get,
    search,
    search_ids,
)

from engram.service.engine.records import scope_key


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
    assert all(engine.operator.verify_journal().values())
    live = set(seed) | (set(accepted[0]) | set(accepted[1])) - set(forgotten)
    assert set(search_ids(engine, ctx, "ferret queue", limit=50)) == live
    for rid in forgotten:
        assert rid not in search_ids(engine, ctx, "ferret", limit=50)


@pytest.mark.parametrize("hold", ["transaction", "projection"])
def test_a_held_mutation_does_not_block_another_scopes_searches(engine, monkeypatch, hold) -> None:
    """While scope A's admission is held inside its store transaction (the writer lock)
    or while it projects the new record (the projector), scope B's search and get
    answer: they finish before A is released. While A projects, B's own admission also
    projects (the projector locks per scope), and B's next search finds its record."""
    a, b = context(workspace="held-a"), context(workspace="free-b")
    rid_b = accept(engine, b, "The otter ledger balances every night.")
    _, cap = capture(engine, a, "The heron ledger waits for its turn.")
    held, release = threading.Event(), threading.Event()

    def hold_here() -> None:
        held.set()
        assert release.wait(120)

    if hold == "transaction":
        vault, seal = engine.deps.vault, engine.deps.vault.seal_many

        def held_seal(tx, bodies):  # the accepted record's body, sealed inside the transaction
            if any(aad.startswith(f"record\0{a.tenant}\0{a.workspace}\0") for _, aad in bodies):
                hold_here()
            return seal(tx, bodies)

        monkeypatch.setattr(vault, "seal_many", held_seal)
    else:
        ranker, apply = engine.deps.ranker, engine.deps.ranker.apply

        def held_apply(key, *args, **kwargs):
            if key == scope_key(a.scope):
                hold_here()
            return apply(key, *args, **kwargs)

        monkeypatch.setattr(ranker, "apply", held_apply)
    outcome: dict[str, object] = {}
    mutation = threading.Thread(target=lambda: outcome.update(a=admit(engine, a, cap["candidate_id"])))
    mutation.start()
    try:
        assert held.wait(60)
        answered = threading.Event()

        def read_b() -> None:
            outcome["search"] = search_ids(engine, b, "otter ledger")
            outcome["get"] = get(engine, b, rid_b)["record"]["record_id"]
            if hold == "projection":  # (inside a transaction, A holds the single writer)
                _, cap_b = capture(engine, b, "The otter ledger closes at dawn.")
                outcome["b"] = admit(engine, b, cap_b["candidate_id"])["outcome"].get("record_id")
                outcome["search_after"] = search_ids(engine, b, "otter ledger")
            answered.set()

        reader = threading.Thread(target=read_b)
        reader.start()
        assert answered.wait(60)  # B answered...
        assert mutation.is_alive() and not release.is_set()  # ...while A was still held
        assert outcome["search"] == [rid_b] and outcome["get"] == rid_b
        if hold == "projection":
            assert outcome["b"] is not None and set(outcome["search_after"]) == {rid_b, outcome["b"]}
    finally:
        release.set()
        mutation.join(60)
    assert outcome["a"]["outcome"]["status"] == "accepted"
