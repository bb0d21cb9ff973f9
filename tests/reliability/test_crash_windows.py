"""Deterministic crash windows inside one call (in-process, no server).

withdraw and forget commit their effect and idempotency reservation first, then finish
the physical part (WAL checkpoint, index purge) and write the final answer back. A crash
(or any failure) between the two must still leave a reservation whose replay is a
schema-valid answer: the caller was told MUTATION_OUTCOME_UNKNOWN and retries with the
same key, and that retry must not be a malformed output.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import confirmed, context
from rel_support import (
    HashingTestEncoder,
    capture_args,
    key,
)

from engram.models.tools import CAPTURE, FORGET, REQUEST_ADMISSION, TOOLS, WITHDRAW
from engram.service.engine import transitions
from engram.service.engine.engine import Engine


@pytest.fixture
def engine(tmp_path: Path):
    eng = Engine.open(tmp_path / "data", encoder=HashingTestEncoder(), load_model=False)
    yield eng
    eng.close()


class Crash(Exception):
    pass


def _accepted(engine: Engine, ctx) -> str:
    cid = engine.execute(CAPTURE, ctx, capture_args("window test zqwindow"))["candidate_id"]
    return engine.execute(REQUEST_ADMISSION, ctx, {"candidate_id": cid, "idempotency_key": key("admit")})["outcome"][
        "record_id"
    ]


def test_forget_interrupted_after_commit_replays_a_valid_answer(engine, monkeypatch):
    ctx = context(workspace="ws1")
    rid = _accepted(engine, ctx)
    args = {"record_id": rid, "idempotency_key": key("forget"), "reason_ref": "reason:x"}

    def crash(*a, **k):
        raise Crash()

    monkeypatch.setattr(transitions, "invalidate", crash)
    with pytest.raises(Crash):
        engine.execute(FORGET, confirmed(ctx, FORGET, rid, args), args)
    monkeypatch.undo()
    replay = engine.execute(FORGET, ctx, args)  # a replay needs no second confirmation
    TOOLS[FORGET].output_model.model_validate(replay)
    assert replay["replayed"] is True and replay["projection_invalidation"] in ("pending", "complete")
    # The restart sweep completes what was left pending.
    engine.operator.sweep_invalidations()


def test_withdraw_interrupted_after_commit_replays_a_valid_answer(engine, monkeypatch):
    ctx = context(workspace="ws1")
    cid = engine.execute(CAPTURE, ctx, capture_args("window test zqwithdraw"))["candidate_id"]
    args = {"candidate_id": cid, "idempotency_key": key("withdraw"), "reason_ref": "reason:x"}

    def crash(*a, **k):
        raise Crash()

    monkeypatch.setattr(engine.deps.store, "purge_freed_pages", crash)
    with pytest.raises(Crash):
        engine.execute(WITHDRAW, confirmed(ctx, WITHDRAW, cid, args), args)
    monkeypatch.undo()
    replay = engine.execute(WITHDRAW, ctx, args)
    TOOLS[WITHDRAW].output_model.model_validate(replay)
    assert replay["replayed"] is True and replay["key_destruction"] in ("pending", "complete")
