"""Races over real HTTP: concurrent calls on one key or one target have one effect.

ENGRAM_RACE_WIDTH (default 12) sets how many concurrent calls each race fires.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest
from rel_support import (
    FIGURES,
    MODES,
    PURPOSE,
    call,
    capture_args,
    code,
    confirmed_token,
    ctx_token,
    env_int,
    key,
    unique_token,
    value,
)

from engram.models.tools import CAPTURE, FORGET, GET, REQUEST_ADMISSION, WITHDRAW

pytestmark = pytest.mark.anyio

WIDTH = env_int("ENGRAM_RACE_WIDTH", 12)
SCOPE = ("acme", "ws1")


def journal_count(live, kind: str, subject: str) -> int:
    return sum(1 for e in live.engine.deps.store.events(SCOPE) if e.kind == kind and e.subject == subject)


async def storm(calls: list[Any]) -> list[dict[str, Any]]:
    FIGURES["race: concurrent calls"] += len(calls)
    return list(await asyncio.gather(*calls))


async def captured(live, principal: str) -> tuple[str, str]:
    marker = unique_token()
    out = value(
        await call(live.url, ctx_token(principal=principal), "auto", CAPTURE, capture_args(f"race note {marker}"))
    )
    return out["candidate_id"], marker


async def accepted(live, principal: str) -> str:
    cid, _ = await captured(live, principal)
    out = value(
        await call(
            live.url,
            ctx_token(principal=principal),
            "auto",
            REQUEST_ADMISSION,
            {"candidate_id": cid, "idempotency_key": key("admit")},
        )
    )
    return out["outcome"]["record_id"]


async def test_same_key_capture_has_one_effect(live):
    args = capture_args(f"same key capture {unique_token()}")
    tok = ctx_token(principal="racer-1")
    envs = await storm([call(live.url, tok, MODES[i % 2], CAPTURE, args) for i in range(WIDTH)])
    outs = [value(e) for e in envs]
    statuses = Counter(o["status"] for o in outs)
    assert statuses == {"committed_pending": 1, "duplicate_exact": WIDTH - 1}, statuses
    first = next(o for o in outs if o["status"] == "committed_pending")
    assert all({**o, "status": "committed_pending"} == first for o in outs)
    assert journal_count(live, "candidate_captured", first["candidate_id"]) == 1


async def test_same_key_different_content_one_wins(live):
    idem = key("conflict")
    tok = ctx_token(principal="racer-2")
    envs = await storm(
        [
            call(live.url, tok, MODES[i % 2], CAPTURE, capture_args(f"variant {i} {unique_token()}", idem=idem))
            for i in range(WIDTH)
        ]
    )
    oks = [e for e in envs if e["ok"]]
    assert len(oks) == 1 and all(code(e) == "DIGEST_CONFLICT" for e in envs if not e["ok"])


async def test_same_key_admission_has_one_effect(live):
    cid, _ = await captured(live, "racer-3")
    args = {"candidate_id": cid, "idempotency_key": key("admit")}
    tok = ctx_token(principal="racer-3")
    outs = [
        value(e)
        for e in await storm([call(live.url, tok, MODES[i % 2], REQUEST_ADMISSION, args) for i in range(WIDTH)])
    ]
    assert Counter(o["replayed"] for o in outs) == {False: 1, True: WIDTH - 1}
    assert (
        len({json.dumps(o["outcome"], sort_keys=True) for o in outs}) == 1
        and outs[0]["outcome"]["status"] == "accepted"
    )
    assert journal_count(live, "record_accepted", outs[0]["outcome"]["record_id"]) == 1


async def test_concurrent_admissions_of_one_candidate(live):
    cid, _ = await captured(live, "racer-4")
    tok = ctx_token(principal="racer-4")
    envs = await storm(
        [
            call(live.url, tok, MODES[i % 2], REQUEST_ADMISSION, {"candidate_id": cid, "idempotency_key": key("admit")})
            for i in range(WIDTH)
        ]
    )
    oks = [value(e) for e in envs if e["ok"]]
    assert len(oks) == 1 and oks[0]["outcome"]["status"] == "accepted"
    assert {code(e) for e in envs if not e["ok"]} == {"ALREADY_TERMINAL"}
    assert journal_count(live, "record_accepted", oks[0]["outcome"]["record_id"]) == 1


async def test_admission_withdraw_race_one_legal_state(live):
    cid, marker = await captured(live, "racer-5")
    calls = []
    for i in range(WIDTH):
        if i % 2:
            calls.append(
                call(
                    live.url,
                    ctx_token(principal="racer-5"),
                    MODES[i % 2],
                    REQUEST_ADMISSION,
                    {"candidate_id": cid, "idempotency_key": key("admit")},
                )
            )
        else:
            args = {"candidate_id": cid, "idempotency_key": key("withdraw"), "reason_ref": "reason:race"}
            calls.append(
                call(live.url, confirmed_token(WITHDRAW, args, cid, principal="racer-5"), MODES[i % 2], WITHDRAW, args)
            )
    envs = await storm(calls)
    oks = [e for e in envs if e["ok"]]
    assert len(oks) == 1, [e.get("error") for e in envs]
    assert {code(e) for e in envs if not e["ok"]} <= {"ALREADY_TERMINAL"}
    candidate = live.engine.deps.store.reader
    with candidate() as tx:
        row = tx.candidate(SCOPE, cid)
    won = value(oks[0])
    if "outcome" in won:
        assert row.state == "accepted"
        rid = won["outcome"]["record_id"]
        got = await call(live.url, ctx_token(), "auto", GET, {"record_id": rid, "purpose_ref": PURPOSE})
        assert value(got)["record"]["record_id"] == rid
    else:
        assert row.state == "withdrawn" and row.sealed is None and row.key_id is None
        assert journal_count(live, "record_accepted", "") == 0


async def test_concurrent_forgets_of_one_record(live):
    rid = await accepted(live, "racer-6")
    calls = []
    for i in range(WIDTH):
        args = {"record_id": rid, "idempotency_key": key("forget"), "reason_ref": "reason:race"}
        calls.append(
            call(live.url, confirmed_token(FORGET, args, rid, principal="racer-6"), MODES[i % 2], FORGET, args)
        )
    envs = await storm(calls)
    oks = [value(e) for e in envs if e["ok"]]
    assert len(oks) == 1 and oks[0]["replayed"] is False
    assert {code(e) for e in envs if not e["ok"]} == {"ALREADY_TERMINAL"}
    assert journal_count(live, "record_tombstoned", rid) == 1


async def test_same_key_forget_has_one_effect(live):
    rid = await accepted(live, "racer-7")
    args = {"record_id": rid, "idempotency_key": key("forget"), "reason_ref": "reason:race"}
    # Each call carries its own fresh human confirmation of the same operation.
    envs = await storm(
        [
            call(live.url, confirmed_token(FORGET, args, rid, principal="racer-7"), MODES[i % 2], FORGET, args)
            for i in range(WIDTH)
        ]
    )
    outs = [value(e) for e in envs]
    assert Counter(o["replayed"] for o in outs) == {False: 1, True: WIDTH - 1}
    assert len({json.dumps(o["receipt"], sort_keys=True) for o in outs}) == 1
    assert journal_count(live, "record_tombstoned", rid) == 1


async def test_forget_and_admission_storm_across_records(live):
    """Many records at once, each forgotten by several racers: one tombstone each, and the
    journal still verifies."""
    rids = [await accepted(live, "racer-8") for _ in range(4)]
    calls = []
    for rid in rids:
        for i in range(3):
            args = {"record_id": rid, "idempotency_key": key("forget"), "reason_ref": "reason:race"}
            calls.append(
                call(live.url, confirmed_token(FORGET, args, rid, principal="racer-8"), MODES[i % 2], FORGET, args)
            )
    envs = await storm(calls)
    assert sum(1 for e in envs if e["ok"]) == len(rids)
    for rid in rids:
        assert journal_count(live, "record_tombstoned", rid) == 1
    assert all(live.engine.operator.verify_journal().values())
